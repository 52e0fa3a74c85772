"""Record futures sharing one Condition per batch behave as plain Futures to their users;
``deliver`` settles a batch's futures and calls its callbacks."""

import threading
import time
from concurrent.futures import as_completed, wait

from pylog.client import futures as record_futures
from pylog.client.futures import RecordFuture, deliver, new_record_future, unwatched
from pylog.client.results import RecordMetadata


def test_sharing_is_active_on_this_python():
    assert record_futures._SHARING_WORKS
    assert isinstance(new_record_future(threading.Condition()), RecordFuture)


def test_waiters_on_sibling_futures_each_get_their_own_result():
    condition = threading.Condition()
    batch = [new_record_future(condition) for _ in range(50)]
    got, errors = {}, []

    def wait_for(i):
        try:
            got[i] = batch[i].result(timeout=30)
        except Exception as exc:  # a spurious wake-up would surface as TimeoutError
            errors.append(exc)

    threads = [threading.Thread(target=wait_for, args=(i,)) for i in range(50)]
    for thread in threads:
        thread.start()
    deliver(condition, batch, "t", 3, 100, list(range(50)))
    for thread in threads:
        thread.join(30)
    assert errors == [] and got == {i: RecordMetadata("t", 3, 100 + i, i) for i in range(50)}


def test_callbacks_wait_as_completed_and_exceptions():
    condition = threading.Condition()
    batch = [new_record_future(condition) for _ in range(3)]
    called = []
    batch[1].add_done_callback(lambda f: called.append(f.exception()))
    assert batch[0].cancel() is False and not batch[0].cancelled()
    error = ValueError("broker said no")
    waited = threading.Thread(target=wait, args=(batch,), kwargs={"timeout": 30})
    waited.start()
    deadline = time.monotonic() + 30
    while not all(f.has_listeners() for f in batch) and time.monotonic() < deadline:
        time.sleep(0.001)
    assert all(f.has_listeners() for f in batch)  # wait() is waiting on the pending futures
    deliver(condition, batch, "t", 0, -1, [7, 8, 9], error)
    waited.join(30)
    assert called == [error] and not waited.is_alive()
    assert set(as_completed(batch, timeout=5)) == set(batch)
    assert wait(batch, timeout=5).not_done == set()
    assert all(f.exception() is error for f in batch)
    deliver(condition, batch, "t", 0, 5, [7, 8, 9])  # already settled: left alone
    assert batch[2].exception() is error


def test_deliver_settles_futures_and_calls_callbacks_in_record_order():
    condition = threading.Condition()
    calls = []
    future = new_record_future(condition)
    assert not future.has_listeners()
    waiters = [lambda e, m: calls.append((e, m)), None, future, lambda e, m: calls.append((e, m))]
    deliver(condition, waiters, "t", 1, 40, [10, 11, 12, 13, 14])
    assert unwatched(waiters, 5) == 2  # record 1 and record 4 (past the list's end) had nobody waiting
    assert calls == [(None, RecordMetadata("t", 1, 40, 10)), (None, RecordMetadata("t", 1, 43, 13))]
    assert future.result(timeout=0) == RecordMetadata("t", 1, 42, 12)
    assert not future.has_listeners()  # the fast path made no lists


def test_deliver_without_futures_calls_each_callback_with_its_error():
    calls = []
    waiters = [None, lambda e, m: calls.append((e, m))]
    error = ValueError("refused")
    deliver(threading.Condition(), waiters, "t", 0, -1, [5, 6], error, has_futures=False)
    assert calls == [(error, RecordMetadata("t", 0, -1, 6))]


def test_a_delivered_futures_metadata_is_made_when_first_read():
    condition = threading.Condition()
    batch = [new_record_future(condition) for _ in range(3)]
    deliver(condition, batch, "t", 2, -1, [5, 6, 7])  # written, offsets not known (acks=0)
    deliver(condition, batch, "t", 2, 90, [5, 6, 7])  # settled once: left alone
    assert all(f.done() and "_result" not in vars(f) for f in batch)  # nothing made yet
    first = batch[1].result(timeout=0)
    assert first == RecordMetadata("t", 2, -1, 6) and batch[1].result(timeout=0) is first
    assert [f.result(timeout=0).timestamp for f in batch] == [5, 6, 7]
    assert repr(batch[0]).endswith("state=finished returned RecordMetadata>")
