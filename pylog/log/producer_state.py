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

Transactions (Kafka's ``ProducerStateManager``): a transactional batch (attributes bit
0x10) from a producer without an open transaction opens one at its base offset; the
producer's marker (a control batch, :mod:`pylog.records.control`) completes it. A leader
checks a marker first: a coordinator epoch older than the last one seen for the producer
is TRANSACTION_COORDINATOR_FENCED, a producer epoch older than the producer's is
INVALID_PRODUCER_EPOCH; a newer producer epoch is taken (the coordinator bumps it to fence
a producer whose transaction it aborts). A completed transaction stays *unreplicated*
until the high watermark passes its marker: until then a read_committed reader must not
read past its first offset, whatever the marker says. The first unstable offset is the
smallest first offset of the open and the unreplicated transactions; the log's last
stable offset is that, capped by the high watermark.

Verification (KIP-890 part 1): a leader that verifies transactions asks the
transaction coordinator, before a producer's first transactional batch of a transaction,
whether the partition is in that producer's transaction. :meth:`start_verification` gives
it a ``VerificationGuard`` to hold meanwhile; a marker for the producer drops the guard.
The batch is appended with the guard, and opens a transaction only if the guard is still
the producer's (INVALID_TXN_STATE otherwise): a batch delayed past the end of its
transaction (a marker written while it was on its way) cannot open a transaction nobody
will ever end, which would hold back every read_committed reader of the partition. The
guards live in memory only: after a restart the producer verifies again.

Followers, and a log rebuilding its state from the log, apply batches without the checks.
The state survives restarts through snapshots (:mod:`pylog.log.producer_snapshot`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Iterable

from pylog.errors import (
    InvalidProducerEpochError, InvalidTxnStateError, OutOfOrderSequenceNumberError,
    TransactionCoordinatorFencedError)
from pylog.records.control import TxnMarker
from pylog.records.header import BatchHeader

NUM_BATCHES_TO_RETAIN = 5
MAX_SEQUENCE = 2**31 - 1


class VerificationGuard:
    """What a leader holds while the coordinator verifies a producer's transaction (see
    the module doc): compared by identity. ``SENTINEL`` is never any producer's guard:
    appending with it opens no transaction."""

    __slots__ = ("producer_id", "epoch", "lowest_sequence", "created")

    def __init__(self, producer_id: int, epoch: int = -1, sequence: int = -1) -> None:
        self.producer_id = producer_id
        # The lowest sequence seen verifying in the newest epoch: the producer's batches
        # after it wait until it is written (else a retried lower one would be out of
        # order for ever).
        self.epoch = epoch
        self.lowest_sequence = sequence
        self.created = time.monotonic()  # an abandoned guard expires with idle producers

    def saw(self, epoch: int, sequence: int) -> None:
        if epoch > self.epoch:
            self.epoch, self.lowest_sequence = epoch, sequence
        elif epoch == self.epoch and sequence < self.lowest_sequence:
            self.lowest_sequence = sequence

    def __repr__(self) -> str:
        return f"VerificationGuard(producer {self.producer_id})"


SENTINEL = VerificationGuard(-1)


def next_sequence(sequence: int, delta: int = 1) -> int:
    """``sequence + delta`` wrapping past ``2**31 - 1`` to 0, as producers number them."""
    return (sequence + delta) % (MAX_SEQUENCE + 1)


def continues_unwritten(headers: list[BatchHeader],
                        unwritten: dict[int, tuple[int, int]]) -> bool:
    """Whether every batch of ``headers`` whose producer has unwritten batches (producer
    id -> (epoch, last sequence)) continues them: the same epoch, the next sequence. Such
    a batch can be checked against them (``ProducerStateManager.check``) before they are
    written: it cannot repeat a written batch, whose sequences all come before. Any
    other (a retry, a new epoch, a gap) is checked once they are written."""
    following = dict(unwritten)
    for header in headers:
        last = following.get(header.producer_id)
        if last is not None:
            if header.producer_epoch != last[0] or header.base_sequence != next_sequence(last[1]):
                return False
            following[header.producer_id] = (
                last[0], next_sequence(header.base_sequence, header.last_offset_delta))
    return True


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


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker ended: the producer's records in ``[first_offset,
    last_offset]`` (``last_offset`` is the marker). ``last_stable_offset`` is the log's
    first unstable offset right after the marker (or the offset after it), as the
    aborted-transaction index records it."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool
    last_stable_offset: int


@dataclass(slots=True)
class ProducerStateEntry:
    """A producer id's epoch, its last (at most five) batches, oldest first, and its
    transaction state: the last coordinator epoch and the first offset of its open
    transaction (-1: none)."""

    producer_id: int
    epoch: int
    batches: list[BatchMetadata] = field(default_factory=list)
    coordinator_epoch: int = -1
    txn_first_offset: int = -1
    last_timestamp: int = -1  # of its last batch or marker

    def __post_init__(self) -> None:
        if self.last_timestamp < 0 and self.batches:
            self.last_timestamp = self.batches[-1].timestamp

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

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
        self.bump_epoch(epoch)
        self.batches.append(batch)
        if len(self.batches) > NUM_BATCHES_TO_RETAIN:
            del self.batches[0]
        self.last_timestamp = batch.timestamp

    def bump_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch = epoch
            self.batches.clear()


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
            for header, base_offset in zip(headers, base_offsets):
                state.apply(header, base_offset)
    """

    def __init__(self, entries: Iterable[ProducerStateEntry] = (),
                 unreplicated: Iterable[tuple[int, int]] = ()) -> None:
        self.producers: dict[int, ProducerStateEntry] = {e.producer_id: e for e in entries}
        # first offset -> producer id of each open transaction, oldest first
        self.ongoing: dict[int, int] = dict(sorted(
            (e.txn_first_offset, e.producer_id) for e in self.producers.values()
            if e.txn_first_offset >= 0))
        # first offset -> marker offset of each completed transaction whose marker the
        # high watermark has not passed yet, in marker order
        self.unreplicated: dict[int, int] = dict(sorted(unreplicated, key=lambda t: t[1]))
        # producer id -> the guard of its transaction's verification (see the module doc)
        self.guards: dict[int, VerificationGuard] = {}

    def __len__(self) -> int:
        return len(self.producers)

    def start_verification(self, producer_id: int, epoch: int, sequence: int
                           ) -> VerificationGuard | None:
        """The guard to append ``producer_id``'s next transactional batch (in ``epoch``,
        from ``sequence``) with, once the coordinator has verified its transaction; None
        if it has a transaction open here already (nothing to verify). A verification
        under way keeps its guard."""
        entry = self.producers.get(producer_id)
        if entry is not None and entry.txn_first_offset >= 0:
            return None
        guard = self.guards.get(producer_id)
        if guard is None:
            guard = self.guards[producer_id] = VerificationGuard(producer_id, epoch, sequence)
        else:
            guard.saw(epoch, sequence)
        return guard

    def check(self, headers: list[BatchHeader],
              unwritten: dict[int, tuple[int, int]] | None = None,
              guard: VerificationGuard | None = None) -> BatchMetadata | None:
        """Check a leader's batches before they are written. Returns the kept batch a
        duplicate repeats (then nothing may be written, as in Kafka), else None.

        Raises InvalidProducerEpochError or OutOfOrderSequenceNumberError. Several
        batches of one producer in one append are checked as a sequence. With a
        ``guard`` (a verifying leader), a transactional batch that would open a
        transaction raises InvalidTxnStateError unless ``guard`` is its producer's.

        ``unwritten`` (producer id -> (epoch, last sequence)) holds batches checked but
        not written yet (a group commit's): the batches are checked as following them,
        and, if they pass and are no duplicate, added to them. The caller sees to it that
        a batch checked this way could not be a duplicate (see ``continues_unwritten``)."""
        # producer id -> (epoch, last seq) so far
        pending: dict[int, tuple[int, int]] = {} if unwritten is None else dict(unwritten)
        for header in headers:
            producer_id = header.producer_id
            if producer_id < 0 or header.is_control:
                continue
            entry = self.producers.get(producer_id)
            epoch, first_seq = header.producer_epoch, header.base_sequence
            last_seq = next_sequence(first_seq, header.last_offset_delta)
            if producer_id not in pending and entry is not None:
                duplicate = entry.find_duplicate(epoch, first_seq, last_seq)
                if duplicate is not None:
                    return duplicate
            verifying = self.guards.get(producer_id)
            if verifying is not None and first_seq > verifying.lowest_sequence >= 0:
                raise OutOfOrderSequenceNumberError(
                    f"producer {producer_id}: sequence {first_seq} while its sequence "
                    f"{verifying.lowest_sequence} waits for its transaction's verification")
            current = pending.get(producer_id)
            if current is None and entry is not None:
                current = (entry.epoch, entry.last_seq)
            if current is not None:
                _check_sequence(producer_id, current[0], current[1], epoch, first_seq)
            if (guard is not None and header.is_transactional
                    and (entry is None or entry.txn_first_offset < 0)
                    and self.guards.get(producer_id) is not guard):
                raise InvalidTxnStateError(
                    f"producer {producer_id}: the transaction coordinator has not verified "
                    "that this partition is in the producer's transaction (or the "
                    "transaction ended meanwhile)")
            pending[producer_id] = (epoch, last_seq)
        if unwritten is not None:
            unwritten.update(pending)
        return None

    def apply(self, header: BatchHeader, base_offset: int) -> None:
        """Record a written batch (a leader's after :meth:`check`, a follower's, or one
        replayed from the log). Batches without a producer id are ignored, and so are
        control batches: :meth:`complete_txn` applies those. A transactional batch opens
        the producer's transaction if none is open."""
        if header.producer_id < 0 or header.is_control:
            return
        entry = self.producers.get(header.producer_id)
        if entry is None:
            entry = self.producers[header.producer_id] = ProducerStateEntry(
                header.producer_id, header.producer_epoch)
        if header.producer_epoch >= entry.epoch:  # a follower ignores a fenced epoch's batch
            entry.add(header.producer_epoch, batch_metadata(header, base_offset))
            if header.is_transactional and entry.txn_first_offset < 0:
                entry.txn_first_offset = base_offset
                self.ongoing[base_offset] = header.producer_id
                self.guards.pop(header.producer_id, None)

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """Check a leader's marker before it is written. Raises
        TransactionCoordinatorFencedError or InvalidProducerEpochError."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"producer {producer_id}: marker from coordinator epoch {coordinator_epoch}, "
                f"older than the last one seen, {entry.coordinator_epoch}")
        if producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {producer_id}: marker for epoch {producer_epoch}, older than the "
                f"current epoch {entry.epoch}")

    def complete_txn(self, producer_id: int, producer_epoch: int, marker: TxnMarker,
                     offset: int, timestamp: int) -> CompletedTxn:
        """Apply a marker written at ``offset``: the producer's open transaction (or, with
        none open, just the marker) is completed, and unreplicated until the high
        watermark passes ``offset``."""
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerStateEntry(producer_id, producer_epoch)
        if producer_epoch > entry.epoch:
            entry.bump_epoch(producer_epoch)
        entry.coordinator_epoch = marker.coordinator_epoch
        entry.last_timestamp = max(entry.last_timestamp, timestamp)
        self.guards.pop(producer_id, None)
        first = entry.txn_first_offset if entry.txn_first_offset >= 0 else offset
        entry.txn_first_offset = -1
        self.ongoing.pop(first, None)
        self.unreplicated[first] = offset
        stable = next(iter(self.ongoing), offset + 1)
        return CompletedTxn(producer_id, first, offset, not marker.commit, stable)

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of the oldest open or unreplicated transaction, None if there
        is none; completed transactions whose marker is below ``high_watermark`` are
        forgotten first."""
        unreplicated = self.unreplicated
        if unreplicated:
            done = []
            for first, last in unreplicated.items():
                if last >= high_watermark:
                    break
                done.append(first)
            for first in done:
                del unreplicated[first]
        candidates = []
        if self.ongoing:
            candidates.append(next(iter(self.ongoing)))
        if unreplicated:
            candidates.append(min(unreplicated))
        return min(candidates) if candidates else None

    @property
    def has_unstable(self) -> bool:
        """Whether any transaction is open or unreplicated (cheap: no pruning)."""
        return bool(self.ongoing) or bool(self.unreplicated)

    def expire(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers whose last batch is ``expiration_ms`` old and that have no
        open transaction (as Kafka), and guards that old (a verification that failed, or
        whose producer went away); returns how many producers."""
        expired = [pid for pid, entry in self.producers.items()
                   if entry.txn_first_offset < 0 and now_ms - entry.last_timestamp >= expiration_ms]
        for pid in expired:
            del self.producers[pid]
        oldest = time.monotonic() - expiration_ms / 1000
        for pid in [pid for pid, guard in self.guards.items() if guard.created <= oldest]:
            del self.guards[pid]
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
