"""Log compaction: keep the newest record of each key (Kafka's ``Cleaner``).

Which log is cleaned next is the :class:`~pylog.log.cleaner_manager.CleanerManager`'s choice:
the dirtiest one at or over ``min.cleanable.dirty.ratio``, or one whose oldest dirty segment
is past ``max.compaction.lag.ms`` (:attr:`CleanableRange.overdue_ms`).

One pass over a log whose ``cleanup.policy`` has ``compact`` (:meth:`Cleaner.clean`):

1. The dirty part runs from ``first_dirty`` (the cleaner's checkpoint) to the first
   uncleanable offset: the active segment's base, the replicated high watermark, or the
   first segment with records younger than ``min.compaction.lag.ms``. The active segment
   is never touched.
2. An offset map (key -> offset of its newest record) is built over the dirty part, batch
   by batch, until it holds about ``dedupe_buffer_bytes``; the pass ends there (``end``).
3. Every segment from the log start with a base offset below ``end`` is rewritten, in
   groups of consecutive segments whose *cleaned* bytes fit one segment (``segment.bytes``;
   a segment joins the group while the output so far plus its whole size fits, so small
   cleaned segments merge in the same pass and no long run of empty segments remains,
   which librdkafka would take for a message too large to fetch). A record stays
   if it is the newest of its key in the map (or its key is not in the map), except a
   record without a key, and a tombstone (null value) below ``end`` whose batch's newest
   timestamp is older than ``delete.retention.ms``. Records of aborted transactions go
   (and never enter the offset map): a transactional batch of a producer whose aborted
   transaction, in the segments' ``.txnindex`` entries, spans its offset. Control batches
   (transaction markers) are always kept, whole: Kafka removes them once
   ``delete.retention.ms`` has passed after their transaction's data is gone; pylog keeps
   them. The cleaned segment keeps the ``.txnindex`` entries of the segments it replaces.
   Nothing at or above the last stable offset is cleaned, so every transaction in the
   cleaned part is decided. Kept records keep their offsets and bytes
   (:mod:`pylog.records.filtering`); offsets whose batches went entirely are covered by
   the batch before them or by an empty batch, so segments stay contiguous.
4. Each group's cleaned segment is written beside the originals and swapped in
   (:mod:`pylog.log.swap`), oldest group first, so a tombstone never goes before the older
   values it hides. The caller checkpoints ``end`` as the next pass's ``first_dirty``.

Records are decoded per batch (the C walk of the records decoder when built); the map is a
dict of key bytes, so its memory is counted as key length plus ``MAP_ENTRY_OVERHEAD``.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, NamedTuple, Sequence

from pylog.errors import CorruptRecordError, PylogError, TruncatedBatchError
from pylog.log import layout, swap
from pylog.log.config import MAX_LONG, LogConfig
from pylog.log.file_records import FileRecords
from pylog.log.offset_index import OffsetIndex
from pylog.log.segment import LogSegment
from pylog.log.time_index import TimeIndex
from pylog.log.transaction_index import AbortedTxn, TransactionIndex
from pylog.records.filtering import empty_batch, retain_records, scan_records, with_last_offset_delta
from pylog.records.header import (
    BATCH_HEADER_SIZE, LOG_OVERHEAD, MAX_TIMESTAMP_POSITION, BatchHeader, check_crc,
    read_batch_header)

if TYPE_CHECKING:
    from pylog.log.log import Log

log = logging.getLogger(__name__)

MAP_ENTRY_OVERHEAD = 100  # bytes of a dict entry, its key object and its int, beyond the key
MAX_RELATIVE_OFFSET = 2**31 - 1
_READ_CHUNK = 4 << 20
_WRITE_CHUNK = 4 << 20


class SegmentsChangedError(PylogError):
    """The segments a cleaning read were deleted or truncated meanwhile; the cleaned
    segment was not swapped in (the cleaner tries again later)."""


@dataclass(frozen=True, slots=True)
class SegmentSnapshot:
    """An inactive segment as the cleaner reads it: ``fd`` is a private duplicate of its
    ``.log`` descriptor (readable even if retention deletes the segment meanwhile)."""

    segment: LogSegment
    fd: int
    size: int
    base_offset: int
    next_offset: int
    largest_timestamp: int


@dataclass(frozen=True, slots=True)
class CleanerView:
    """What the cleaner needs of a log, taken at one instant under its lock. Close it."""

    segments: list[SegmentSnapshot]  # the inactive segments, oldest first
    active_base_offset: int
    log_start_offset: int
    replicated_high_watermark: int | None
    truncations: int
    config: LogConfig
    last_stable_offset: int | None = None  # nothing at or above it is cleaned
    aborted: tuple[AbortedTxn, ...] = ()  # every aborted transaction of the log

    def close(self) -> None:
        for snapshot in self.segments:
            os.close(snapshot.fd)


class CleaningAbortedError(PylogError):
    """The cleaner was asked to stop; the cleaned files were discarded."""


@dataclass(frozen=True, slots=True)
class CleanableRange:
    """The part of a log a pass may clean, and how dirty the log is."""

    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    dirty_bytes: int
    overdue_ms: int = 0
    """How long ago (ms) ``max.compaction.lag.ms`` ran out for the oldest dirty segment
    (0: it has not): such a log is cleaned whatever its dirty ratio."""

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


@dataclass(frozen=True, slots=True)
class CleanResult:
    """What one pass did. ``end`` is the next pass's ``first_dirty``."""

    first_dirty: int
    end: int
    bytes_read: int
    bytes_written: int
    segments_before: int
    segments_after: int
    map_entries: int


def cleanable_range(view: CleanerView, first_dirty: int, now_ms: int) -> CleanableRange:
    """Where the dirty part of the log in ``view`` starts and ends (see the module docstring).
    ``first_dirty`` outside the log is moved to the log start, as Kafka does."""
    segments = view.segments
    if first_dirty < view.log_start_offset or first_dirty > view.active_base_offset:
        first_dirty = view.log_start_offset
    uncleanable = view.active_base_offset
    if view.replicated_high_watermark is not None:
        uncleanable = min(uncleanable, view.replicated_high_watermark)
    if view.last_stable_offset is not None:
        uncleanable = min(uncleanable, view.last_stable_offset)
    lag = view.config.min_compaction_lag_ms
    if lag > 0:
        young = next((s.base_offset for s in segments if s.next_offset > first_dirty
                      and s.largest_timestamp > now_ms - lag), None)
        if young is not None:
            uncleanable = min(uncleanable, young)
    uncleanable = max(uncleanable, first_dirty)
    clean = sum(s.size for s in segments if s.next_offset <= first_dirty)
    dirty_segments = [s for s in segments
                      if s.next_offset > first_dirty and s.base_offset < uncleanable]
    overdue = 0
    if dirty_segments and view.config.max_compaction_lag_ms < MAX_LONG:
        # As Kafka: the first batch of the oldest dirty segment dates it.
        first = dirty_segments[0]
        if first.size >= BATCH_HEADER_SIZE:
            written = int.from_bytes(os.pread(first.fd, 8, MAX_TIMESTAMP_POSITION), "big",
                                     signed=True)
            if written >= 0:
                overdue = max(0, now_ms - view.config.max_compaction_lag_ms - written)
    return CleanableRange(first_dirty, uncleanable, clean, sum(s.size for s in dirty_segments),
                          overdue)


class Cleaner:
    """Compacts one log at a time. Not thread-safe: each cleaner thread has its own.

    Example::

        cleaner = Cleaner(dedupe_buffer_bytes=64 << 20)
        result = cleaner.clean(log, first_dirty=0, now_ms=int(time.time() * 1000))
        # checkpoint result.end
    """

    def __init__(self, dedupe_buffer_bytes: int, stop: threading.Event | None = None) -> None:
        self.dedupe_buffer_bytes = dedupe_buffer_bytes
        self._stop = stop or threading.Event()
        self._abort: threading.Event | None = None

    def clean(self, target: "Log", first_dirty: int, now_ms: int,
              abort: threading.Event | None = None) -> CleanResult:
        """One pass over ``target``, whatever its dirty ratio. Raises CleaningAbortedError
        when stopped (or ``abort`` is set), SegmentsChangedError when retention or a
        truncation got there first, a CorruptRecordError for a batch it cannot read; the
        groups not swapped in by then are left as they were."""
        self._abort = abort
        view = target.cleaner_view()
        try:
            cleanable = cleanable_range(view, first_dirty, now_ms)
            aborted = AbortedRanges(view.aborted)
            offset_map, end, read = self._build_offset_map(view, cleanable, aborted)
            rules = _RetainRules(offset_map.get, end, now_ms - view.config.delete_retention_ms,
                                 aborted)
            doomed = [s for s in view.segments if s.base_offset < end]
            written, groups = 0, 0
            group: list[SegmentSnapshot] = []
            writer: _CleanedSegmentWriter | None = None
            try:
                for snapshot in doomed:
                    if group and (writer.size + snapshot.size > view.config.segment_bytes
                                  or snapshot.next_offset - 1 - group[0].base_offset > MAX_RELATIVE_OFFSET):
                        written += self._swap_in(target, view, group, writer)
                        groups, group, writer = groups + 1, [], None
                    if writer is None:
                        writer = _CleanedSegmentWriter(
                            _open_cleaned(target.directory, snapshot.base_offset, view, now_ms))
                    group.append(snapshot)
                    self._clean_segment(snapshot, writer, rules)
                    read += snapshot.size
                if group:
                    written += self._swap_in(target, view, group, writer)
                    groups += 1
                    writer = None
            finally:
                if writer is not None:  # a failure: the originals stay
                    writer.discard(target.directory)
            return CleanResult(cleanable.first_dirty, end, read, written, len(doomed), groups,
                               len(offset_map))
        finally:
            view.close()

    # -- the offset map ---------------------------------------------------------------------

    def _build_offset_map(self, view: CleanerView, cleanable: CleanableRange,
                          aborted: "AbortedRanges") -> tuple[dict[bytes, int], int, int]:
        """``(key -> newest offset, end of the mapped part, bytes read)``."""
        offsets: dict[bytes, int] = {}
        end, used, read = cleanable.first_dirty, 0, 0
        for snapshot in view.segments:
            if snapshot.next_offset <= cleanable.first_dirty:
                continue
            for buf, pos, header in _read_batches(snapshot):
                self._check_stop()
                if header.next_offset <= cleanable.first_dirty:
                    continue
                if header.next_offset > cleanable.first_uncleanable or used > self.dedupe_buffer_bytes:
                    return offsets, end, read
                read += header.size
                end = header.next_offset
                if header.is_control or header.records_count == 0 or aborted.holds(header):
                    continue
                check_crc(buf, pos, header)
                spans = scan_records(buf, pos, header)
                before = len(offsets)
                offsets.update(zip(spans.keys, spans.offsets))
                added = len(offsets) - before
                if added:
                    key_bytes = sum(len(k) for k in spans.keys if k is not None)
                    used += added * (MAP_ENTRY_OVERHEAD + key_bytes // max(len(spans.keys), 1))
        return offsets, end, read

    # -- rewriting --------------------------------------------------------------------------

    def _clean_segment(self, snapshot: SegmentSnapshot, writer: "_CleanedSegmentWriter",
                       rules: "_RetainRules") -> None:
        latest, end, horizon_ms, aborted = rules
        # A tombstone stays for delete.retention.ms after it was written here (its segment's
        # last write, which cleaning keeps), whatever its own timestamp: a replayed or
        # mirrored delete with an old CreateTime is still seen by a reader that is behind.
        written_ms = int(os.fstat(snapshot.fd).st_mtime * 1000)
        for buf, pos, header in _read_batches(snapshot):
            self._check_stop()
            check_crc(buf, pos, header)
            if header.is_control:
                writer.keep(bytes(memoryview(buf)[pos:pos + header.size]), header)
                continue
            if header.records_count == 0 or aborted.holds(header):  # emptied earlier, or aborted
                writer.drop(header)
                continue
            spans = scan_records(buf, pos, header)
            expired = max(header.max_timestamp, written_ms) < horizon_ms
            keep = [key is not None and latest(key, -1) <= offset
                    and not (tombstone and expired and offset < end)
                    for key, offset, tombstone in zip(spans.keys, spans.offsets, spans.tombstones)]
            kept = retain_records(buf, pos, header, spans, keep)
            if kept is None:
                writer.drop(header)
            else:
                writer.keep(kept, header if all(keep) else None)

    def _swap_in(self, target: "Log", view: CleanerView, group: list[SegmentSnapshot],
                 writer: "_CleanedSegmentWriter") -> int:
        """Finish the group's cleaned segment, fsync it and swap it in; returns its size."""
        writer.keep_aborted([entry for s in group for entry in s.segment.txn_index.entries])
        writer.finish(group[-1].next_offset)
        size = writer.size
        base = group[0].base_offset
        mtime = max(os.fstat(s.fd).st_mtime for s in group)
        os.utime(swap.segment_paths(target.directory, base, layout.CLEANED_SUFFIX)[2], (mtime, mtime))
        try:
            target.replace_segments([s.segment for s in group], view.truncations)
        except BaseException:
            swap.discard_cleaned(target.directory, base)
            raise
        return size

    def _check_stop(self) -> None:
        if self._stop.is_set() or (self._abort is not None and self._abort.is_set()):
            raise CleaningAbortedError("the cleaner is stopping")


class _RetainRules(NamedTuple):
    """What decides whether a record stays (see the module docstring)."""

    latest: Callable[[bytes, int], int]  # the offset map's get
    end: int  # tombstones at or above this stay (their keys were not mapped)
    horizon_ms: int  # tombstones in batches older than this go
    aborted: "AbortedRanges"  # batches of aborted transactions go


class AbortedRanges:
    """Which transactional batches belong to an aborted transaction: per producer, the
    ``[first_offset, last_offset]`` ranges of its aborted transactions."""

    def __init__(self, aborted: Sequence[AbortedTxn]) -> None:
        ranges: dict[int, list[tuple[int, int]]] = {}
        for entry in aborted:
            ranges.setdefault(entry.producer_id, []).append((entry.first_offset, entry.last_offset))
        self._ranges = {pid: sorted(rs) for pid, rs in ranges.items()}
        self._firsts = {pid: [first for first, _ in rs] for pid, rs in self._ranges.items()}

    def holds(self, header: BatchHeader) -> bool:
        if not self._ranges or not header.is_transactional:
            return False
        firsts = self._firsts.get(header.producer_id)
        if firsts is None:
            return False
        i = bisect.bisect_right(firsts, header.base_offset) - 1
        return i >= 0 and header.base_offset <= self._ranges[header.producer_id][i][1]


def _open_cleaned(directory: Path, base: int, view: CleanerView, now_ms: int) -> LogSegment:
    swap.discard_cleaned(directory, base)
    index_path, time_index_path, log_path = swap.segment_paths(directory, base, layout.CLEANED_SUFFIX)
    txn_index_path = swap.txn_index_path(directory, base, layout.CLEANED_SUFFIX)
    size = view.config.segment_index_bytes
    return LogSegment(base, FileRecords.open(log_path),
                      OffsetIndex(index_path, base, size, writable=True),
                      TimeIndex(time_index_path, base, size, writable=True), view.config, now_ms,
                      TransactionIndex(txn_index_path, base))


def _close(segment: LogSegment) -> None:
    segment.offset_index.close()
    segment.time_index.close()
    os.close(segment.records.fd)


class _CleanedSegmentWriter:
    """Appends kept batches to a cleaned segment, covering the offsets of dropped batches
    so that each batch starts where the previous one ends: the previous kept batch is
    extended over them if it has no producer (its lastOffsetDelta says nothing about
    sequences), else an empty batch covers them."""

    def __init__(self, segment: LogSegment) -> None:
        self._segment = segment
        self._next_offset = segment.base_offset
        self._pending: bytes | None = None  # the last kept batch, not yet written
        self._pending_header: BatchHeader | None = None
        self._gap_max_timestamp = -1
        self._gap_epoch = -1
        self._buffer = bytearray()
        self._assigned: list[tuple[int, int, BatchHeader]] = []
        self._closed = False

    def keep(self, batch: bytes, header: BatchHeader | None) -> None:
        """Append ``batch``; ``header`` is its header if known (None: parse it)."""
        header = header if header is not None else read_batch_header(batch)
        self._cover_gap(header.base_offset)
        self._write_pending()
        self._pending, self._pending_header = batch, header

    def keep_aborted(self, entries: list[AbortedTxn]) -> None:
        """The ``.txnindex`` entries of the replaced segments (their markers are kept)."""
        for entry in entries:
            self._segment.txn_index.append(entry)

    def drop(self, header: BatchHeader) -> None:
        self._gap_max_timestamp = max(self._gap_max_timestamp, header.max_timestamp)
        self._gap_epoch = header.partition_leader_epoch

    @property
    def size(self) -> int:
        """Bytes of the cleaned segment so far."""
        pending = len(self._pending) if self._pending is not None else 0
        return self._segment.size + len(self._buffer) + pending

    def finish(self, end_offset: int) -> None:
        """Cover the offsets up to ``end_offset``, write, fsync and close the files."""
        self._cover_gap(end_offset)
        self._write_pending()
        self._flush()
        self._segment.seal()
        self._segment.flush()
        _close(self._segment)
        self._closed = True

    def discard(self, directory: Path) -> None:
        """Close (if still open) and remove the cleaned files."""
        if not self._closed:
            _close(self._segment)
            self._closed = True
        swap.discard_cleaned(directory, self._segment.base_offset)

    def _cover_gap(self, up_to: int) -> None:
        pending = self._pending_header
        start = pending.next_offset if pending is not None else self._next_offset
        if up_to <= start:
            return
        if pending is not None and pending.producer_id < 0 and not pending.is_control:
            self._pending = with_last_offset_delta(self._pending, up_to - 1 - pending.base_offset)
        else:
            self._write_pending()
            self._pending = empty_batch(start, up_to - 1 - start, self._gap_max_timestamp, self._gap_epoch)
        self._pending_header = read_batch_header(self._pending)
        self._gap_max_timestamp, self._gap_epoch = -1, -1

    def _write_pending(self) -> None:
        if self._pending is None:
            return
        header = self._pending_header
        self._assigned.append((len(self._buffer), header.base_offset, header))
        self._buffer += self._pending
        self._next_offset = header.next_offset
        self._pending = self._pending_header = None
        if len(self._buffer) >= _WRITE_CHUNK:
            self._flush()

    def _flush(self) -> None:
        if self._buffer:
            self._segment.append((self._buffer,), self._assigned)
            self._buffer = bytearray()
            self._assigned = []


def _read_batches(snapshot: SegmentSnapshot) -> Iterator[tuple[bytes, int, BatchHeader]]:
    """``(buffer, position, header)`` of each batch of a segment, read in large chunks
    through the snapshot's own descriptor (framing checked, CRC not)."""
    position, size, fd = 0, snapshot.size, snapshot.fd
    while position < size:
        chunk = os.pread(fd, min(_READ_CHUNK, size - position), position)
        p = 0
        while p < len(chunk):
            try:
                header = read_batch_header(chunk, p)
            except TruncatedBatchError:
                if p > 0 or len(chunk) < LOG_OVERHEAD:
                    break
                needed = int.from_bytes(chunk[8:12], "big", signed=True) + LOG_OVERHEAD
                if needed <= len(chunk) or position + needed > size:
                    raise
                chunk = os.pread(fd, needed, position)
                continue
            yield chunk, p, header
            p += header.size
        if p == 0:
            raise CorruptRecordError(f"segment {snapshot.base_offset}: no batch at position {position}")
        position += p
