"""Record futures sharing one Condition per batch behave as plain Futures to their users."""

import threading
from concurrent.futures import as_completed, wait

from pylog.client import futures as record_futures
from pylog.client.futures import RecordFuture, new_record_future, settle_all


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
    settle_all(condition, batch, [f"r{i}" for i in range(50)])
    for thread in threads:
        thread.join(30)
    assert errors == [] and got == {i: f"r{i}" for i in range(50)}


def test_callbacks_wait_as_completed_and_exceptions():
    condition = threading.Condition()
    batch = [new_record_future(condition) for _ in range(3)]
    called = []
    batch[1].add_done_callback(lambda f: called.append(f.exception()))
    assert batch[0].cancel() is False and not batch[0].cancelled()
    error = ValueError("broker said no")
    settle_all(condition, batch, exception=error)
    assert called == [error]
    assert set(as_completed(batch, timeout=5)) == set(batch)
    assert wait(batch, timeout=5).not_done == set()
    assert all(f.exception() is error for f in batch)
    settle_all(condition, batch, ["late"] * 3)  # already settled: left alone
    assert batch[2].exception() is error
