"""The aborted-transaction index: ``<base>.txnindex`` beside each segment (Kafka's format).

One entry per ABORT marker written in the segment, in offset order, 34 bytes, big-endian::

    offset  size  field
    0       2     version            0
    2       8     producerId
    10      8     firstOffset        the transaction's first offset (maybe in an older segment)
    18      8     lastOffset         the ABORT marker's offset (in this segment)
    26      8     lastStableOffset   the log's last stable offset once the marker was written

A read_committed Fetch returns the aborted transactions overlapping the records it sends
(:meth:`TransactionIndex.collect`); the consumer drops those producers' records between
``firstOffset`` and their marker. ``lastStableOffset`` bounds the search: no transaction
still open at an entry's ``lastStableOffset`` started before it, so once an entry's
``lastStableOffset`` passes the fetch's upper bound, later segments cannot add any.

The file exists only once the segment has an entry. Entries are appended (and kept in
memory: the file is small); truncation rewrites the file as a temporary file and a rename.
After a crash the index of every re-validated segment is rebuilt from the markers in the
log (:mod:`pylog.log.loader`). Not thread-safe: the log holds its lock.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from pylog.log import layout
from pylog.log.index import CorruptIndexError

VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction: a producer's records in ``[first_offset, last_offset]``
    (``last_offset`` is its ABORT marker)."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(VERSION, self.producer_id, self.first_offset, self.last_offset,
                           self.last_stable_offset)


def decode_entries(buf: bytes, path: Path | str = "<buffer>") -> list[AbortedTxn]:
    """The entries of a ``.txnindex`` file's bytes; raises CorruptIndexError."""
    if len(buf) % ENTRY_SIZE:
        raise CorruptIndexError(f"{path}: {len(buf)} bytes is not a whole number of "
                                f"{ENTRY_SIZE}-byte entries")
    entries = []
    for pos in range(0, len(buf), ENTRY_SIZE):
        version, producer_id, first, last, stable = _ENTRY.unpack_from(buf, pos)
        if version != VERSION:
            raise CorruptIndexError(f"{path}: entry at {pos} has version {version}")
        entries.append(AbortedTxn(producer_id, first, last, stable))
    return entries


def collect_aborted(indexes: Iterable["TransactionIndex"], fetch_offset: int,
                    upper_bound: int) -> list[AbortedTxn]:
    """The entries overlapping ``[fetch_offset, upper_bound)`` of consecutive segments'
    indexes, starting with the segment holding ``fetch_offset``: stops at the first entry
    whose last stable offset reaches ``upper_bound``; empty indexes cost no I/O."""
    found: list[AbortedTxn] = []
    for index in indexes:
        if index.is_empty:
            continue
        entries, complete = index.collect(fetch_offset, upper_bound)
        found.extend(entries)
        if complete:
            break
    return found


class TransactionIndex:
    """The aborted transactions whose markers lie in one segment."""

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._entries: list[AbortedTxn] | None = None  # None: not read yet
        self._empty = not path.exists()

    @classmethod
    def for_segment(cls, directory: Path, base_offset: int) -> "TransactionIndex":
        return cls(layout.txn_index_file(directory, base_offset), base_offset)

    @property
    def is_empty(self) -> bool:
        """True without any I/O when the segment holds no ABORT marker."""
        return self._empty

    @property
    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            self._entries = [] if self._empty else decode_entries(self.path.read_bytes(), self.path)
        return self._entries

    def append(self, entry: AbortedTxn) -> None:
        """Add the entry of an ABORT marker written after every entry so far."""
        entries = self.entries
        if entries and entry.last_offset <= entries[-1].last_offset:
            raise ValueError(f"{self.path}: aborted transaction ending at {entry.last_offset} "
                             f"appended after one ending at {entries[-1].last_offset}")
        with open(self.path, "ab") as f:
            f.write(entry.encode())
        entries.append(entry)
        self._empty = False

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """``(entries overlapping [fetch_offset, upper_bound), complete)``: ``complete``
        once an entry's last stable offset reaches ``upper_bound`` (no later segment can
        hold more)."""
        found = []
        for entry in self.entries:
            if entry.last_offset >= fetch_offset and entry.first_offset < upper_bound:
                found.append(entry)
            if entry.last_stable_offset >= upper_bound:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after ``offset``."""
        if self._empty:
            return
        kept = [e for e in self.entries if e.last_offset < offset]
        if len(kept) == len(self.entries):
            return
        self.reset()
        for entry in kept:
            self.append(entry)

    def reset(self) -> None:
        """Remove every entry (and the file): the segment is being rebuilt."""
        self.path.unlink(missing_ok=True)
        self._entries = []
        self._empty = True

    def flush(self) -> None:
        if self._empty:
            return
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)
        self._entries = []
        self._empty = True

    def sanity_check(self) -> None:
        """Raise CorruptIndexError unless the file holds whole entries (read lazily)."""
        size = self.path.stat().st_size if not self._empty else 0
        if size % ENTRY_SIZE:
            raise CorruptIndexError(f"{self.path}: {size} bytes is not a whole number of "
                                    f"{ENTRY_SIZE}-byte entries")
