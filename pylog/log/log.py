"""A partition's log: an ordered list of segments, the last one active.

Appends go to the active segment, which rolls at ``segment_bytes`` or ``segment_ms``.
Reads find the segment by binary search over base offsets, then the batch through the
segment's sparse index. One lock guards the segment list; reads hold it only to find
their region and duplicate its file descriptor, so ``os.sendfile`` runs unlocked and a
segment deleted by retention meanwhile stays readable through the duplicate.

Durability: everything below ``recovery_point`` has been fsynced. Opening without
``had_clean_shutdown`` re-validates from the segment holding the recovery point onwards
(:mod:`pylog.log.loader`).

Replication: a leader appends with its leader epoch, stamped into each batch's
``partitionLeaderEpoch``; a follower appends the leader's batches with their offsets
(:meth:`Log.append_as_follower`). Both record where each epoch starts in the leader epoch
cache (:mod:`pylog.log.leader_epoch`), which truncation and retention keep in step with
the log. A replica manager above caps what readers see with :meth:`Log.set_high_watermark`.

Idempotent producers and transactions (:mod:`pylog.log.producers`): batches carrying a
producer id are checked against the producer state under the same lock as the append; a
duplicate is answered with the offsets it was first written at. Markers
(:meth:`Log.append_marker`) complete transactions, ABORT markers add entries to their
segment's ``.txnindex``, and :attr:`Log.last_stable_offset` bounds what read_committed
readers see, with the aborted transactions overlapping what they read.

Compaction (:mod:`pylog.log.cleaner`) reads a :meth:`Log.cleaner_view` of the inactive
segments without the lock and swaps each cleaned segment in with
:meth:`Log.replace_segments`, under the lock, as :mod:`pylog.log.swap` describes.
"""

from __future__ import annotations

import bisect
import logging
import os
import random
import shutil
import threading
import time
from pathlib import Path
from typing import Callable, Sequence

from pylog.errors import (
    KafkaError, OffsetOutOfRangeError, TransactionalIdAuthorizationFailedError,
    UnknownTopicOrPartitionError)
from pylog.log import swap
from pylog.log.cleaner import CleanerView, SegmentsChangedError, SegmentSnapshot
from pylog.log.config import LogConfig
from pylog.log.leader_epoch import EpochEntry, LeaderEpochCache
from pylog.log.loader import (
    RECOVERY_MAX_BATCH, load_leader_epochs, load_producer_state, load_segments)
from pylog.log.producer_state import (
    BatchMetadata, ProducerStateManager, VerificationGuard, continues_unwritten)
from pylog.log.producers import AssignedBatch, LogProducers
from pylog.log.transaction_index import AbortedTxn
from pylog.log.results import AppendInfo, FileRegion, ReadResult
from pylog.log.retention import count_deletable
from pylog.log.segment import LogSegment
from pylog.log.validation import check_follower_offsets, check_timestamps, validate_append
from pylog.records.control import TxnMarker, build_marker_batch
from pylog.records.filtering import recompressed
from pylog.records.header import (
    BatchHeader, read_batch_header, set_base_offset, set_log_append_time,
    set_partition_leader_epoch)

log = logging.getLogger(__name__)

MAX_RELATIVE_OFFSET = 2**31 - 1
MAX_RUN = 512  # requests written with one pwritev (Linux allows 1024 buffers)

# A request's records ready to write: its index among the appends, the buffer, its
# batches and those of them with a producer id.
PreparedAppend = tuple[int, "bytearray | memoryview", list[tuple[int, BatchHeader]],
                       list[BatchHeader]]
AppendListener = Callable[["Log"], None]


class LogClosedError(UnknownTopicOrPartitionError):
    """The log was closed or deleted; no more appends or reads. A request that meets it
    gets UNKNOWN_TOPIC_OR_PARTITION (retriable), as for a partition deleted under it."""


class Log:
    """An append-only log of record batches in one partition directory.

    Example::

        log = Log.open(Path("/var/lib/pylog/events-0"), LogConfig())
        info = log.append(batch_bytes)            # info.first_offset, info.last_offset
        with log.read(info.first_offset, 1 << 20).region as region:
            os.sendfile(sock.fileno(), region.fd, region.position, region.length)
        log.close()
    """

    def __init__(self, directory: Path, config: LogConfig, clock: Callable[[], float],
                 segments: list[LogSegment], log_start_offset: int, bytes_truncated: int,
                 epochs: LeaderEpochCache, producers: ProducerStateManager | None = None) -> None:
        self.directory = directory
        self.config = config
        self._jitter = random.random()  # this segment's share of segment.jitter.ms
        self._roll_after_ms = self._draw_roll_time()
        self._clock = clock
        self._lock = threading.RLock()
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._log_start_offset = min(max(log_start_offset, segments[0].base_offset), self.log_end_offset)
        self._recovery_point = self.log_end_offset
        self._unflushed_records = 0
        self._last_flush_ms = self._now_ms()
        self._listeners: list[AppendListener] = []
        self._closed = False
        self._truncations = 0  # bumped by truncate_to, so a flush running meanwhile knows
        self.bytes_truncated = bytes_truncated
        """Bytes cut off by recovery when the log was opened."""
        self._epochs = epochs
        # The checkpoint may name offsets recovery cut off, or retention deleted.
        epochs.truncate_from_end(self.log_end_offset)
        epochs.truncate_from_start(self._log_start_offset)
        self._producers = LogProducers(directory, producers)
        self._replicated_hw: int | None = None
        self.restored_high_watermark: int | None = None
        """The replicated high watermark LogManager found checkpointed (None: none). It is
        not applied: the replica manager decides whether to :meth:`set_high_watermark`."""

    @classmethod
    def open(cls, directory: Path, config: LogConfig, clock: Callable[[], float] = time.time, *,
             recovery_point: int = 0, log_start_offset: int = 0,
             had_clean_shutdown: bool = False) -> "Log":
        """Open (or create) the log in ``directory``.

        ``clock`` returns seconds (``time.time``); tests inject their own. Without
        ``had_clean_shutdown`` every segment from the one holding ``recovery_point`` is
        re-validated, cut at the first invalid batch and re-indexed (``bytes_truncated``
        says how much was cut). LogManager passes the values from its checkpoint files.
        """
        directory = Path(directory)
        now_ms = int(clock() * 1000)
        loaded = load_segments(directory, config, now_ms, recovery_point=recovery_point,
                               had_clean_shutdown=had_clean_shutdown, log_start_offset=log_start_offset)
        for segment in loaded.recovered:
            segment.flush()
        if loaded.bytes_truncated:
            log.warning("%s: recovery truncated %d bytes", directory, loaded.bytes_truncated)
        epochs = load_leader_epochs(directory, loaded.segments)
        producers = load_producer_state(directory, loaded.segments,
                                        frozenset(s.base_offset for s in loaded.recovered))
        return cls(directory, config, clock, loaded.segments, log_start_offset, loaded.bytes_truncated,
                   epochs, producers)

    # -- state ----------------------------------------------------------------------------

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def segments(self) -> list[LogSegment]:
        """A snapshot of the segments, oldest first."""
        with self._lock:
            return list(self._segments)

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record will get."""
        return self._segments[-1].next_offset

    @property
    def recovery_point(self) -> int:
        """Every offset below this has been fsynced."""
        return self._recovery_point

    @property
    def high_watermark(self) -> int:
        """Readers see offsets below this: the log end, or the flushed offset when
        ``expose_unflushed`` is off, and never past :attr:`replicated_high_watermark`."""
        end = self.log_end_offset
        local = end if self.config.expose_unflushed else min(self._recovery_point, end)
        limit = self._replicated_hw
        return local if limit is None else min(local, limit)

    @property
    def last_stable_offset(self) -> int:
        """Readers with isolation read_committed see offsets below this: the high
        watermark, or the first offset of the oldest transaction that is open or whose
        marker is not below the high watermark yet (never below the log start)."""
        high_watermark = self.high_watermark
        if not self._producers.has_unstable:
            return high_watermark
        with self._lock:
            return self._producers.last_stable_offset(self.high_watermark,
                                                      self._log_start_offset)

    @property
    def replicated_high_watermark(self) -> int | None:
        """The limit set by :meth:`set_high_watermark`; None for a log that is not replicated."""
        return self._replicated_hw

    def set_high_watermark(self, offset: int) -> None:
        """Cap what readers see at ``offset``, clamped to ``[log_start_offset, log_end_offset]``:
        the replicated high watermark, which a leader's replica manager moves as the
        in-sync followers catch up and a follower's takes from the leader's fetch responses.
        Wakes the append listeners (parked readers) if the high watermark moved."""
        with self._lock:
            self._check_open()
            before = self.high_watermark
            self._replicated_hw = offset
            self._clamp_replicated_hw()
            moved = self.high_watermark != before
        if moved:
            self._notify()

    def _clamp_replicated_hw(self) -> None:
        if self._replicated_hw is not None:
            self._replicated_hw = min(max(self._replicated_hw, self._log_start_offset), self.log_end_offset)

    @property
    def latest_epoch(self) -> int:
        """The newest leader epoch with records in this log, or -1."""
        return self._epochs.latest_epoch

    @property
    def epoch_entries(self) -> list[EpochEntry]:
        """Where each leader epoch starts, oldest first."""
        return self._epochs.entries

    def assign_leader_epoch(self, epoch: int) -> None:
        """Record that ``epoch`` starts at the log end: a newly elected leader does this
        before it writes anything (Kafka's ``maybeAssignEpochStartOffset``), so followers
        asking about older epochs learn where they ended. Ignored if not newer than
        :attr:`latest_epoch`."""
        with self._lock:
            self._check_open()
            self._epochs.assign(epoch, self.log_end_offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """``(epoch, end_offset)`` answering OffsetsForLeaderEpoch for ``epoch``; see
        :meth:`LeaderEpochCache.end_offset_for`. ``(-1, -1)`` if it is unknown."""
        with self._lock:
            return self._epochs.end_offset_for(epoch, self.log_end_offset)

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return sum(s.size for s in self._segments)

    @property
    def last_flush_ms(self) -> int:
        return self._last_flush_ms

    def update_config(self, config: LogConfig) -> None:
        """Apply a new config; it takes effect from the next append, roll or retention run."""
        with self._lock:
            self.config = config
            self._roll_after_ms = self._draw_roll_time()

    def _draw_roll_time(self) -> int:
        """How old the active segment may grow (ms) before it rolls: ``roll_ms`` less this
        segment's random share of ``segment.jitter.ms`` (``_jitter`` is drawn per segment,
        as Kafka draws ``rollJitterMs``)."""
        jitter = self.config.segment_jitter_ms
        if not jitter:
            return self.config.roll_ms
        return self.config.roll_ms - int(self._jitter * min(jitter, self.config.roll_ms))

    def add_append_listener(self, callback: AppendListener) -> None:
        """Call ``callback(log)`` after every append, and after a flush when
        ``expose_unflushed`` is off (the high watermark moved). It runs on the appending
        thread without the log's lock and must be quick."""
        self._listeners.append(callback)

    def remove_append_listener(self, callback: AppendListener) -> None:
        self._listeners.remove(callback)

    def _notify(self) -> None:
        for callback in list(self._listeners):
            try:
                callback(self)
            except Exception:  # a listener's bug must not fail the append
                log.exception("%s: append listener failed", self.directory)

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"{self.directory}: the log is closed")

    # -- append ---------------------------------------------------------------------------

    def append(self, records: bytes | bytearray | memoryview,
               leader_epoch: int | None = None, *, allow_transactional: bool = True) -> AppendInfo:
        """Validate, assign offsets to and append one or more back-to-back v2 batches.

        Every batch is checked first (framing, magic, CRC, size); if any is bad nothing is
        written. Raises a CorruptRecordError subclass, MessageTooLargeError (a batch over
        ``max_batch_size``), RecordListTooLargeError (more than ``segment_bytes`` in all)
        or InvalidRecordError (no batches). Only each batch's baseOffset is rewritten, and
        its partitionLeaderEpoch when a leader passes ``leader_epoch`` (which the leader
        epoch cache then records as starting at the first offset, if it is new): in
        ``records`` itself when it is writable (a request's frame), else in a copy.

        Batches with a producer id are checked against the producer state first:
        InvalidProducerEpochError or OutOfOrderSequenceNumberError, or a duplicate of a
        batch among the producer's last five, which is not written again: the result
        then holds that batch's offsets and ``record_count`` 0.

        Control batches are refused (InvalidRecordError: only :meth:`append_marker` writes
        markers), and so are transactional batches without a producer id, or any
        transactional batch unless ``allow_transactional`` (a Produce request without a
        transactional id: TransactionalIdAuthorizationFailedError). A verifying leader
        passes a ``VerificationGuard`` instead of True (see :meth:`start_verification`).
        """
        result = self.append_many([(records, allow_transactional)], leader_epoch)[0]
        if isinstance(result, KafkaError):
            raise result
        return result

    def append_many(self, appends: Sequence[tuple[bytes | bytearray | memoryview,
                                                  bool | VerificationGuard]],
                    leader_epoch: int | None = None) -> list[AppendInfo | KafkaError]:
        """Append the records of several produce requests, ``(records,
        allow_transactional)`` each, as that many :meth:`append` calls in that order would,
        and return what each of them would return or raise (LogClosedError is raised).

        Group commit: the requests a connection pipelined arrive together, and each run of
        them without producer ids is written with one system call (up to ``MAX_RUN``
        requests, never more than fits the active segment, so segments roll as they
        would). A request with producer ids is checked against the producer state in its
        turn and joins the run if it continues the sequences of the run's unwritten
        batches of its producers (a producer pipelining); any other (a retry that may be a
        duplicate, a new epoch, a gap) is checked once the run before it is written.
        """
        results: list[AppendInfo | KafkaError | None] = [None] * len(appends)
        prepared = []
        for index, (records, allow_transactional) in enumerate(appends):
            try:
                prepared.append((index, *self._prepare_append(records, allow_transactional,
                                                              leader_epoch)))
            except KafkaError as error:
                results[index] = error
        if not prepared:
            return results
        rolled_at = None
        with self._lock:
            self._check_open()
            segment_bytes = self.config.segment_bytes
            run: list[PreparedAppend] = []
            run_bytes = 0
            # Producer id -> (epoch, last sequence) of the run's batches, checked but not
            # written yet.
            unwritten: dict[int, tuple[int, int]] = {}
            for item in prepared:
                index, buf, _, idempotent = item
                if run and (len(run) == MAX_RUN
                            or self.active_segment.size + run_bytes + len(buf) > segment_bytes
                            or (idempotent and unwritten
                                and not continues_unwritten(idempotent, unwritten))):
                    rolled_at = self._write_run(run, leader_epoch, results,
                                                record_producers=bool(unwritten)) or rolled_at
                    run, run_bytes, unwritten = [], 0, {}
                if idempotent:
                    guard = appends[index][1]
                    try:
                        duplicate = self._producers.check(
                            idempotent, unwritten,
                            guard if type(guard) is VerificationGuard else None)
                    except KafkaError as error:
                        results[index] = error
                        continue
                    if duplicate is not None:
                        results[index] = self._duplicate_appended(duplicate)
                        continue
                run.append(item)
                run_bytes += len(buf)
            if run:
                rolled_at = self._write_run(run, leader_epoch, results,
                                            record_producers=bool(unwritten)) or rolled_at
        self._after_append(rolled_at)
        return results

    def _prepare_append(self, records: bytes | bytearray | memoryview, allow_transactional: bool,
                        leader_epoch: int | None
                        ) -> tuple[bytearray | memoryview, list[tuple[int, BatchHeader]],
                                   list[BatchHeader]]:
        """Validate one request's records (nothing locked): the buffer to write, its batches
        and those of them with a producer id."""
        view = memoryview(records).cast("B")
        batches = validate_append(view, self.config)
        if self.config.checks_timestamps:
            check_timestamps(view, batches, self.config, self._now_ms())
        codec = self.config.codec
        if codec is not None and any(h.compression != codec for _, h in batches):
            # compression.type: recompressed, the batches are checked again (a batch may
            # now exceed max.message.bytes, as in Kafka).
            view = memoryview(bytearray(b"".join([
                recompressed(view, position, h, codec, self.config.codec_level)
                if h.compression != codec
                else view[position:position + h.size] for position, h in batches])))
            batches = validate_append(view, self.config)
        # Only a batch with a producer id can be transactional (validate_append sees to it).
        idempotent = [h for _, h in batches if h.producer_id >= 0]
        if idempotent and not allow_transactional and any(h.is_transactional for h in idempotent):
            raise TransactionalIdAuthorizationFailedError(
                "transactional batches need the transactional id of their producer in the "
                "Produce request")
        # A writable buffer (a request's own frame) gets its offsets and epochs in place;
        # read-only records are copied once.
        buf = bytearray(view) if view.readonly else view
        if leader_epoch is not None:
            for position, _ in batches:
                set_partition_leader_epoch(buf, position, leader_epoch)
        return buf, batches, idempotent

    def _write_run(self, run: list[PreparedAppend], leader_epoch: int | None, results: list,
                   *, record_producers: bool = False) -> int | None:
        """Under the lock: assign offsets to the requests of ``run`` and write them with
        one system call; each gets its AppendInfo (a storage error: the error). Returns
        the first offset written if the segment rolled for it, else None."""
        first_offset = next_offset = self.log_end_offset
        buffers, assigned, spans = [], [], []
        start = 0
        append_time = self._now_ms() if self.config.log_append_time else -1
        for index, buf, batches, _ in run:
            first = len(assigned)
            for position, header in batches:
                set_base_offset(buf, position, next_offset)
                if append_time >= 0:
                    header = set_log_append_time(buf, position, header, append_time)
                assigned.append((start + position, next_offset, header))
                next_offset += header.last_offset_delta + 1
            spans.append((index, first, len(assigned)))
            buffers.append(buf)
            start += len(buf)
        if leader_epoch is not None:
            self._epochs.assign(leader_epoch, first_offset)
        try:
            rolled = self._append_locked(buffers, start, assigned)
        except KafkaError as error:
            for index, _, _ in spans:
                results[index] = error
            return None
        if record_producers:
            self._producers.record(assigned, self.active_segment.txn_index)
        for index, first, end in spans:
            results[index] = self._appended(assigned[first:end], append_time)
        return first_offset if rolled else None

    def _appended(self, assigned: list[AssignedBatch], append_time: int = -1) -> AppendInfo:
        """What an append of the ``assigned`` batches reports (``append_time``: the time
        LogAppendTime stamped them with, -1 for CreateTime)."""
        if len(assigned) == 1:
            _, base_offset, header = assigned[0]
            return AppendInfo(base_offset, base_offset + header.last_offset_delta,
                              header.max_timestamp, append_time, self._log_start_offset,
                              header.records_count)
        return AppendInfo(assigned[0][1], assigned[-1][1] + assigned[-1][2].last_offset_delta,
                          max(h.max_timestamp for _, _, h in assigned), append_time,
                          self._log_start_offset, sum(h.records_count for _, _, h in assigned))

    def _duplicate_appended(self, duplicate: BatchMetadata) -> AppendInfo:
        return AppendInfo(duplicate.first_offset, duplicate.last_offset, duplicate.timestamp, -1,
                          self._log_start_offset, 0)

    def append_marker(self, producer_id: int, producer_epoch: int, commit: bool,
                      coordinator_epoch: int, leader_epoch: int | None = None) -> AppendInfo:
        """Write a transaction marker (COMMIT if ``commit`` else ABORT) for ``producer_id``
        as leader, completing its open transaction; an ABORT adds an entry to the
        aborted-transaction index. ``leader_epoch`` as for :meth:`append`.

        Raises TransactionCoordinatorFencedError (``coordinator_epoch`` older than the
        producer's last marker's) or InvalidProducerEpochError (``producer_epoch`` older
        than the producer's); nothing is written then.
        """
        marker = TxnMarker(commit, coordinator_epoch)
        buf = bytearray(build_marker_batch(producer_id, producer_epoch, marker, self._now_ms(),
                                           -1 if leader_epoch is None else leader_epoch))
        with self._lock:
            self._check_open()
            self._producers.check_marker(producer_id, producer_epoch, coordinator_epoch)
            offset = self.log_end_offset
            set_base_offset(buf, 0, offset)
            header = read_batch_header(buf)
            if leader_epoch is not None:
                self._epochs.assign(leader_epoch, offset)
            assigned = [(0, offset, header)]
            rolled = self._append_locked((buf,), len(buf), assigned)
            self._producers.complete(producer_id, producer_epoch, marker, offset,
                                     header.max_timestamp, self.active_segment.txn_index)
            info = self._appended(assigned)
        self._after_append(offset if rolled else None)
        return info

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> AppendInfo:
        """Append batches fetched from the leader, keeping the offsets it assigned.

        Checked as :meth:`append` checks (except ``max_batch_size``: the leader accepted
        them); the first batch must start at the log end and each next one where the
        previous one ends, else UnexpectedAppendOffsetError and nothing is written. Each
        batch's partitionLeaderEpoch (if >= 0) goes to the leader epoch cache. Empty
        ``records`` is a no-op (``record_count`` 0). Batches with a producer id update the
        producer state unchecked, so a follower that becomes leader deduplicates too.
        """
        view = memoryview(records).cast("B")
        if len(view) == 0:
            return self._nothing_appended()
        batches = validate_append(view, self.config, check_batch_size=False)
        with self._lock:
            self._check_open()
            check_follower_offsets(batches, self.log_end_offset)
            for _, header in batches:
                if header.partition_leader_epoch >= 0:
                    self._epochs.assign(header.partition_leader_epoch, header.base_offset)
            assigned = [(p, h.base_offset, h) for p, h in batches]
            rolled = self._append_locked((view,), len(view), assigned)
            if any(h.producer_id >= 0 for _, h in batches):
                self._producers.record(assigned, self.active_segment.txn_index, view)
            info = self._appended(assigned)
        self._after_append(info.first_offset if rolled else None)
        return info

    def _nothing_appended(self) -> AppendInfo:
        with self._lock:
            self._check_open()
            end = self.log_end_offset
            return AppendInfo(end, end - 1, -1, -1, self._log_start_offset, 0)

    def _append_locked(self, buffers: Sequence[bytes | bytearray | memoryview], size: int,
                       assigned: list[AssignedBatch]) -> bool:
        """Write batches whose offsets are final (and epochs recorded), ``size`` bytes in
        ``buffers``: roll if due, append, flush by ``flush_messages``. Returns whether it
        rolled."""
        last_offset = assigned[-1][1] + assigned[-1][2].last_offset_delta
        if len(assigned) == 1:
            max_timestamp, record_count = assigned[0][2].max_timestamp, assigned[0][2].records_count
        else:
            max_timestamp = max(h.max_timestamp for _, _, h in assigned)
            record_count = sum(h.records_count for _, _, h in assigned)
        try:
            segment, rolled = self._maybe_roll(size, last_offset, max_timestamp)
            segment.append(buffers, assigned)
        except Exception:
            self._epochs.truncate_from_end(self.log_end_offset)  # an epoch recorded for nothing
            raise
        self._unflushed_records += record_count
        if self.config.flush_messages is not None and self._unflushed_records >= self.config.flush_messages:
            self._flush_locked()
        return rolled

    def _after_append(self, rolled_at: int | None) -> None:
        """Outside the lock: fsync the segments below ``rolled_at`` (the first offset
        written after a roll, if one happened) off the append path, as Kafka does, and
        wake the listeners."""
        if rolled_at is not None:
            threading.Thread(target=self._flush_rolled, args=(rolled_at,), daemon=True,
                             name=f"pylog-roll-flush-{self.directory.name}").start()
        self._notify()

    def _maybe_roll(self, incoming_bytes: int, last_offset: int,
                    max_timestamp: int) -> tuple[LogSegment, bool]:
        """The segment to append to, and whether it is a new one."""
        segment = self._segments[-1]
        if segment.size == 0:
            return segment, False
        if (segment.size + incoming_bytes > self.config.segment_bytes
                or segment.time_waited_for_roll(self._now_ms, max_timestamp) > self._roll_after_ms
                or segment.offset_index.is_full or segment.time_index.is_full
                or last_offset - segment.base_offset > MAX_RELATIVE_OFFSET):
            return self._roll_locked(), True
        return segment, False

    def roll(self) -> LogSegment:
        """Start a new active segment now (no-op if the active one is empty) and fsync
        the old one."""
        with self._lock:
            self._check_open()
            segment = self._roll_locked()
        self._flush_rolled(segment.base_offset)
        return segment

    def _roll_locked(self) -> LogSegment:
        old = self._segments[-1]
        if old.size == 0:
            return old
        old.seal()
        new = LogSegment.open(self.directory, self.log_end_offset, self.config,
                              created_ms=self._now_ms(), active=True, fresh=True)
        # After a crash, the producer state is rebuilt from here: headers of one segment.
        self._producers.snapshot(new.base_offset)
        self._segments.append(new)
        self._bases.append(new.base_offset)
        self._jitter = random.random()
        self._roll_after_ms = self._draw_roll_time()
        return new

    def _flush_rolled(self, up_to: int) -> None:
        """fsync the segments below ``up_to`` (now inactive) without holding the lock, then
        move the recovery point there, so recovery only re-validates the active segment.

        The fsyncs go through duplicated descriptors, so retention may delete a segment
        meanwhile; a truncation meanwhile cancels the move."""
        with self._lock:
            if self._closed or self._recovery_point >= up_to:
                return
            first = max(0, bisect.bisect_right(self._bases, self._recovery_point) - 1)
            dirty = [s for s in self._segments[first:] if s.base_offset < up_to]
            for segment in dirty:
                segment.offset_index.flush()
                segment.time_index.flush()
                segment.txn_index.flush()
            fds = [os.dup(s.records.fd) for s in dirty]
            truncations = self._truncations
        try:
            for fd in fds:
                os.fsync(fd)
        finally:
            for fd in fds:
                os.close(fd)
        with self._lock:
            if self._truncations == truncations and up_to > self._recovery_point:
                self._recovery_point = min(up_to, self.log_end_offset)
        if not self.config.expose_unflushed:
            self._notify()

    # -- flush ----------------------------------------------------------------------------

    def flush(self) -> None:
        """fsync every segment holding data above the recovery point; move the point to the end."""
        with self._lock:
            self._check_open()
            self._flush_locked()
        if not self.config.expose_unflushed:
            self._notify()

    def flush_if_due(self, now_ms: int | None = None) -> bool:
        """Flush if ``flush_ms`` has passed since the last flush and there is new data."""
        interval = self.config.flush_ms
        now_ms = self._now_ms() if now_ms is None else now_ms
        if interval is None or now_ms - self._last_flush_ms < interval:
            return False
        if self._recovery_point >= self.log_end_offset:
            self._last_flush_ms = now_ms
            return False
        self.flush()
        return True

    def _flush_locked(self) -> None:
        end = self.log_end_offset
        if self._recovery_point < end:
            first = max(0, bisect.bisect_right(self._bases, self._recovery_point) - 1)
            for segment in self._segments[first:]:
                segment.flush()
        self._recovery_point = end
        self._unflushed_records = 0
        self._last_flush_ms = self._now_ms()

    # -- read -----------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None, *,
             up_to_log_end: bool = False, committed: bool = False,
             min_one: bool = True) -> ReadResult:
        """Whole batches from the one holding ``offset``, as a region of one segment file.

        At most ``max_bytes`` except that the first batch is returned whole (unless not
        ``min_one``: then no batches when the first does not fit); nothing at or
        above the high watermark (the last stable offset if ``committed``, for isolation
        read_committed; the log end if ``up_to_log_end``, for a follower's fetch) or
        ``max_offset`` (exclusive). The result reports the high watermark and the last
        stable offset either way, and with ``committed`` the aborted transactions
        overlapping the returned batches (an empty list if none).
        ``offset`` equal to the log end gives ``region=None``. Raises OffsetOutOfRangeError
        outside ``[log_start_offset, log_end_offset]``. The caller must close the region.
        """
        with self._lock:
            self._check_open()
            start, end = self._log_start_offset, self.log_end_offset
            if offset < start or offset > end:
                raise OffsetOutOfRangeError(
                    f"offset {offset} is out of range for {self.directory.name}: "
                    f"valid offsets are {start} to {end}")
            high_watermark = self.high_watermark
            stable = (self._producers.last_stable_offset(high_watermark, start)
                      if self._producers.has_unstable else high_watermark)
            visible = end if up_to_log_end else stable if committed else high_watermark
            limit = visible if max_offset is None else min(visible, max_offset)
            region, aborted = None, [] if committed else None
            if offset < limit:
                first = max(0, bisect.bisect_right(self._bases, offset) - 1)
                for index in range(first, len(self._segments)):
                    segment = self._segments[index]
                    if segment.base_offset >= limit:
                        break
                    found = segment.read(offset, max_bytes, limit, min_one)
                    if found is not None and found[1] == 0:
                        break  # the first batch is larger than max_bytes
                    if found is not None:
                        region = FileRegion(os.dup(segment.records.fd), found[0], found[1])
                        if committed and any(not s.txn_index.is_empty
                                             for s in self._segments[index:]):
                            upper = self._offset_after(segment, found[0] + found[1], limit)
                            aborted = LogProducers.aborted(self._segments[index:], offset,
                                                           upper)
                        break
            return ReadResult(region, high_watermark, start, stable, aborted)

    def _offset_after(self, segment: LogSegment, position: int, limit: int) -> int:
        """The offset of the batch at ``position`` of ``segment`` (the end of a read):
        the upper bound of the aborted transactions a read reports."""
        if position >= segment.size:
            return min(segment.next_offset, limit)
        return min(segment.records.read_header(position).base_offset, limit)

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping offsets ``[fetch_offset, upper_bound)``
        (first offset below ``upper_bound``, marker at or after ``fetch_offset``), oldest
        marker first, from the segments' ``.txnindex`` files."""
        with self._lock:
            self._check_open()
            first = max(0, bisect.bisect_right(self._bases, fetch_offset) - 1)
            return LogProducers.aborted(self._segments[first:], fetch_offset, upper_bound)

    def active_producers(self) -> list[tuple[int, int, int, int, int, int]]:
        """Each producer this log keeps state for: (producer id, epoch, last sequence,
        last timestamp, coordinator epoch, first offset of its open transaction or -1)."""
        with self._lock:
            self._check_open()
            return [(e.producer_id, e.epoch, e.last_seq, e.last_timestamp, e.coordinator_epoch,
                     e.txn_first_offset)
                    for e in self._producers.state.producers.values()]

    def batch_of_max_timestamp(self) -> tuple[int, int] | None:
        """``(base offset, timestamp)`` of the first batch below the high watermark with
        the largest timestamp of the log; None if the log has no record there."""
        with self._lock:
            self._check_open()
            high_watermark = self.high_watermark
            best = None
            for segment in self._segments:
                found = segment.batch_of_max_timestamp(high_watermark)
                if found is not None and found[0] < self._log_start_offset:
                    # That batch was deleted (DeleteRecords): the newest of what is left.
                    found = segment.batch_of_max_timestamp_from(self._log_start_offset, high_watermark)
                if found is not None and (best is None or found[1] > best[1]):
                    best = found
            return best

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record below the high watermark whose
        timestamp is >= ``timestamp_ms``; None if there is none.

        The time index and batch headers find the batch; only that batch is decoded to
        pick the record (if it cannot be decoded, its first offset and max timestamp).
        """
        with self._lock:
            self._check_open()
            high_watermark = self.high_watermark
            for segment in self._segments:
                if segment.max_timestamp < timestamp_ms:
                    continue
                found = segment.find_timestamp(timestamp_ms, high_watermark)
                if found is None:
                    continue
                return max(found[0], self._log_start_offset), found[1]
            return None

    # -- retention and truncation ---------------------------------------------------------

    def increment_log_start_offset(self, offset: int) -> bool:
        """Move the log start offset up to ``offset`` (DeleteRecords on a leader, or a
        follower taking its leader's), never down: reads below it are refused, and the
        segments wholly below it are deleted now. Producer state goes only with those
        segments. Raises OffsetOutOfRangeError above the high watermark. True if it moved."""
        with self._lock:
            self._check_open()
            if offset > self.high_watermark:
                raise OffsetOutOfRangeError(
                    f"cannot delete records of {self.directory.name} up to {offset}: the "
                    f"high watermark is {self.high_watermark}")
            if offset <= self._log_start_offset:
                return False
            self._log_start_offset = offset
            self._epochs.truncate_from_start(offset)
            self.delete_old_segments()
        log.info("%s: log start offset moved to %d", self.directory, offset)
        return True

    def delete_old_segments(self, now: float | None = None) -> int:
        """Delete whole segments, oldest first and never the active one: those older than
        ``retention_ms``, then while the log exceeds ``retention_bytes``; never one above a
        replicated high watermark. ``now`` is in the clock's unit (seconds). Moves the log
        start offset (and the leader epoch cache's start); returns segments deleted."""
        now_ms = int((self._clock() if now is None else now) * 1000)
        with self._lock:
            self._check_open()
            count = count_deletable(self._segments, self.config, self._log_start_offset, now_ms,
                                    upper_bound=self._replicated_hw)
            if count == 0:
                return 0
            doomed = self._segments[:count]
            del self._segments[:count]
            del self._bases[:count]
            self._log_start_offset = max(self._log_start_offset, self._segments[0].base_offset)
            self._recovery_point = max(self._recovery_point, self._log_start_offset)
            self._epochs.truncate_from_start(self._log_start_offset)
            self._clamp_replicated_hw()
            for segment in doomed:
                segment.delete()
            self._producers.drop_snapshots_below(self._segments[0].base_offset)
        log.info("%s: retention deleted %d segments; log start offset is %d",
                 self.directory, count, self._log_start_offset)
        return count

    def truncate_to(self, offset: int) -> None:
        """Remove everything at and above ``offset``, at a batch boundary: a batch holding
        ``offset`` goes too. Below the log start, the log restarts empty at ``offset``.
        Leader epochs starting at or after the new end go too; the replicated high
        watermark is clamped to it."""
        with self._lock:
            self._check_open()
            if offset >= self.log_end_offset:
                return
            self._truncations += 1
            if offset <= self._segments[0].base_offset or offset < self._log_start_offset:
                self._truncate_fully(offset)
                return
            while self._segments[-1].base_offset >= offset:
                self._segments.pop().delete()
                self._bases.pop()
            active = self._segments[-1]
            active.truncate_to(offset)
            active.make_active()
            end = self.log_end_offset
            self._recovery_point = min(self._recovery_point, end)
            self._log_start_offset = min(self._log_start_offset, end)
            self._epochs.truncate_from_end(end)
            self._clamp_replicated_hw()
            self._producers.rebuild(self._segments)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and restart the log empty at ``offset``, which may be past
        the log end (a follower whose log ends below its leader's log start)."""
        with self._lock:
            self._check_open()
            self._truncations += 1
            self._truncate_fully(offset)

    def _truncate_fully(self, offset: int) -> None:
        for segment in self._segments:
            segment.delete()
        new = LogSegment.open(self.directory, offset, self.config, created_ms=self._now_ms(),
                              active=True, fresh=True)
        self._segments = [new]
        self._bases = [offset]
        self._log_start_offset = offset
        self._recovery_point = offset
        self._epochs.clear()
        self._producers.clear()
        self._clamp_replicated_hw()

    # -- producer state -------------------------------------------------------------------

    def start_verification(self, producer_id: int, epoch: int = -1, sequence: int = -1
                           ) -> VerificationGuard | None:
        """The guard a verifying leader appends ``producer_id``'s next transactional
        batch (``epoch``, first ``sequence``; -1 for a coordinator's own batch) with once
        the transaction coordinator has verified it (KIP-890, see
        :mod:`pylog.log.producer_state`); None if the producer has a transaction open
        here (nothing to verify)."""
        with self._lock:
            self._check_open()
            return self._producers.start_verification(producer_id, epoch, sequence)

    def open_transactions(self) -> dict[int, int]:
        """``{first offset: producer id}`` of the transactions open in this log."""
        with self._lock:
            return self._producers.open_transactions()

    def producer_state(self, producer_id: int) -> tuple[int, list[BatchMetadata]] | None:
        """``(epoch, last batches)`` the log keeps for ``producer_id``, None if unknown."""
        with self._lock:
            return self._producers.producer(producer_id)

    def expire_producers(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for ``expiration_ms`` (``producer.id.expiration.ms``):
        their last batch's timestamp is that old. Returns how many were forgotten."""
        with self._lock:
            self._check_open()
            return self._producers.expire(now_ms, expiration_ms)

    # -- compaction -----------------------------------------------------------------------

    def cleaner_view(self) -> CleanerView:
        """The inactive segments and the offsets the cleaner works within (see CleanerView)."""
        with self._lock:
            self._check_open()
            snapshots = [SegmentSnapshot(s, os.dup(s.records.fd), s.size, s.base_offset,
                                         s.next_offset, s.largest_timestamp)
                         for s in self._segments[:-1]]
            return CleanerView(snapshots, self.active_segment.base_offset, self._log_start_offset,
                               self._replicated_hw, self._truncations, self.config,
                               self._producers.last_stable_offset(self.high_watermark,
                                                                  self._log_start_offset),
                               LogProducers.all_aborted(self._segments))

    def replace_segments(self, old: Sequence[LogSegment], truncations: int) -> LogSegment:
        """Swap in the cleaned segment written (and fsynced) as ``<base>.*.cleaned`` for the
        consecutive inactive segments ``old`` (``base`` is the first one's base offset; the
        cleaned one ends where the last one ends). Raises SegmentsChangedError, leaving the
        cleaned files for the caller to discard, if ``old`` are no longer in the log or it
        was truncated since ``truncations`` was read (:attr:`CleanerView.truncations`)."""
        base = old[0].base_offset
        with self._lock:
            self._check_open()
            first = next((i for i, s in enumerate(self._segments) if s is old[0]), None)
            if (self._truncations != truncations or first is None
                    or first + len(old) >= len(self._segments)
                    or any(a is not b for a, b in zip(self._segments[first:], old))):
                raise SegmentsChangedError(f"{self.directory}: segments from {base} changed "
                                           "while they were cleaned")
            new = swap.install_cleaned(self.directory, old, self.config, RECOVERY_MAX_BATCH)
            self._segments[first:first + len(old)] = [new]
            self._bases[first:first + len(old)] = [base]
            return new

    # -- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        """Flush and close every file. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._flush_locked()
            self._producers.snapshot(self.log_end_offset)
            for segment in self._segments:
                segment.close()
            self._closed = True

    def delete(self) -> None:
        """Close without flushing and remove the partition directory."""
        with self._lock:
            if not self._closed:
                for segment in self._segments:
                    segment.delete()
                self._closed = True
            # A thread finishing its work on this log (a follower's fetch, a roll's flush)
            # may write a file into the directory while it is being removed, which makes
            # the last rmdir fail; once the directory is gone, such a write fails instead.
            for _ in range(50):
                shutil.rmtree(self.directory, ignore_errors=True)
                if not self.directory.exists():
                    return
                time.sleep(0.01)
            log.warning("%s: could not remove the deleted log's directory", self.directory)

    def __repr__(self) -> str:
        return (f"Log({self.directory}, start={self._log_start_offset}, "
                f"end={self.log_end_offset}, segments={len(self._segments)})")

