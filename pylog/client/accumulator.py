"""The producer's record accumulator: per-partition queues of batches being filled.

``send()`` appends to the last open batch of the partition (a new one when the record
would push it past ``batch_size``). The sender thread drains batches that are *ready*:
full, older than ``linger_ms``, or everything when a flush or close asks for it. Bytes
held in unsent or unacknowledged batches are capped by ``buffer_memory``; ``append``
waits for room.
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Callable, Sequence

from pylog.client.futures import new_record_future
from pylog.errors import RequestTimedOutError
from pylog.records import BatchBuilder
from pylog.records.record import Header
from pylog.types import TopicPartition


@dataclass(eq=False)
class ProducerBatch:
    """One batch on its way: the builder, one future per record, retry state."""

    tp: TopicPartition
    builder: BatchBuilder
    created: float
    futures: list[Future] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    condition: threading.Condition = field(default_factory=threading.Condition)
    attempts: int = 0
    retry_at: float = 0.0
    closed: bool = False
    sequence: int | None = None  # an idempotent producer's base sequence, once assigned
    _encoded: bytes | None = None

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
    def size(self) -> int:
        return self.builder.size_in_bytes


class RecordAccumulator:
    """Thread-safe batch queues shared by ``Producer.send`` and the sender thread."""

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
        self.cond = threading.Condition()
        self._queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        self._bytes_held = 0
        self._incomplete = 0  # batches created and not yet completed or failed
        self.flushing = 0

    def append(self, tp: TopicPartition, key: bytes | None, value: bytes | None,
               headers: Sequence[Header], timestamp: int, max_block_s: float) -> Future:
        """Queue one record; returns its future. Waits while the buffer is full."""
        with self.cond:
            if self._bytes_held >= self.buffer_memory:
                self._wait_for_room(max_block_s)
            queue = self._queues.get(tp)
            if queue is None:
                queue = self._queues[tp] = deque()
            batch = queue[-1] if queue and not queue[-1].closed else None
            if batch is not None and batch.builder.would_exceed(self.batch_size, key, value, headers):
                batch.closed = True
                self._on_new_batch(tp)
                batch = None
                self.cond.notify_all()
            if batch is None:
                batch = ProducerBatch(tp, BatchBuilder(compression=self.compression,
                                                      is_transactional=self.transactional), self.clock())
                queue.append(batch)
                self._incomplete += 1
                self.cond.notify_all()  # the sender sets its linger timer from the new batch
            builder = batch.builder
            before = builder.size_in_bytes if batch.futures else 0  # a new batch holds its header too
            builder.append(key, value, headers, timestamp)
            size = builder.size_in_bytes
            self._bytes_held += size - before
            future = new_record_future(batch.condition)
            batch.futures.append(future)
            batch.timestamps.append(timestamp)
            if size >= self.batch_size:
                batch.closed = True
                self._on_new_batch(tp)
                self.cond.notify_all()
        return future

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
                batch.closed = True
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
        """Put a batch that failed with a retriable error back at the head of its queue,
        among the other retried ones in sequence order, so retries keep the send order."""
        with self.cond:
            batch.retry_at = retry_at
            queue = self._queues.setdefault(batch.tp, deque())
            position = 0
            if batch.sequence is not None:
                while (position < len(queue) and queue[position].sequence is not None
                       and _before(queue[position].sequence, batch.sequence)):
                    position += 1
            queue.insert(position, batch)
            self.cond.notify_all()

    def queued_sequenced(self) -> list[ProducerBatch]:
        """The queued batches that hold a sequence number (call with ``cond`` held)."""
        return [b for q in self._queues.values() for b in q if b.sequence is not None]

    def complete(self, batch: ProducerBatch) -> None:
        """A batch is done (delivered or failed): free its bytes."""
        with self.cond:
            self._bytes_held -= batch.size
            self._incomplete -= 1
            self.cond.notify_all()

    @property
    def incomplete(self) -> int:
        return self._incomplete

    def queued_batches(self) -> list[ProducerBatch]:
        """Remove and return every queued batch (used when the producer gives up on them)."""
        with self.cond:
            batches = [b for q in self._queues.values() for b in q]
            self._queues.clear()
            return batches


def _before(a: int, b: int) -> bool:
    """Whether sequence ``a`` comes before ``b`` (sequences wrap at 2**31, and at most a
    few batches apart are compared)."""
    return a != b and (b - a) % 2**31 < 2**30
