"""The shared machinery of the sparse index files (``.index`` and ``.timeindex``).

An index file is an array of fixed-size big-endian entries sorted by every field, with
no header. :class:`AbstractIndex` maps it with ``mmap`` and does what both kinds need:
binary search on either field, append, truncate, resize and close. Subclasses
(:mod:`pylog.log.offset_index`, :mod:`pylog.log.time_index`) declare only the entry layout
and the meaning of the fields.

The active segment's index is preallocated to ``segment_index_bytes`` (a sparse file) so
appends never remap; it is trimmed to its entries when the segment rolls or the log
closes. After a crash the file may still have its preallocated length with zeros past
the last real entry: such an index fails :meth:`sanity_check` and is rebuilt from the log,
as are corrupt or missing index files.
"""

from __future__ import annotations

import mmap
import os
import struct
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from pylog.errors import KafkaStorageError


class CorruptIndexError(KafkaStorageError):
    """An index file does not agree with its layout or with the log; it is rebuilt from the log."""


class IndexInvariantError(KafkaStorageError):
    """An append would break the index's ordering (a bug in the caller, never bad input)."""


@dataclass(frozen=True, slots=True)
class OffsetPosition:
    """An offset-index entry: the batch starting at ``offset`` is at byte ``position``."""

    offset: int
    position: int


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    """A time-index entry: records up to ``offset`` have timestamps up to ``timestamp``."""

    timestamp: int
    offset: int


WRITE_AHEAD_BYTES = 8 * 1024  # two pages: a new segment costs little disk
_ZEROS = memoryview(bytes(WRITE_AHEAD_BYTES))


@contextmanager
def _opened(path: Path, flags: int) -> Iterator[int]:
    fd = os.open(path, flags, 0o644)
    try:
        yield fd
    finally:
        os.close(fd)


class AbstractIndex:
    """An mmap-ed array of ``ENTRY`` structs for the segment starting at ``base_offset``."""

    ENTRY: struct.Struct

    def __init__(self, path: Path, base_offset: int, max_index_size: int, *,
                 writable: bool) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        self._entry_size = self.ENTRY.size
        # No descriptor is kept: the mapping holds its own (CPython's mmap duplicates the
        # one it is made from), and the rare writes past it (_map, _write_ahead) open the
        # file for the moment. One descriptor per index, not two: a broker with thousands
        # of partitions keeps two indexes open for each.
        self._closed = False
        with _opened(self.path, os.O_RDWR | os.O_CREAT) as fd:
            length = os.fstat(fd).st_size
        self._misaligned = length % self._entry_size != 0
        self._entries = length // self._entry_size
        self._mmap: mmap.mmap | None = None
        self._last: tuple[int, tuple] | None = None  # (entries when cached, last entry)
        self._max_entries = 0
        self._map(max(length, self._round(max_index_size)) if writable else length)

    # -- sizes ---------------------------------------------------------------------------

    def _round(self, size: int) -> int:
        return size - size % self._entry_size

    @property
    def entries(self) -> int:
        return self._entries

    @property
    def max_entries(self) -> int:
        return self._max_entries

    @property
    def is_full(self) -> bool:
        return self._entries >= self._max_entries

    @property
    def size_bytes(self) -> int:
        return self._entries * self._entry_size

    def _map(self, length: int) -> None:
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None
        length = self._round(length)
        with _opened(self.path, os.O_RDWR) as fd:
            if os.fstat(fd).st_size != length:
                os.ftruncate(fd, length)
            self._max_entries = length // self._entry_size
            self._entries = min(self._entries, self._max_entries)
            self._written_ahead = 0  # bytes known written as zeros or entries: none yet
            self._dirty = False  # entries appended through this mapping since the last flush
            if length > 0:
                self._mmap = mmap.mmap(fd, length)

    def resize(self, new_size: int) -> None:
        """Grow or shrink the file (rounded down to whole entries); entries past it are dropped."""
        self.flush()
        self._map(max(self._round(new_size), 0))

    def trim_to_valid_size(self) -> None:
        """Shrink the file to exactly its entries (done when a segment stops being active)."""
        self.resize(self.size_bytes)

    # -- entries -------------------------------------------------------------------------

    def _entry(self, slot: int) -> tuple:
        return self.ENTRY.unpack_from(self._mmap, slot * self._entry_size)

    def _last_raw(self) -> tuple:
        """The last entry's fields, cached because every append compares against it."""
        if self._last is None or self._last[0] != self._entries:
            self._last = (self._entries, self._entry(self._entries - 1))
        return self._last[1]

    def _append_entry(self, *fields: int) -> None:
        if self.is_full:
            raise IndexInvariantError(f"{self.path}: index is full ({self._entries} entries)")
        position = self._entries * self._entry_size
        if position + self._entry_size > self._written_ahead:
            self._write_ahead(position)
        self.ENTRY.pack_into(self._mmap, position, *fields)
        self._dirty = True
        self._entries += 1
        self._last = (self._entries, fields)

    def _write_ahead(self, position: int) -> None:
        """Give the file real blocks from ``position`` (past every entry) on with a plain
        write of zeros, ``WRITE_AHEAD_BYTES`` at a time. The file is sparse, and the first
        store through the mapping into a block not yet written makes the filesystem
        allocate it inside a page fault: milliseconds each on ext4 (measured 2.6 ms), for
        every new segment's first entry, which with a thousand partitions dominated the
        produce path. A failed write is left to the store through the mapping."""
        end = min(position + WRITE_AHEAD_BYTES, self._max_entries * self._entry_size)
        try:
            with _opened(self.path, os.O_WRONLY) as fd:
                os.pwrite(fd, _ZEROS[:end - position], position)
        except OSError:
            return
        self._written_ahead = end

    def iter_raw(self) -> Iterator[tuple]:
        if self._entries == 0:
            return iter(())
        return self.ENTRY.iter_unpack(memoryview(self._mmap)[:self.size_bytes])

    def _largest_lower_bound(self, target: int, field: int) -> int:
        """Slot of the last entry whose ``field`` is <= target, or -1 if there is none."""
        lo, hi = 0, self._entries - 1
        if hi < 0 or self._entry(0)[field] > target:
            return -1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._entry(mid)[field] <= target:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _smallest_upper_bound(self, target: int, field: int) -> int:
        """Slot of the first entry whose ``field`` is >= target, or ``entries`` if none."""
        lo, hi = 0, self._entries
        while lo < hi:
            mid = (lo + hi) // 2
            if self._entry(mid)[field] < target:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _truncate_to_entries(self, entries: int) -> None:
        self._entries = max(0, min(entries, self._entries))

    def reset(self) -> None:
        """Drop every entry (before rebuilding the index from the log)."""
        self._entries = 0
        self._misaligned = False

    def _check_file_shape(self) -> None:
        if self._misaligned:
            raise CorruptIndexError(
                f"{self.path}: file length is not a multiple of the {self._entry_size}-byte entry")

    # -- lifecycle -----------------------------------------------------------------------

    def flush(self) -> None:
        """Force the entries appended since the last flush to disk (``msync``, which
        syncs the file: skipped when nothing was appended)."""
        if self._mmap is not None and self._dirty:
            self._mmap.flush()
            self._dirty = False

    def close(self) -> None:
        """Trim to the valid entries and release the map and file."""
        if self._closed:
            return
        try:
            self.trim_to_valid_size()
        finally:
            self._release()

    def delete(self) -> None:
        self._release()
        self.path.unlink(missing_ok=True)

    def _release(self) -> None:
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None
        self._closed = True
