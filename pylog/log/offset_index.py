"""The ``.index`` file: a sparse map from offset to file position within one segment.

Layout, big-endian, one 8-byte entry per ``index.interval.bytes`` of log, no header::

    offset  size  field
    0       4     relativeOffset   int32: batch base offset - segment base offset
    4       4     position         int32: byte position of that batch in the .log file

Both fields strictly increase. The segment's first batch (position 0) has no entry: a
lookup below the first entry answers the segment start. After a crash, or if the file
is missing or fails :meth:`OffsetIndex.sanity_check`, it is rebuilt from the log.
"""

from __future__ import annotations

import struct

from pylog.log.index import AbstractIndex, CorruptIndexError, IndexInvariantError, OffsetPosition


class OffsetIndex(AbstractIndex):
    ENTRY = struct.Struct(">ii")

    def append(self, offset: int, position: int) -> None:
        """Add an entry; both fields must exceed the last entry's (raises IndexInvariantError)."""
        if self._entries:
            last_rel, last_pos = self._last_raw()
            if offset - self.base_offset <= last_rel or position <= last_pos:
                raise IndexInvariantError(
                    f"{self.path}: entry ({offset}, {position}) is not after "
                    f"({self.base_offset + last_rel}, {last_pos})")
        self._append_entry(offset - self.base_offset, position)

    def lookup(self, offset: int) -> OffsetPosition:
        """The last entry with offset <= ``offset``; the segment start if there is none."""
        slot = self._largest_lower_bound(offset - self.base_offset, 0)
        return self._at(slot)

    def lookup_by_position(self, position: int) -> OffsetPosition:
        """The last entry with position <= ``position``; the segment start if there is none."""
        return self._at(self._largest_lower_bound(position, 1))

    @property
    def last_entry(self) -> OffsetPosition:
        return self._at(self._entries - 1)

    def _at(self, slot: int) -> OffsetPosition:
        if slot < 0:
            return OffsetPosition(self.base_offset, 0)
        rel, pos = self._entry(slot)
        return OffsetPosition(self.base_offset + rel, pos)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry for an offset >= ``offset``."""
        self._truncate_to_entries(self._smallest_upper_bound(offset - self.base_offset, 0))

    def sanity_check(self, log_size: int) -> None:
        """Raise CorruptIndexError unless entries strictly increase and point inside the log."""
        self._check_file_shape()
        prev_rel, prev_pos = 0, 0
        for rel, pos in self.iter_raw():
            if rel <= prev_rel or pos <= prev_pos or pos >= log_size:
                raise CorruptIndexError(
                    f"{self.path}: entry ({rel}, {pos}) after ({prev_rel}, {prev_pos}) "
                    f"in a {log_size}-byte log")
            prev_rel, prev_pos = rel, pos
