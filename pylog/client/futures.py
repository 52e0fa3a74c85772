"""Per-record delivery: futures that share one lock per batch, and delivery callbacks.

A plain ``concurrent.futures.Future`` builds its own Condition (a lock, a deque and the
condition object) -- for a producer sending hundreds of thousands of records a second,
most of the per-record cost is creating and later garbage-collecting those. A
``RecordFuture`` is a real Future subclass (``result()``, ``add_done_callback()``,
``concurrent.futures.wait`` all work) whose Condition is the one of its batch.

Two rules keep a shared Condition correct, because ``Future.result()`` waits once and does
not loop on spurious wake-ups: a batch's futures are settled together while holding the
batch's condition (see :func:`deliver`), so a woken waiter always finds its own
future done; and a record future cannot be cancelled (the record may already be on the
wire), so no single future ever notifies its siblings.

That relies on the attributes ``Future.__init__`` sets, which have been the same since
Python 3.2; if a Python release changes them, ``new_record_future`` falls back to plain
Futures.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, InvalidStateError
from typing import Callable

from pylog.client.results import RecordMetadata

log = logging.getLogger(__name__)

_PLAIN_ATTRIBUTES = {"_condition", "_state", "_result", "_exception", "_waiters", "_done_callbacks"}


class _ListOnFirstUse:
    """A Future's list attribute (``_waiters``, ``_done_callbacks``) made the first time it
    is used: most record futures never need theirs, and two fewer objects per record
    means far less garbage-collector work while a caller holds many futures."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = "_list" + name

    def __get__(self, future, owner=None):
        if future is None:
            return self
        found = getattr(future, self.name, None)
        if found is None:
            found = []
            setattr(future, self.name, found)
        return found

    def __set__(self, future, value) -> None:
        setattr(future, self.name, value)


class RecordFuture(Future):
    """A Future whose Condition is shared with the other records of its batch.

    Only the condition is set per future; the pending state is the class's, and the
    lists are made on first use."""

    _state = "PENDING"
    _result = None
    _exception = None
    _waiters = _ListOnFirstUse()
    _done_callbacks = _ListOnFirstUse()

    def __init__(self, condition: threading.Condition) -> None:  # super().__init__() not called on purpose
        self._condition = condition

    def has_listeners(self) -> bool:
        """Whether a done-callback or a ``concurrent.futures.wait`` waits on this future
        (without making its lists)."""
        return (getattr(self, "_list_waiters", None) or getattr(self, "_list_done_callbacks", None)) is not None

    def cancel(self) -> bool:
        """Records cannot be cancelled once queued; always False."""
        return False


_SHARING_WORKS = set(vars(Future())) == _PLAIN_ATTRIBUTES


def new_record_future(condition: threading.Condition) -> Future:
    """A pending Future for one record, sharing ``condition`` when that is safe."""
    return RecordFuture(condition) if _SHARING_WORKS else Future()


def deliver(condition: threading.Condition, waiters: list, topic: str, partition: int,
            base_offset: int, timestamps: list[int], exception: BaseException | None = None) -> int:
    """Settle the waiters of one batch: each is None, a record future, or an
    ``on_delivery(error, metadata)`` callback; entry ``i`` is record ``i`` (offset
    ``base_offset + i``, or -1 when not known or on failure). Futures are settled first,
    together under the batch lock, then callbacks are called in record order; a callback
    that raises is logged and does not stop the others.

    Returns how many of the ``len(timestamps)`` records had nobody waiting.
    """
    callbacks: list[tuple[Callable, RecordMetadata]] = []
    waited = 0
    with condition:
        for i, waiter in enumerate(waiters):
            if waiter is None:
                continue
            waited += 1
            offset = base_offset + i if base_offset >= 0 and exception is None else -1
            metadata = RecordMetadata(topic, partition, offset, timestamps[i])
            if not isinstance(waiter, Future):
                callbacks.append((waiter, metadata))
            elif (exception is None and waiter.__class__ is RecordFuture and waiter._state == "PENDING"
                  and not waiter.has_listeners()):
                waiter._result, waiter._state = metadata, "FINISHED"  # what set_result does
            else:
                try:
                    if exception is not None:
                        waiter.set_exception(exception)
                    else:
                        waiter.set_result(metadata)
                except InvalidStateError:
                    pass  # already settled
        condition.notify_all()
    for callback, metadata in callbacks:
        try:
            callback(exception, metadata)
        except Exception:
            log.exception("on_delivery callback %r raised for %s-%d", callback, topic, partition)
    return len(timestamps) - waited
