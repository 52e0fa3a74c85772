"""The ``.timeindex`` file: a sparse map from timestamp to offset within one segment.

Layout, big-endian, 12-byte entries, no header::

    offset  size  field
    0       8     timestamp        int64: the largest record timestamp seen so far
    8       4     relativeOffset   int32: base offset (relative) of the first batch that
                                   reached that timestamp

Timestamps strictly increase and offsets never decrease, so every batch before an
entry's offset has timestamps below the entry's. An entry is added with each offset-index
entry when the segment's largest timestamp has grown, and once more when the segment
stops being active, so the last entry holds the segment's largest timestamp. After a
crash, or if the file is missing or fails :meth:`TimeIndex.sanity_check`, it is rebuilt
from the log.
"""

from __future__ import annotations

import struct

from pylog.log.index import AbstractIndex, CorruptIndexError, IndexInvariantError, TimestampOffset

NO_TIMESTAMP = -1


class TimeIndex(AbstractIndex):
    ENTRY = struct.Struct(">qi")

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add an entry if ``timestamp`` is above the last one's (raises IndexInvariantError
        if ``offset`` goes backwards)."""
        if self._entries:
            last_ts, last_rel = self._last_raw()
            if offset - self.base_offset < last_rel:
                raise IndexInvariantError(
                    f"{self.path}: offset {offset} is before the last entry's "
                    f"{self.base_offset + last_rel}")
            if timestamp <= last_ts:
                return
        self._append_entry(timestamp, offset - self.base_offset)

    def lookup(self, timestamp: int) -> TimestampOffset:
        """The last entry with timestamp <= ``timestamp``; (-1, segment base) if none."""
        slot = self._largest_lower_bound(timestamp, 0)
        return self._at(slot)

    def last_entry_below(self, offset: int) -> TimestampOffset:
        """The last entry for an offset below ``offset``; (-1, segment base) if none."""
        return self._at(self._smallest_upper_bound(offset - self.base_offset, 1) - 1)

    @property
    def last_entry(self) -> TimestampOffset:
        return self._at(self._entries - 1)

    def _at(self, slot: int) -> TimestampOffset:
        if slot < 0:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        ts, rel = self._entry(slot)
        return TimestampOffset(ts, self.base_offset + rel)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry for an offset >= ``offset``."""
        self._truncate_to_entries(self._smallest_upper_bound(offset - self.base_offset, 1))

    def sanity_check(self, next_offset: int) -> None:
        """Raise CorruptIndexError unless timestamps increase and offsets stay in the segment."""
        self._check_file_shape()
        prev_ts, prev_rel = None, 0
        limit = next_offset - self.base_offset
        for ts, rel in self.iter_raw():
            if (prev_ts is not None and ts <= prev_ts) or rel < prev_rel or rel >= limit:
                raise CorruptIndexError(
                    f"{self.path}: entry ({ts}, {rel}) after ({prev_ts}, {prev_rel}) "
                    f"in a segment ending at relative offset {limit}")
            prev_ts, prev_rel = ts, rel
