"""Idempotent producers: per partition, what each producer id last wrote.

For each producer id the log keeps its epoch and the last five batches it appended
(first and last sequence, last offset, offset delta, max timestamp), as Kafka's
``ProducerStateManager`` does. A leader checks every batch that carries a producer id
(headers only, never records) before it is written:

* the sequence range equals one of the five kept batches (same epoch): a duplicate,
  answered with the kept batch's offsets and not written again;
* an epoch below the current one: INVALID_PRODUCER_EPOCH;
* a new (higher) epoch must start at sequence 0, else OUT_OF_ORDER_SEQUENCE_NUMBER;
* the same epoch must continue at ``last_seq + 1`` (``0`` after ``2**31 - 1``), else
  OUT_OF_ORDER_SEQUENCE_NUMBER;
* an unknown producer id is accepted at any sequence. This is Kafka's rule since 2.5
  (KIP-360): the producer's state may have expired or been deleted with its segments,
  and the producer cannot tell; brokers no longer answer UNKNOWN_PRODUCER_ID.

Followers, and a log rebuilding its state from batch headers, apply batches without the
checks. The state survives restarts through snapshots (:mod:`pylog.log.producer_snapshot`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from pylog.errors import InvalidProducerEpochError, OutOfOrderSequenceNumberError
from pylog.records.header import BatchHeader

NUM_BATCHES_TO_RETAIN = 5
MAX_SEQUENCE = 2**31 - 1


def next_sequence(sequence: int, delta: int = 1) -> int:
    """``sequence + delta`` wrapping past ``2**31 - 1`` to 0, as producers number them."""
    return (sequence + delta) % (MAX_SEQUENCE + 1)


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """One appended batch of a producer: its sequence range and where it landed."""

    first_seq: int
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int  # the batch's max timestamp

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(slots=True)
class ProducerStateEntry:
    """A producer id's epoch and its last (at most five) batches, oldest first."""

    producer_id: int
    epoch: int
    batches: list[BatchMetadata] = field(default_factory=list)

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    @property
    def last_timestamp(self) -> int:
        return self.batches[-1].timestamp if self.batches else -1

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.epoch:
            return None
        for kept in self.batches:
            if kept.first_seq == first_seq and kept.last_seq == last_seq:
                return kept
        return None

    def add(self, epoch: int, batch: BatchMetadata) -> None:
        """Record ``batch``; a new epoch forgets the old epoch's batches."""
        if epoch != self.epoch:
            self.epoch = epoch
            self.batches.clear()
        self.batches.append(batch)
        if len(self.batches) > NUM_BATCHES_TO_RETAIN:
            del self.batches[0]


def batch_metadata(header: BatchHeader, base_offset: int) -> BatchMetadata:
    """What the state keeps of ``header`` once it is written at ``base_offset``. The
    sequence range follows the offset range (a compacted batch keeps both)."""
    delta = header.last_offset_delta
    return BatchMetadata(header.base_sequence, next_sequence(header.base_sequence, delta),
                         base_offset + delta, delta, header.max_timestamp)


class ProducerStateManager:
    """The producer state of one partition log: check a leader's appends, apply what was
    written, expire idle producers. Not thread-safe: the log calls it under its lock.

    Example::

        state = ProducerStateManager()
        duplicate = state.check(headers)          # raises on a gap or an old epoch
        if duplicate is None:
            ...write the batches at base offsets...
            state.apply(zip(headers, base_offsets))
    """

    def __init__(self, entries: Iterable[ProducerStateEntry] = ()) -> None:
        self.producers: dict[int, ProducerStateEntry] = {e.producer_id: e for e in entries}

    def __len__(self) -> int:
        return len(self.producers)

    def check(self, headers: list[BatchHeader]) -> BatchMetadata | None:
        """Check a leader's batches before they are written. Returns the kept batch a
        duplicate repeats (then nothing may be written, as in Kafka), else None.

        Raises InvalidProducerEpochError or OutOfOrderSequenceNumberError. Several
        batches of one producer in one append are checked as a sequence."""
        pending: dict[int, tuple[int, int]] = {}  # producer id -> (epoch, last seq) so far
        for header in headers:
            producer_id = header.producer_id
            if producer_id < 0:
                continue
            entry = self.producers.get(producer_id)
            epoch, first_seq = header.producer_epoch, header.base_sequence
            last_seq = next_sequence(first_seq, header.last_offset_delta)
            if producer_id not in pending and entry is not None:
                duplicate = entry.find_duplicate(epoch, first_seq, last_seq)
                if duplicate is not None:
                    return duplicate
            current = pending.get(producer_id)
            if current is None and entry is not None:
                current = (entry.epoch, entry.last_seq)
            if current is not None:
                _check_sequence(producer_id, current[0], current[1], epoch, first_seq)
            pending[producer_id] = (epoch, last_seq)
        return None

    def apply(self, header: BatchHeader, base_offset: int) -> None:
        """Record a written batch (a leader's after :meth:`check`, a follower's, or one
        replayed from the log). Batches without a producer id are ignored."""
        if header.producer_id < 0:
            return
        entry = self.producers.get(header.producer_id)
        if entry is None:
            entry = self.producers[header.producer_id] = ProducerStateEntry(
                header.producer_id, header.producer_epoch)
        if header.producer_epoch >= entry.epoch:  # a follower ignores a fenced epoch's batch
            entry.add(header.producer_epoch, batch_metadata(header, base_offset))

    def expire(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers whose last batch is ``expiration_ms`` old; returns how many."""
        expired = [pid for pid, entry in self.producers.items()
                   if now_ms - entry.last_timestamp >= expiration_ms]
        for pid in expired:
            del self.producers[pid]
        return len(expired)


def _check_sequence(producer_id: int, current_epoch: int, current_last_seq: int,
                    epoch: int, first_seq: int) -> None:
    if epoch < current_epoch:
        raise InvalidProducerEpochError(
            f"producer {producer_id}: epoch {epoch} is older than the current epoch {current_epoch}")
    if epoch > current_epoch:
        if first_seq != 0:
            raise OutOfOrderSequenceNumberError(
                f"producer {producer_id}: new epoch {epoch} starts at sequence {first_seq}, not 0")
        return
    if current_last_seq >= 0 and first_seq != next_sequence(current_last_seq):
        raise OutOfOrderSequenceNumberError(
            f"producer {producer_id} epoch {epoch}: sequence {first_seq} does not follow "
            f"{current_last_seq}")
