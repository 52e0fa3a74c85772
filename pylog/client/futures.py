"""Per-record delivery futures that share one lock per batch.

A plain ``concurrent.futures.Future`` builds its own Condition (a lock, a deque and the
condition object) -- for a producer sending hundreds of thousands of records a second,
most of the per-record cost is creating and later garbage-collecting those. A
``RecordFuture`` is a real Future subclass (``result()``, ``add_done_callback()``,
``concurrent.futures.wait`` all work) whose Condition is the one of its batch.

Two rules keep a shared Condition correct, because ``Future.result()`` waits once and does
not loop on spurious wake-ups: a batch's futures are settled together while holding the
batch's condition (see :func:`settle_all`), so a woken waiter always finds its own
future done; and a record future cannot be cancelled (the record may already be on the
wire), so no single future ever notifies its siblings.

That relies on the attributes ``Future.__init__`` sets, which have been the same since
Python 3.2; if a Python release changes them, ``new_record_future`` falls back to plain
Futures.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, InvalidStateError

_PLAIN_ATTRIBUTES = {"_condition", "_state", "_result", "_exception", "_waiters", "_done_callbacks"}


class RecordFuture(Future):
    """A Future whose Condition is shared with the other records of its batch."""

    def __init__(self, condition: threading.Condition) -> None:  # noqa: super() not called on purpose
        self._condition = condition
        self._state = "PENDING"
        self._result = None
        self._exception = None
        self._waiters = []
        self._done_callbacks = []

    def cancel(self) -> bool:
        """Records cannot be cancelled once queued; always False."""
        return False


_SHARING_WORKS = set(vars(Future())) == _PLAIN_ATTRIBUTES


def new_record_future(condition: threading.Condition) -> Future:
    """A pending Future for one record, sharing ``condition`` when that is safe."""
    return RecordFuture(condition) if _SHARING_WORKS else Future()


def settle_all(condition: threading.Condition, futures: list[Future], results: list | None = None,
               exception: BaseException | None = None) -> None:
    """Give every future of a batch its result (or ``exception``), holding the batch lock.

    Futures already settled are left alone.
    """
    with condition:
        for i, future in enumerate(futures):
            try:
                if exception is not None:
                    future.set_exception(exception)
                else:
                    future.set_result(results[i])
            except InvalidStateError:
                pass
