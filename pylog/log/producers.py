"""The producers of one partition log: their state, and what it writes into the log's
files and tells its readers.

Idempotent producers: batches carrying a producer id are checked against the producer
state (:mod:`pylog.log.producer_state`) under the log's lock, the same lock as the
append, so a check and its write cannot interleave with another producer's; a duplicate
is answered with the offsets it was first written at. Batches without a producer id skip
all of it. The state is snapshotted (:mod:`pylog.log.producer_snapshot`) at each roll and
at close, and rebuilt after truncation.

Transactions: transactional batches open a transaction in the producer state, a marker
(``Log.append_marker`` on a leader, a control batch from the leader on a follower)
completes it, and each ABORT marker adds an entry to the ``.txnindex`` of the segment it
is written to (:mod:`pylog.log.transaction_index`). The last stable offset is the high
watermark capped by the first offset of every open transaction and of every completed one
whose marker the high watermark has not passed; a read_committed read stops there and
reports the aborted transactions overlapping what it returns. Without transactions the
LSO is the high watermark, at the cost of two empty-container checks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

from pylog.log.loader import aborted_entry, load_producer_state, replay_marker
from pylog.log.producer_snapshot import delete_snapshots, write_snapshot
from pylog.log.producer_state import BatchMetadata, ProducerStateManager, VerificationGuard
from pylog.log.segment import LogSegment
from pylog.log.transaction_index import AbortedTxn, TransactionIndex, collect_aborted
from pylog.records.control import TxnMarker
from pylog.records.header import BatchHeader

AssignedBatch = tuple[int, int, BatchHeader]  # position in the buffer, base offset, header


class LogProducers:
    """The producer state of the log in ``directory`` and its snapshots.

    The log calls every method with its lock held, except :attr:`has_unstable`, which it
    reads without the lock to skip the LSO computation when no transaction is unstable.
    """

    def __init__(self, directory: Path, state: ProducerStateManager | None = None) -> None:
        self.directory = directory
        self.state = state if state is not None else ProducerStateManager()

    # -- appends ------------------------------------------------------------------------

    def check(self, headers: list[BatchHeader],
              unwritten: dict[int, tuple[int, int]] | None = None,
              guard: VerificationGuard | None = None) -> BatchMetadata | None:
        """Check a leader's batches with a producer id (see ``ProducerStateManager.check``);
        the kept batch they duplicate, if they do."""
        return self.state.check(headers, unwritten, guard)

    def start_verification(self, producer_id: int, epoch: int, sequence: int
                           ) -> VerificationGuard | None:
        """See ``ProducerStateManager.start_verification``."""
        return self.state.start_verification(producer_id, epoch, sequence)

    def record(self, assigned: Sequence[AssignedBatch], txn_index: TransactionIndex,
               buf: bytes | bytearray | memoryview | None = None) -> None:
        """Record written batches; control batches (a follower's, whose bytes are in
        ``buf``) complete transactions, an ABORT adding an entry to ``txn_index``."""
        state = self.state
        for position, base_offset, header in assigned:
            if header.producer_id < 0:
                continue
            if header.is_control:
                completed = replay_marker(state, buf, position, header)
                if completed is not None and completed.aborted:
                    txn_index.append(aborted_entry(completed))
            else:
                state.apply(header, base_offset)

    def check_marker(self, producer_id: int, producer_epoch: int,
                     coordinator_epoch: int) -> None:
        """Raise TransactionCoordinatorFencedError or InvalidProducerEpochError for a
        marker a leader must not write."""
        self.state.check_marker(producer_id, producer_epoch, coordinator_epoch)

    def complete(self, producer_id: int, producer_epoch: int, marker: TxnMarker, offset: int,
                 timestamp_ms: int, txn_index: TransactionIndex) -> None:
        """The marker written at ``offset`` completes the producer's transaction; an
        ABORT adds an entry to ``txn_index``."""
        completed = self.state.complete_txn(producer_id, producer_epoch, marker, offset,
                                            timestamp_ms)
        if completed.aborted:
            txn_index.append(aborted_entry(completed))

    # -- what readers see ---------------------------------------------------------------

    @property
    def has_unstable(self) -> bool:
        """Whether a transaction is open or its marker is not replicated yet."""
        return self.state.has_unstable

    def last_stable_offset(self, high_watermark: int, log_start_offset: int) -> int:
        """The high watermark capped by the first unstable offset (never below the log
        start)."""
        first_unstable = self.state.first_unstable_offset(high_watermark)
        if first_unstable is None or first_unstable >= high_watermark:
            return high_watermark
        return max(first_unstable, log_start_offset)

    @staticmethod
    def aborted(segments: Iterable[LogSegment], fetch_offset: int,
                upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping ``[fetch_offset, upper_bound)`` from the
        ``.txnindex`` of ``segments``, which start at the one holding ``fetch_offset``:
        the markers are at or after it, and the search stops at an entry whose last
        stable offset reaches ``upper_bound``."""
        return collect_aborted((s.txn_index for s in segments), fetch_offset, upper_bound)

    @staticmethod
    def all_aborted(segments: Iterable[LogSegment]) -> tuple[AbortedTxn, ...]:
        """Every aborted transaction the segments' ``.txnindex`` files hold."""
        return tuple(entry for s in segments if not s.txn_index.is_empty
                     for entry in s.txn_index.entries)

    # -- producers ----------------------------------------------------------------------

    def open_transactions(self) -> dict[int, int]:
        return dict(self.state.ongoing)

    def producer(self, producer_id: int) -> tuple[int, list[BatchMetadata]] | None:
        entry = self.state.producers.get(producer_id)
        return None if entry is None else (entry.epoch, list(entry.batches))

    def expire(self, now_ms: int, expiration_ms: int) -> int:
        return self.state.expire(now_ms, expiration_ms)

    # -- snapshots and rebuilds ---------------------------------------------------------

    def snapshot(self, offset: int) -> None:
        """Write the state of the batches below ``offset`` as its snapshot: after a crash
        the state is rebuilt from the newest one."""
        write_snapshot(self.directory, self.state, offset)

    def drop_snapshots_below(self, offset: int) -> None:
        """Retention deleted the segments below ``offset``. The producers' state outlives
        their batches (until it expires), as in Kafka; only older snapshots go."""
        delete_snapshots(self.directory, below=offset)

    def rebuild(self, segments: list[LogSegment]) -> None:
        """After a truncation: the state of what is left, from a snapshot and headers."""
        self.state = load_producer_state(self.directory, segments)

    def clear(self) -> None:
        """The log restarts empty: no producers, no snapshots."""
        delete_snapshots(self.directory, above=-1)
        self.state = ProducerStateManager()
