"""The ``.log`` file of a segment: record batches back to back, exactly as produced.

Layout: Kafka v2 record batches (the 61-byte header is described in
:mod:`pylog.records.header`), one after another, with no file header and no padding.
Only the broker-assigned ``baseOffset`` differs from what the producer sent, and the
``partitionLeaderEpoch`` when a leader appended with its epoch.

After a crash the tail may hold a torn batch or garbage. :meth:`FileRecords.validate`
checks batches (framing, CRC, contiguous offsets) from a position and reports where the
valid prefix ends; the segment truncates there.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Callable, Iterator, Sequence

from pylog.errors import CorruptRecordError, KafkaStorageError, TruncatedBatchError, UnsupportedMagicError
from pylog.records.header import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    BatchHeader,
    check_crc,
    read_batch_header,
)

# The 61-byte header in one unpack (same layout as pylog.records.header), for headers
# read on their own with pread, without the rest of the batch.
_HEADER = struct.Struct(">qiibIhiqqqhii")
_VALIDATE_CHUNK = 8 << 20


class FileRecords:
    """An open ``.log`` file. Appends go to the end; reads use ``pread`` and never move a
    shared file position, so readers on other threads need no lock of their own."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = Path(path)
        self.fd = fd
        self._size = os.fstat(fd).st_size

    @classmethod
    def open(cls, path: Path) -> "FileRecords":
        """Open (creating if missing) the file at ``path``."""
        return cls(path, os.open(path, os.O_RDWR | os.O_CREAT, 0o644))

    @property
    def size(self) -> int:
        return self._size

    def append(self, buf: bytes | bytearray | memoryview) -> int:
        """Write ``buf`` at the end; return the position it starts at.

        Raises KafkaStorageError if the disk refuses the write (nothing is left behind)."""
        return self.append_all((buf,))

    def append_all(self, buffers: Sequence[bytes | bytearray | memoryview]) -> int:
        """Write ``buffers`` one after another at the end, with one system call (at most
        ``IOV_MAX`` of them); return the position the first starts at.

        Raises KafkaStorageError if the disk refuses the write (nothing is left behind)."""
        position = self._size
        total = sum(map(len, buffers))
        written = 0
        try:
            written = os.pwritev(self.fd, buffers, position)
            if written < total:  # a short write: the rest, one buffer
                rest = memoryview(b"".join(buffers))
                while written < total:
                    written += os.pwrite(self.fd, rest[written:], position + written)
        except OSError as exc:
            # Drop a partial write so the file ends at a batch boundary again.
            try:
                os.ftruncate(self.fd, position)
            except OSError:
                pass
            raise KafkaStorageError(f"{self.path}: write of {total} bytes failed: {exc}") from exc
        self._size += written
        return position

    def flush(self) -> None:
        os.fsync(self.fd)

    def truncate_to(self, size: int) -> int:
        """Cut the file to ``size`` bytes; return the number of bytes removed."""
        removed = self._size - size
        if removed > 0:
            os.ftruncate(self.fd, size)
            self._size = size
        return max(removed, 0)

    def read(self, position: int, length: int) -> bytes:
        return os.pread(self.fd, length, position)

    def read_header(self, position: int) -> BatchHeader:
        """The header of the batch at ``position`` (framing checked, CRC not).

        Raises TruncatedBatchError, UnsupportedMagicError or another CorruptRecordError.
        """
        raw = os.pread(self.fd, BATCH_HEADER_SIZE, position)
        if len(raw) < BATCH_HEADER_SIZE:
            raise TruncatedBatchError(f"{self.path}: {len(raw)} header bytes at position {position}")
        header = BatchHeader(*_HEADER.unpack(raw))
        if header.magic != MAGIC:
            raise UnsupportedMagicError(f"{self.path}: magic {header.magic} at position {position}")
        if header.size < BATCH_HEADER_SIZE or position + header.size > self._size:
            raise TruncatedBatchError(
                f"{self.path}: batch of {header.size} bytes at position {position} "
                f"does not fit a {self._size}-byte file")
        return header

    def headers(self, start: int = 0, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
        """Yield ``(position, header)`` for the batches in ``[start, end)``; headers only."""
        end = self._size if end is None else end
        position = start
        while position < end:
            header = self.read_header(position)
            yield position, header
            position += header.size

    def search_for_offset(self, target: int, start: int) -> tuple[int, BatchHeader] | None:
        """The first batch at or after ``start`` whose last offset is >= ``target``."""
        for position, header in self.headers(start):
            if header.last_offset >= target:
                return position, header
        return None

    def search_for_timestamp(self, target: int, start: int) -> tuple[int, BatchHeader] | None:
        """The first batch at or after ``start`` whose max timestamp is >= ``target``."""
        for position, header in self.headers(start):
            if header.max_timestamp >= target:
                return position, header
        return None

    def validate(self, start: int, expected_offset: int, max_batch_size: int,
                 on_batch: Callable[[int, BatchHeader], None]) -> tuple[int, str | None]:
        """Check every batch from ``start``: framing, CRC-32C, and that each base offset is
        the previous batch's next offset (the first must be ``expected_offset``).

        Calls ``on_batch(position, header)`` for each valid batch. Returns the end of the
        valid prefix and, if it stops early, why.
        """
        position = start
        while position < self._size:
            needed = _batch_size_at(self.fd, position)
            if not 0 < needed <= max_batch_size:
                needed = 0
            chunk = os.pread(self.fd, min(max(_VALIDATE_CHUNK, needed), self._size - position), position)
            view = memoryview(chunk)
            more_in_file = position + len(view) < self._size
            p = 0
            while p < len(view):
                try:
                    header = read_batch_header(view, p, max_batch_size)
                    check_crc(view, p, header)
                except TruncatedBatchError as exc:
                    if more_in_file:
                        break  # the batch continues past this chunk: read on from here
                    return position + p, str(exc)
                except CorruptRecordError as exc:
                    return position + p, str(exc)
                if header.base_offset != expected_offset or header.last_offset_delta < 0:
                    return position + p, (
                        f"batch at position {position + p} has offsets {header.base_offset}.."
                        f"{header.last_offset}, expected to start at {expected_offset}")
                on_batch(position + p, header)
                expected_offset = header.next_offset
                p += header.size
            if p == 0:
                return position, f"{len(view)} bytes at position {position} are not a whole batch"
            position += p
        return position, None


def _batch_size_at(fd: int, position: int) -> int:
    raw = os.pread(fd, LOG_OVERHEAD, position)
    if len(raw) < LOG_OVERHEAD:
        return 0
    return int.from_bytes(raw[8:12], "big", signed=True) + LOG_OVERHEAD
