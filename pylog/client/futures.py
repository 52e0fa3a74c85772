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


class _MetadataOnFirstRead:
    """A delivered RecordFuture's ``_result``, its RecordMetadata made the first time it is
    read (``result()``) from the batch's shared delivery and the record's index.

    Settling a future is then three attribute stores and no new object: a caller holding
    hundreds of thousands of futures, most never read, does not pay the garbage
    collector for as many metadata objects. It has no ``__set__``, so the metadata it
    makes (or ``set_result``'s) becomes the future's own attribute."""

    def __get__(self, future, owner=None):
        if future is None:
            return self
        delivered = future._delivered
        if delivered is None:
            return None
        topic, partition, base_offset, timestamps = delivered
        index = future._index
        metadata = _record_metadata(topic, partition, base_offset + index if base_offset >= 0 else -1,
                                    timestamps[index])
        future._result = metadata
        return metadata


class RecordFuture(Future):
    """A Future whose Condition is shared with the other records of its batch.

    Only the condition is set per future; the pending state is the class's, the lists
    are made on first use, and a delivered future's metadata on first read."""

    _state = "PENDING"
    _result = _MetadataOnFirstRead()
    _exception = None
    _waiters = _ListOnFirstUse()
    _done_callbacks = _ListOnFirstUse()
    _list_waiters = _list_done_callbacks = None
    _delivered: tuple[str, int, int, list[int]] | None = None  # (topic, partition, base offset, timestamps)
    _index = 0

    def __init__(self, condition: threading.Condition) -> None:  # super().__init__() not called on purpose
        self._condition = condition

    def has_listeners(self) -> bool:
        """Whether a done-callback or a ``concurrent.futures.wait`` waits on this future
        (without making its lists)."""
        return bool(self._list_waiters or self._list_done_callbacks)

    def cancel(self) -> bool:
        """Records cannot be cancelled once queued; always False."""
        return False


_SHARING_WORKS = set(vars(Future())) == _PLAIN_ATTRIBUTES


def new_record_future(condition: threading.Condition) -> Future:
    """A pending Future for one record, sharing ``condition`` when that is safe."""
    return RecordFuture(condition) if _SHARING_WORKS else Future()


def _metadata_maker() -> Callable[[str, int, int, int], RecordMetadata]:
    """``RecordMetadata(topic, partition, offset, timestamp)``, about twice as fast.

    A frozen dataclass's ``__init__`` goes through ``object.__setattr__`` for each field,
    and the sender makes one per record waited for: this fills the slots directly (what
    that ``__init__`` does). Falls back to the class if its fields ever change.
    """
    fields = ("topic", "partition", "offset", "timestamp")
    if getattr(RecordMetadata, "__slots__", None) != fields:
        return RecordMetadata
    new = object.__new__
    set_topic, set_partition, set_offset, set_timestamp = (getattr(RecordMetadata, f).__set__ for f in fields)

    def record_metadata(topic: str, partition: int, offset: int, timestamp: int) -> RecordMetadata:
        metadata = new(RecordMetadata)
        set_topic(metadata, topic)
        set_partition(metadata, partition)
        set_offset(metadata, offset)
        set_timestamp(metadata, timestamp)
        return metadata
    return record_metadata


_record_metadata = _metadata_maker()


def deliver(condition: threading.Condition, waiters: list, topic: str, partition: int,
            base_offset: int, timestamps: list[int], exception: BaseException | None = None,
            has_futures: bool = True) -> None:
    """Settle the waiters of one batch: each is None, a record future, or an
    ``on_delivery(error, metadata)`` callback; entry ``i`` is record ``i`` (offset
    ``base_offset + i``, or -1 when not known or on failure). Futures are settled first,
    together under the batch lock (skipped when ``has_futures`` is False), then callbacks
    are called in record order; a callback that raises is logged and does not stop the
    others.
    """
    known = exception is None and base_offset >= 0
    if has_futures:
        delivered = (topic, partition, base_offset if known else -1, timestamps)
        with condition:
            for i, waiter in enumerate(waiters):
                if waiter.__class__ is RecordFuture:
                    if waiter._state != "PENDING":
                        continue  # settled already
                    if exception is None and not (waiter._list_waiters or waiter._list_done_callbacks):
                        # what set_result does, with the metadata made when first read
                        waiter._delivered, waiter._index, waiter._state = delivered, i, "FINISHED"
                        continue
                elif waiter is None or not isinstance(waiter, Future):
                    continue
                _settle(waiter, _record_metadata(topic, partition, base_offset + i if known else -1,
                                                 timestamps[i]), exception)
            condition.notify_all()
    for i, waiter in enumerate(waiters):
        if waiter is None or (has_futures and isinstance(waiter, Future)):
            continue
        try:
            waiter(exception, _record_metadata(topic, partition, base_offset + i if known else -1, timestamps[i]))
        except Exception:
            log.exception("on_delivery callback %r raised for %s-%d", waiter, topic, partition)


def _settle(future: Future, metadata: RecordMetadata, exception: BaseException | None) -> None:
    try:
        if exception is not None:
            future.set_exception(exception)
        else:
            future.set_result(metadata)
    except InvalidStateError:
        pass  # already settled


def unwatched(waiters: list, count: int) -> int:
    """How many of a batch's ``count`` records have nobody waiting for them."""
    return count - len(waiters) + waiters.count(None)
