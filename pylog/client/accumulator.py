"""The producer's record accumulator: per-partition queues of batches being filled.

``send()`` and ``produce()`` append to the open batch of the partition (a new one when
the record would push it past ``batch_size``); the record is encoded into the batch's
buffer right away (:class:`~pylog.records.records_buffer.RecordsBuffer`, in C when
built), and a future exists only for the records that asked for one. The sender thread
drains batches that are *ready*: full, older than ``linger_ms``, or everything when a
flush or close asks for it. Bytes held in unsent or unacknowledged batches are capped by
``buffer_memory``; ``append`` waits for room.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Callable, Sequence

from pylog.client.futures import new_record_future
from pylog.errors import RequestTimedOutError
from pylog.records import BATCH_HEADER_SIZE, BatchBuilder
from pylog.records.record import Header
from pylog.records.records_buffer import RecordsBuffer
from pylog.types import TopicPartition


# ``append``'s ``waiter`` asking for a new future (None: nobody waits for the record).
NEW_FUTURE = object()


@dataclass(eq=False)
class ProducerBatch:
    """One batch on its way: the records (encoded as appended), who waits for them, retry state.

    ``waiters`` is lazily aligned with the records: entry ``i`` is record ``i``'s future or
    ``on_delivery`` callback, or None; records past its end have nobody waiting (a
    producer that never asks for futures or callbacks keeps it empty).
    """

    tp: TopicPartition
    builder: BatchBuilder
    created: float
    held: int  # bytes of the accumulator's buffer_memory this batch holds
    waiters: list = field(default_factory=list)
    condition: threading.Condition = field(default_factory=threading.Condition)
    attempts: int = 0
    retry_at: float = 0.0
    closed: bool = False
    done: bool = False  # delivered or failed
    has_futures: bool = False  # some waiter is a future (not only callbacks)
    sequence: int | None = None  # an idempotent producer's base sequence, once assigned
    order: int = 0  # the accumulator's creation count: a partition's batches go in this order
    _encoded: bytes | None = None
    records: RecordsBuffer = field(init=False, repr=False)  # the builder's, appended to per record

    def __post_init__(self) -> None:
        self.records = self.builder.records

    def stamp(self, producer_id: int, epoch: int, sequence: int | None) -> None:
        """Set the idempotent producer's fields (the batch is encoded again)."""
        self.builder.producer_id, self.builder.producer_epoch = producer_id, epoch
        self.builder.base_sequence = -1 if sequence is None else sequence
        self.sequence = sequence
        self._encoded = None

    def encoded(self) -> bytes:
        """The batch bytes, built once and reused by retries."""
        if self._encoded is None:
            self._encoded = self.builder.build()
        return self._encoded

    @property
    def record_count(self) -> int:
        return len(self.records)

    @property
    def size(self) -> int:
        return self.builder.size_in_bytes


class PartitionQueue(deque):
    """A partition's batches in send order; ``open`` is the last one while it takes records.

    The producer keeps each partition's queue next to its TopicPartition, so appending a
    record looks nothing up by partition."""

    __slots__ = ("tp", "open")

    def __init__(self, tp: TopicPartition) -> None:
        super().__init__()
        self.tp = tp
        self.open: ProducerBatch | None = None


class RecordAccumulator:
    """Thread-safe batch queues shared by ``Producer.send`` and the sender thread.

    Memory is counted per batch, as the Java client's buffer pool does: a new batch holds
    ``batch_size`` bytes (or its own size, when one record is larger) until it is closed,
    then its real size until it is delivered; so appending a record costs no accounting.
    """

    def __init__(self, *, batch_size: int, linger_s: float, compression: int,
                 buffer_memory: int, clock: Callable[[], float],
                 on_new_batch: Callable[[TopicPartition], None] = lambda tp: None,
                 transactional: bool = False) -> None:
        self.batch_size = batch_size
        self.linger_s = linger_s
        self.compression = compression
        self.buffer_memory = buffer_memory
        self.clock = clock
        self._on_new_batch = on_new_batch
        self.transactional = transactional  # every batch is part of a transaction
        self._lock = threading.RLock()  # entered directly on the hot path (a C context manager)
        self.cond = threading.Condition(self._lock)
        self._queues: dict[TopicPartition, PartitionQueue] = {}
        self._records_limit = max(batch_size - BATCH_HEADER_SIZE, 0)
        self._bytes_held = 0
        self._incomplete = 0  # batches created and not yet completed or failed
        self._created = itertools.count()
        self.flushing = 0

    def partition_queue(self, tp: TopicPartition) -> PartitionQueue:
        """The queue of ``tp`` (made on first use; it stays for the accumulator's life)."""
        with self._lock:
            queue = self._queues.get(tp)
            if queue is None:
                queue = self._queues[tp] = PartitionQueue(tp)
            return queue

    def append(self, tp: TopicPartition, key: bytes | None, value: bytes | None,
               headers: Sequence[Header], timestamp: int, max_block_s: float,
               waiter: object = NEW_FUTURE) -> Future | None:
        """Queue one record. ``waiter``: NEW_FUTURE (the default) returns the record's new
        future; an ``on_delivery(error, metadata)`` callable is called once the record is
        delivered or failed; None queues the record with nobody waiting.

        Waits while the buffer is full (RequestTimedOutError after ``max_block_s``).
        """
        return self.append_to(self.partition_queue(tp), key, value, headers, timestamp, max_block_s, waiter)

    def append_to(self, queue: PartitionQueue, key: bytes | None, value: bytes | None,
                  headers: Sequence[Header], timestamp: int, max_block_s: float,
                  waiter: object = NEW_FUTURE) -> Future | None:
        """:meth:`append` to a queue from :meth:`partition_queue` (the producer's hot path)."""
        with self._lock:
            if self._bytes_held >= self.buffer_memory:
                self._wait_for_room(max_block_s)
            batch = queue.open
            if batch is None:
                batch = self._new_batch(queue)
            records = batch.records
            size = records.append(key, value, timestamp, headers, self._records_limit)
            if size < 0:  # the batch is full: this record starts the next one
                self._close(batch)
                batch = self._new_batch(queue)
                records = batch.records
                size = records.append(key, value, timestamp, headers, self._records_limit)
            if waiter is not None:
                waiters = batch.waiters
                index = len(records) - 1
                if len(waiters) < index:
                    waiters.extend([None] * (index - len(waiters)))
                if waiter is NEW_FUTURE:
                    waiter = new_record_future(batch.condition)
                    waiters.append(waiter)
                    batch.has_futures = True
                else:
                    waiters.append(waiter)
                    waiter = None
            if size >= self._records_limit:
                self._close(batch)
        return waiter

    def _new_batch(self, queue: PartitionQueue) -> ProducerBatch:
        batch = ProducerBatch(queue.tp, BatchBuilder(compression=self.compression,
                                                     is_transactional=self.transactional),
                              self.clock(), self.batch_size, order=next(self._created))
        queue.append(batch)
        queue.open = batch
        self._incomplete += 1
        self._bytes_held += batch.held
        self.cond.notify_all()  # the sender sets its linger timer from the new batch
        return batch

    def _close(self, batch: ProducerBatch) -> None:
        """No more records for ``batch`` (full, or drained): it now holds its real size."""
        self._seal(batch)
        self._on_new_batch(batch.tp)
        self.cond.notify_all()

    def _seal(self, batch: ProducerBatch) -> None:
        if not batch.closed:
            batch.closed = True
            queue = self._queues[batch.tp]
            if queue.open is batch:
                queue.open = None
            size = batch.size
            self._bytes_held += size - batch.held
            batch.held = size

    def _wait_for_room(self, max_block_s: float) -> None:
        deadline = self.clock() + max_block_s
        while self._bytes_held >= self.buffer_memory:
            remaining = deadline - self.clock()
            if remaining <= 0:
                raise RequestTimedOutError(
                    f"producer buffer of {self.buffer_memory} bytes stayed full for {max_block_s:g}s")
            self.cond.wait(remaining)

    def drain(self, now: float, force: bool) -> list[ProducerBatch]:
        """Remove and return the batches that are ready to send (call with ``cond`` held)."""
        ready = []
        for queue in self._queues.values():
            while queue:
                batch = queue[0]
                if batch.retry_at > now:
                    break
                if not (force or batch.closed or len(queue) > 1 or now - batch.created >= self.linger_s
                        or batch.attempts):
                    break
                queue.popleft()
                self._seal(batch)
                ready.append(batch)
        return ready

    def next_ready_in(self, now: float) -> float | None:
        """Seconds until some queued batch becomes ready (0: now; None: nothing queued)."""
        waits = []
        for queue in self._queues.values():
            if queue:
                batch = queue[0]
                if batch.attempts:
                    waits.append(batch.retry_at - now)
                elif batch.closed or len(queue) > 1 or self.flushing:
                    waits.append(0.0)
                else:
                    waits.append(batch.created + self.linger_s - now)
        return max(min(waits), 0.0) if waits else None

    def reenqueue(self, batch: ProducerBatch, retry_at: float) -> None:
        """Put a drained batch back in its queue, before every batch created after it
        (the other retried ones are at the head, in order), so retries keep the send order
        whatever order they are put back in."""
        with self.cond:
            batch.retry_at = retry_at
            queue = self._queues[batch.tp]
            position = 0
            while position < len(queue) and queue[position].order < batch.order:
                position += 1
            queue.insert(position, batch)
            self.cond.notify_all()

    def queued_sequenced(self) -> list[ProducerBatch]:
        """The queued batches that hold a sequence number (call with ``cond`` held)."""
        return [b for q in self._queues.values() for b in q if b.sequence is not None]

    def complete(self, batch: ProducerBatch) -> None:
        """A batch is done (delivered or failed): free its bytes."""
        with self.cond:
            self._bytes_held -= batch.held
            self._incomplete -= 1
            self.cond.notify_all()

    @property
    def incomplete(self) -> int:
        return self._incomplete

    def queued_batches(self) -> list[ProducerBatch]:
        """Remove and return every queued batch (used when the producer gives up on them)."""
        with self.cond:
            batches = [b for q in self._queues.values() for b in q]
            for queue in self._queues.values():
                queue.clear()
                queue.open = None
            return batches

