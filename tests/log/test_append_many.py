"""Group commit: ``Log.append_many`` must leave the log exactly as the same appends made
one by one would, and give each request what ``Log.append`` would have given or raised:
good and corrupt requests mixed, idempotent producers (in order, duplicated, out of
order) between plain ones, transactional batches refused, segments rolling mid-run."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pylog.errors import KafkaError, OutOfOrderSequenceNumberError
from pylog.log import Log, LogConfig
from pylog.records import build_batch
from pylog.records.header import iter_batch_headers
from tests.log.batches import make_batch

CONFIG = LogConfig(segment_bytes=3000, index_interval_bytes=200, retention_ms=None)
TS = 1_700_000_000_000


def _idempotent(producer_id: int, sequence: int, count: int, transactional: bool = False) -> bytes:
    return build_batch([(b"k", b"v%d" % i, (), TS) for i in range(count)],
                       producer_id=producer_id, producer_epoch=0, base_sequence=sequence,
                       is_transactional=transactional)


def _corrupt(records: bytes) -> bytes:
    damaged = bytearray(records)
    damaged[-1] ^= 0xFF  # inside the CRC-covered bytes
    return bytes(damaged)


@st.composite
def requests(draw) -> list[tuple[bytes, bool]]:
    """Produce requests' records for one partition, as one connection pipelines them."""
    out = []
    sequence = other_sequence = 0
    sent: list[tuple[int, int]] = []  # producer 7's batches so far: (first sequence, count)
    for tag in range(draw(st.integers(1, 30))):
        kind = draw(st.sampled_from(["plain", "plain", "plain", "two", "corrupt", "empty",
                                     "idempotent", "idempotent", "idempotent", "duplicate",
                                     "older", "gap", "transactional", "other", "both"]))
        count = draw(st.integers(1, 6))
        allow_transactional = True
        if kind == "plain":
            records = make_batch(count, value_size=draw(st.integers(10, 400)), tag=tag)
        elif kind == "two":  # two batches back to back in one request
            records = make_batch(count, tag=tag) + make_batch(1, tag=tag + 1000)
        elif kind == "corrupt":
            records = _corrupt(make_batch(count, tag=tag))
        elif kind == "empty":
            records = b""
        elif kind == "idempotent":
            records = _idempotent(7, sequence, count)
            sent.append((sequence, count))
            sequence += count
        elif kind == "duplicate":  # the producer's last batch again
            records = _idempotent(7, max(sequence - count, 0), count)
        elif kind == "older":  # a retry of any earlier batch (or of a never-sent one)
            first, count = draw(st.sampled_from(sent)) if sent else (0, count)
            records = _idempotent(7, first, count)
        elif kind == "other":  # a second producer, pipelining too
            records = _idempotent(8, other_sequence, count)
            other_sequence += count
        elif kind == "both":  # both producers' next batches in one request
            records = _idempotent(7, sequence, count) + _idempotent(8, other_sequence, 1)
            sent.append((sequence, count))
            sequence += count
            other_sequence += 1
        elif kind == "gap":
            records = _idempotent(7, sequence + 5, count)
        else:
            records = _idempotent(9, 0, count, transactional=True)
            allow_transactional = False
        out.append((records, allow_transactional))
    return out


def _contents(log: Log) -> tuple[list[int], bytes]:
    chunks = []
    for segment in log.segments:
        chunks.append(segment.records.read(0, segment.records.size))
    return [s.base_offset for s in log.segments], b"".join(chunks)


def _outcome(result):
    if isinstance(result, KafkaError):
        return type(result), str(result)
    return result


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(appends=requests(), writable=st.booleans())
def test_append_many_equals_appending_one_by_one(tmp_path_factory, appends, writable) -> None:
    root = tmp_path_factory.mktemp("many")
    grouped = Log.open(root / "grouped-0", CONFIG, clock=lambda: TS / 1000)
    single = Log.open(root / "single-0", CONFIG, clock=lambda: TS / 1000)
    try:
        copy = bytearray if writable else bytes
        results = grouped.append_many([(copy(r), allow) for r, allow in appends], leader_epoch=3)
        expected = []
        for records, allow in appends:
            try:
                expected.append(single.append(copy(records), leader_epoch=3,
                                              allow_transactional=allow))
            except KafkaError as error:
                expected.append(error)
        assert [_outcome(r) for r in results] == [_outcome(e) for e in expected]
        assert _contents(grouped) == _contents(single)
        assert grouped.log_end_offset == single.log_end_offset
        assert grouped.epoch_entries == single.epoch_entries
        assert grouped.producer_state(7) == single.producer_state(7)
        assert grouped.producer_state(8) == single.producer_state(8)
    finally:
        grouped.close()
        single.close()


def test_a_run_spans_a_roll_and_reopens_intact(tmp_path) -> None:
    log = Log.open(tmp_path / "t-0", CONFIG)
    records = [(make_batch(3, value_size=300, tag=i), True) for i in range(20)]
    results = log.append_many(records)
    assert [r.first_offset for r in results] == list(range(0, 60, 3))
    assert len(log.segments) > 1  # 20 batches of ~1 KB in 3 KB segments
    log.close()
    reopened = Log.open(tmp_path / "t-0", CONFIG)
    try:
        assert reopened.log_end_offset == 60
        with reopened.read(30, 1 << 20).region as region:
            data = os.pread(region.fd, region.length, region.position)
        assert [h.base_offset for _, h in iter_batch_headers(data)][:2] == [30, 33]
    finally:
        reopened.close()


def test_an_out_of_order_batch_fails_alone(tmp_path) -> None:
    log = Log.open(tmp_path / "t-0", CONFIG)
    try:
        results = log.append_many([(make_batch(1), True), (_idempotent(5, 0, 2), True),
                                   (_idempotent(5, 7, 1), True), (make_batch(2), True)])
        assert isinstance(results[2], OutOfOrderSequenceNumberError)
        assert [r.first_offset for i, r in enumerate(results) if i != 2] == [0, 1, 3]
        assert log.log_end_offset == 5
    finally:
        log.close()


def test_a_closed_log_refuses_the_whole_call(tmp_path) -> None:
    log = Log.open(tmp_path / "t-0", CONFIG)
    log.close()
    with pytest.raises(KafkaError):
        log.append_many([(make_batch(1), True)])


def test_a_pipelining_idempotent_producer_is_written_with_one_call(tmp_path, monkeypatch) -> None:
    """Requests of idempotent producers that continue their sequences share one write;
    a retry among them (it may be a duplicate) is checked after the run before it is
    written, and answered with the offsets it was first written at."""
    log = Log.open(tmp_path / "t-0", LogConfig(retention_ms=None))
    writes = []
    real_pwritev = os.pwritev
    monkeypatch.setattr(os, "pwritev", lambda fd, buffers, offset: writes.append(len(buffers))
                        or real_pwritev(fd, buffers, offset))
    try:
        first = log.append_many([(_idempotent(7, i, 1), True) for i in range(50)]
                                + [(_idempotent(8, 0, 2), True), (_idempotent(7, 50, 1), True)])
        assert [r.first_offset for r in first] == list(range(50)) + [50, 52]
        assert writes == [52]
        writes.clear()
        second = log.append_many([(_idempotent(7, 51, 1), True), (_idempotent(7, 3, 1), True),
                                  (_idempotent(7, 52, 1), True)])
        # The retry of sequence 3 is older than the five batches kept: out of order.
        assert second[0].first_offset == 53 and isinstance(second[1], OutOfOrderSequenceNumberError)
        assert second[2].first_offset == 54
        assert writes == [1, 1]  # the run before the retry, then the one after it
        writes.clear()
        third = log.append_many([(_idempotent(7, 53, 1), True), (_idempotent(7, 52, 1), True)])
        assert third[0].first_offset == 55
        assert third[1].first_offset == 54 and third[1].record_count == 0  # a duplicate
        assert writes == [1]
    finally:
        log.close()
