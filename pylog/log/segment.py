"""A log segment: one ``.log`` file joined to its ``.index``, ``.timeindex`` and ``.txnindex``.

The three files share the segment's base offset as their name (see :mod:`layout`). The
``.log`` holds whole record batches (:mod:`file_records`); the indexes are sparse maps
into it (:mod:`offset_index`, :mod:`time_index`); the ``.txnindex`` lists the transactions
aborted by markers in the segment (:mod:`transaction_index`, maintained by the log). Every ``index_interval_bytes`` of log
the segment adds an offset-index entry for the batch being appended, and a time-index
entry if the largest timestamp has grown.

After a crash, :meth:`LogSegment.recover` re-validates every batch, truncates the file at
the first invalid one and rebuilds both indexes from the valid prefix; it returns the
number of bytes truncated. :meth:`LogSegment.load` is the quick path after a clean
shutdown: it checks the indexes against the log and raises CorruptIndexError (or a
CorruptRecordError) when they disagree, in which case the caller recovers the segment.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Callable, Sequence

from pylog.errors import CorruptRecordError
from pylog.log import layout
from pylog.log.config import LogConfig
from pylog.log.file_records import FileRecords
from pylog.log.index import CorruptIndexError
from pylog.log.offset_index import OffsetIndex
from pylog.log.time_index import NO_TIMESTAMP, TimeIndex
from pylog.log.transaction_index import TransactionIndex
from pylog.records.batch import decode_batch
from pylog.records.header import BatchHeader

log = logging.getLogger(__name__)


class LogSegment:
    """One segment. Not thread-safe on its own: :class:`pylog.log.Log` holds the lock."""

    def __init__(self, base_offset: int, records: FileRecords, offset_index: OffsetIndex,
                 time_index: TimeIndex, config: LogConfig, created_ms: int,
                 txn_index: TransactionIndex | None = None) -> None:
        self.base_offset = base_offset
        self.records = records
        self.offset_index = offset_index
        self.time_index = time_index
        self.txn_index = txn_index if txn_index is not None else TransactionIndex(
            layout.txn_index_file(records.path.parent, base_offset), base_offset)
        self._index_interval = config.index_interval_bytes
        self._max_index_size = config.segment_index_bytes
        self.created_ms = created_ms
        self._reset_state()

    def _reset_state(self) -> None:
        self.next_offset = self.base_offset
        self.max_timestamp = NO_TIMESTAMP
        self._offset_of_max_timestamp = self.base_offset
        self._bytes_since_last_index_entry = 0
        self.first_batch_timestamp: int | None = None

    @classmethod
    def open(cls, directory: Path, base_offset: int, config: LogConfig, *, created_ms: int,
             active: bool, fresh: bool = False) -> "LogSegment":
        """Open the segment's files (creating them; emptying them first if ``fresh``).

        The caller then calls :meth:`load` or :meth:`recover` unless ``fresh``.
        """
        paths = (layout.log_file(directory, base_offset), layout.index_file(directory, base_offset),
                 layout.time_index_file(directory, base_offset),
                 layout.txn_index_file(directory, base_offset))
        if fresh:
            for path in paths:
                path.unlink(missing_ok=True)
        size = config.segment_index_bytes
        records = FileRecords.open(paths[0])
        offset_index = OffsetIndex(paths[1], base_offset, size, writable=active)
        time_index = TimeIndex(paths[2], base_offset, size, writable=active)
        return cls(base_offset, records, offset_index, time_index, config, created_ms,
                   TransactionIndex(paths[3], base_offset))

    # -- state ----------------------------------------------------------------------------

    @property
    def size(self) -> int:
        return self.records.size

    @property
    def largest_timestamp(self) -> int:
        """The newest record timestamp (ms); the file's mtime if the batches carry none."""
        if self.max_timestamp > 0:
            return self.max_timestamp
        return int(os.fstat(self.records.fd).st_mtime * 1000)

    def time_waited_for_roll(self, now_ms: Callable[[], int], incoming_timestamp: int) -> int:
        """How far the segment is into ``segment.ms``: as in Kafka, the incoming batch's
        timestamp minus the first batch's, or the clock (``now_ms()``, read only then)
        since creation without timestamps."""
        if self.first_batch_timestamp is not None and self.first_batch_timestamp > 0:
            return incoming_timestamp - self.first_batch_timestamp
        return now_ms() - self.created_ms

    def _index_batch(self, position: int, base_offset: int, header: BatchHeader) -> None:
        """Account for one batch written at ``position`` (shared by append and rebuild);
        ``base_offset`` is the batch's assigned one."""
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self._offset_of_max_timestamp = base_offset
        if (self._bytes_since_last_index_entry > self._index_interval
                and not self.offset_index.is_full and not self.time_index.is_full):
            self.offset_index.append(base_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self._offset_of_max_timestamp)
            self._bytes_since_last_index_entry = 0
        self._bytes_since_last_index_entry += header.size
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = header.max_timestamp
        self.next_offset = base_offset + header.last_offset_delta + 1

    # -- writes ---------------------------------------------------------------------------

    def append(self, buffers: Sequence[bytes | bytearray | memoryview],
               batches: list[tuple[int, int, BatchHeader]]) -> None:
        """Write already-validated batches with offsets assigned, in ``buffers`` written one
        after another (one write); ``batches`` holds each batch's position within their
        concatenation, its assigned base offset and its header."""
        start = self.records.append_all(buffers)
        for position, base_offset, header in batches:
            self._index_batch(start + position, base_offset, header)

    def truncate_to(self, offset: int) -> int:
        """Remove every batch that ends at or after ``offset`` (so the batch holding
        ``offset`` goes too); return the bytes removed."""
        found = self.translate_offset(offset)
        if found is None:
            return 0
        position, header = found
        self.offset_index.truncate_to(header.base_offset)
        self.time_index.truncate_to(header.base_offset)
        self.txn_index.truncate_to(header.base_offset)
        removed = self.records.truncate_to(position)
        self._load_tail_state()
        return removed

    def seal(self) -> None:
        """The segment stops being active: record its largest timestamp, trim the indexes."""
        if self.max_timestamp > self.time_index.last_entry.timestamp and not self.time_index.is_full:
            self.time_index.maybe_append(self.max_timestamp, self._offset_of_max_timestamp)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()

    def make_active(self) -> None:
        """Give the indexes room to grow again (the segment takes appends)."""
        self.offset_index.resize(self._max_index_size)
        self.time_index.resize(self._max_index_size)

    # -- loading and recovery -------------------------------------------------------------

    def load(self) -> None:
        """Quick load after a clean shutdown; raises CorruptIndexError or CorruptRecordError
        when the indexes and the log disagree."""
        self.offset_index.sanity_check(self.records.size)
        self.txn_index.sanity_check()
        self._load_tail_state()
        self.time_index.sanity_check(self.next_offset)

    def _load_tail_state(self) -> None:
        """Recompute next offset, largest timestamp and index spacing by scanning the
        batches after the last index entries (not the whole segment)."""
        self._reset_state()
        if self.records.size == 0:
            return
        self.first_batch_timestamp = self.records.read_header(0).max_timestamp
        last = self.offset_index.last_entry
        last_time = self.time_index.last_entry
        if last_time.timestamp != NO_TIMESTAMP:
            self.max_timestamp = last_time.timestamp
            self._offset_of_max_timestamp = last_time.offset
        start = min(last.position, self.offset_index.lookup(last_time.offset).position)
        checked = False
        for position, header in self.records.headers(start):
            if position == last.position:
                checked = header.base_offset == last.offset
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp = header.max_timestamp
                self._offset_of_max_timestamp = header.base_offset
            self.next_offset = header.next_offset
        if not checked:
            raise CorruptIndexError(
                f"{self.offset_index.path}: no batch with offset {last.offset} starts at "
                f"position {last.position}")
        self._bytes_since_last_index_entry = self.records.size - last.position

    def recover(self, max_batch_size: int) -> int:
        """Re-validate every batch, truncate at the first invalid one and rebuild both
        indexes. Returns the number of bytes truncated. (The transaction index is the
        loader's: it rebuilds it from the markers as it replays the producer state.)"""
        self.offset_index.reset()
        self.time_index.reset()
        self.offset_index.resize(self._max_index_size)
        self.time_index.resize(self._max_index_size)
        self._reset_state()
        valid_end, problem = self.records.validate(
            0, self.base_offset, max_batch_size, lambda pos, h: self._index_batch(pos, h.base_offset, h))
        truncated = self.records.truncate_to(valid_end)
        if truncated:
            log.warning("%s: truncated %d bytes at position %d: %s",
                        self.records.path, truncated, valid_end, problem)
        return truncated

    # -- reads ----------------------------------------------------------------------------

    def translate_offset(self, offset: int, start: int = 0) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset is >= ``offset``."""
        entry = self.offset_index.lookup(offset)
        return self.records.search_for_offset(offset, max(entry.position, start))

    def read(self, offset: int, max_bytes: int, max_offset: int,
             min_one: bool = True) -> tuple[int, int] | None:
        """``(position, length)`` of whole batches from the one holding ``offset``, up to
        ``max_bytes`` and below ``max_offset``; the first batch whole regardless if
        ``min_one``, else a length of 0 when it does not fit."""
        found = self.translate_offset(offset)
        if found is None or found[1].base_offset >= max_offset:
            return None
        start, first = found
        if not min_one and first.size > max_bytes:
            return start, 0
        end = self.records.size
        if max_offset < self.next_offset:
            bound = self.translate_offset(max_offset, start)
            if bound is not None:
                end = bound[0] if bound[1].base_offset >= max_offset else bound[0] + bound[1].size
        wanted = start + max(max_bytes, first.size)
        if wanted >= end:
            return start, end - start
        entry = self.offset_index.lookup_by_position(wanted)
        stop = max(start + first.size, entry.position)
        for position, header in self.records.headers(max(entry.position, start)):
            if position + header.size > wanted:
                break
            stop = position + header.size
        return start, min(stop, end) - start

    def batch_of_max_timestamp(self, max_offset: int) -> tuple[int, int] | None:
        """``(base offset, timestamp)`` of the first batch below ``max_offset`` with this
        segment's largest timestamp there; None without one. Kept as batches are indexed,
        so only a segment whose largest is not yet below ``max_offset`` (the active one,
        before its followers catch up) reads its batch headers."""
        if self.max_timestamp == NO_TIMESTAMP or self.base_offset >= max_offset:
            return None
        if self._offset_of_max_timestamp < max_offset:
            return self._offset_of_max_timestamp, self.max_timestamp
        # The batches before the time index's last entry below max_offset are no newer
        # than it: read only the headers from there on.
        entry = self.time_index.last_entry_below(max_offset)
        best = None if entry.timestamp == NO_TIMESTAMP else (entry.offset, entry.timestamp)
        start = self.offset_index.lookup(entry.offset).position
        for _, header in self.records.headers(start):
            if header.base_offset >= max_offset:
                break
            if best is None or header.max_timestamp > best[1]:
                best = (header.base_offset, header.max_timestamp)
        return None if best is None or best[1] == NO_TIMESTAMP else best

    def batch_of_max_timestamp_from(self, min_offset: int, max_offset: int) -> tuple[int, int] | None:
        """As :meth:`batch_of_max_timestamp`, over the batches holding offsets in
        ``[min_offset, max_offset)`` only: the log start moved into this segment (DeleteRecords)
        past its newest batch. The offset is the batch's, or ``min_offset`` for the batch
        that straddles it. Reads the batch headers from ``min_offset`` on."""
        best = None
        for position, header in self.records.headers(self.offset_index.lookup(min_offset).position):
            if header.base_offset >= max_offset:
                break
            if header.last_offset < min_offset or header.max_timestamp == NO_TIMESTAMP:
                continue
            newest = header.max_timestamp
            if header.base_offset < min_offset:  # its deleted records do not count
                newest = self._newest_timestamp_from(position, header, min_offset)
            if newest != NO_TIMESTAMP and (best is None or newest > best[1]):
                best = (max(header.base_offset, min_offset), newest)
        return best

    def _newest_timestamp_from(self, position: int, header: BatchHeader, min_offset: int) -> int:
        """The largest timestamp of the batch's records at or after ``min_offset`` (decoded);
        the batch's own when it cannot be decoded."""
        try:
            batch = decode_batch(self.records.read(position, header.size))
        except CorruptRecordError:
            return header.max_timestamp
        kept = [record.timestamp for record in batch.records if record.offset >= min_offset]
        return max(kept, default=NO_TIMESTAMP)

    def find_timestamp(self, timestamp: int, max_offset: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record below ``max_offset`` whose timestamp
        is >= ``timestamp``. The time index and batch headers find the batch; only that
        batch is decoded (if it cannot be, its base offset and max timestamp answer)."""
        entry = self.time_index.lookup(timestamp)
        position = self.offset_index.lookup(entry.offset).position
        found = self.records.search_for_timestamp(timestamp, position)
        if found is None or found[1].base_offset >= max_offset:
            return None
        position, header = found
        try:
            batch = decode_batch(self.records.read(position, header.size))
        except CorruptRecordError:
            return header.base_offset, header.max_timestamp
        for record in batch.records:
            if record.timestamp >= timestamp and record.offset < max_offset:
                return record.offset, record.timestamp
        return header.base_offset, header.max_timestamp

    # -- lifecycle ------------------------------------------------------------------------

    def flush(self) -> None:
        self.records.flush()
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        self.seal()
        self.offset_index.close()
        self.time_index.close()
        os.close(self.records.fd)

    def delete(self) -> None:
        """Close and remove the segment's files (open duplicates of the fd keep working)."""
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()
        os.close(self.records.fd)
        self.records.path.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return f"LogSegment(base={self.base_offset}, next={self.next_offset}, size={self.size})"
