"""The producer's accumulator with an injected clock: when batches are ready, sizes, memory."""

import threading
import time

import pytest

from pylog.client.accumulator import RecordAccumulator
from pylog.errors import RequestTimedOutError
from pylog.records import decode_batch
from pylog.types import TopicPartition

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _accumulator(clock, **overrides):
    settings = dict(batch_size=1000, linger_s=0.005, compression=0, buffer_memory=1 << 20, clock=clock)
    settings.update(overrides)
    return RecordAccumulator(**settings)


def test_a_batch_is_ready_after_linger_or_when_full():
    clock = FakeClock()
    new_batches = []
    acc = _accumulator(clock, on_new_batch=new_batches.append)
    acc.append(TP0, None, b"x" * 100, (), 1, 1.0)
    with acc.cond:
        assert acc.drain(clock.now, force=False) == []
        assert acc.next_ready_in(clock.now) == pytest.approx(0.005)
    clock.now += 0.01
    with acc.cond:
        (batch,) = acc.drain(clock.now, force=False)
    assert [r.value for r in decode_batch(batch.encoded()).records] == [b"x" * 100]
    for i in range(20):  # 20 x ~110 bytes: more than one 1000-byte batch
        acc.append(TP1, None, bytes([i]) * 100, (), i, 1.0)
    assert new_batches == [TP1, TP1]
    with acc.cond:
        full = acc.drain(clock.now, force=False)  # the closed batches, not the fresh one
        assert all(b.size <= 1000 for b in full) and len(full) == 2
        rest = acc.drain(clock.now, force=True)
    values = [r.value for b in full + rest for r in decode_batch(b.encoded()).records]
    assert values == [bytes([i]) * 100 for i in range(20)]


def test_a_record_larger_than_batch_size_gets_its_own_batch():
    clock = FakeClock()
    acc = _accumulator(clock, batch_size=100)
    acc.append(TP0, None, b"small", (), 1, 1.0)
    acc.append(TP0, None, b"L" * 500, (), 2, 1.0)
    acc.append(TP0, None, b"after", (), 3, 1.0)
    with acc.cond:
        batches = acc.drain(clock.now, force=True)
    assert [[r.value for r in decode_batch(b.encoded()).records] for b in batches] == [
        [b"small"], [b"L" * 500], [b"after"]]


def test_retried_batches_wait_for_their_backoff_and_go_first():
    clock = FakeClock()
    acc = _accumulator(clock)
    acc.append(TP0, None, b"first", (), 1, 1.0)
    with acc.cond:
        (batch,) = acc.drain(clock.now, force=True)
    acc.append(TP0, None, b"second", (), 2, 1.0)
    batch.attempts = 1
    acc.reenqueue(batch, retry_at=clock.now + 0.5)
    with acc.cond:
        assert acc.drain(clock.now, force=True) == []  # order kept: nothing overtakes the retry
    clock.now += 0.5
    with acc.cond:
        drained = acc.drain(clock.now, force=True)
    assert [decode_batch(b.encoded()).records[0].value for b in drained] == [b"first", b"second"]


def test_buffer_memory_blocks_then_times_out_and_frees_on_completion():
    acc = _accumulator(time.monotonic, buffer_memory=300)
    acc.append(TP0, None, b"x" * 250, (), 1, 1.0)  # with the batch header: over 300 bytes
    with pytest.raises(RequestTimedOutError, match="buffer of 300 bytes"):
        acc.append(TP0, None, b"y", (), 2, 0.05)
    with acc.cond:
        (batch,) = acc.drain(0, force=True)
    done = threading.Event()

    def blocked_append():
        acc.append(TP0, None, b"z", (), 3, 10.0)
        done.set()

    thread = threading.Thread(target=blocked_append)
    thread.start()
    acc.complete(batch)  # delivery frees the bytes and wakes the blocked sender
    thread.join(10)
    assert done.is_set() and acc.incomplete == 1
    with acc.cond:
        (last,) = acc.drain(0, force=True)
    acc.complete(last)
    assert acc.incomplete == 0 and acc._bytes_held == 0  # every byte counted in is counted out


def test_batches_put_back_in_any_order_go_again_in_their_first_order():
    """The sender puts back what it drained when a partition has no leader or a request
    times out, one batch at a time; numbered or not, they leave again in the order they were
    created, ahead of the batches that came after them."""
    clock = FakeClock()
    acc = _accumulator(clock, batch_size=100)
    for i in range(4):
        acc.append(TP0, None, b"%d" % i + b"." * 60, (), i, 1.0)
    with acc.cond:
        drained = acc.drain(clock.now, force=True)
    assert len(drained) == 4
    acc.append(TP0, None, b"4" + b"." * 60, (), 4, 1.0)
    for batch in (drained[2], drained[0], drained[3], drained[1]):
        batch.attempts = 1
        acc.reenqueue(batch, retry_at=clock.now)
    with acc.cond:
        again = acc.drain(clock.now, force=True)
    assert [decode_batch(b.encoded()).records[0].value[:1] for b in again] == [
        b"0", b"1", b"2", b"3", b"4"]
