"""Values the log hands to its callers: what an append assigned, what a read found."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import NamedTuple


class AppendInfo(NamedTuple):
    """What :meth:`Log.append` did: the offsets it assigned (or, from
    :meth:`Log.append_as_follower`, kept) and the log's state after it. (A named tuple:
    one is made per append.)"""

    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time_ms: int  # -1: batches keep their CreateTime timestamps
    log_start_offset: int
    record_count: int


class FileRegion:
    """Bytes of a segment file ready for ``os.sendfile(sock, fd, position, length)``.

    ``fd`` is a private duplicate of the segment's descriptor, so the region stays
    readable even if retention deletes the segment meanwhile. The caller owns it and
    must close it (``region.close()`` or ``with region:``). Never ``os.close(region.fd)``
    directly.
    """

    __slots__ = ("fd", "position", "length", "_closed")

    def __init__(self, fd: int, position: int, length: int) -> None:
        self.fd = fd
        self.position = position
        self.length = length
        self._closed = False

    def read_bytes(self) -> bytes:
        """Read the whole region into memory (for callers without a socket)."""
        chunks, done = [], 0
        while done < self.length:
            chunk = os.pread(self.fd, self.length - done, self.position + done)
            if not chunk:
                break
            chunks.append(chunk)
            done += len(chunk)
        return b"".join(chunks)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            os.close(self.fd)

    def __enter__(self) -> "FileRegion":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FileRegion(fd={self.fd}, position={self.position}, length={self.length})"


@dataclass(frozen=True, slots=True)
class ReadResult:
    """What :meth:`Log.read` found. ``region`` is None when there is nothing to read yet.
    ``aborted_transactions`` (AbortedTxn entries) is None unless the read was
    read_committed."""

    region: FileRegion | None
    high_watermark: int
    log_start_offset: int
    last_stable_offset: int = -1
    aborted_transactions: list | None = None
