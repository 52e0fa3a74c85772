"""The broker-wide budget of buffered request bytes (``queued.max.request.bytes``).

Every connection charges the budget for the request bytes it holds: each complete frame
waiting to be handled, and the whole declared size of the frame it is receiving (charged
as soon as the 4-byte size prefix arrives, as Kafka's memory pool does). While the budget
is used up, connections stop reading new frames; a connection in the middle of a frame
already charged may finish it, so the frames in flight always complete and free their
share. The budget can be overshot by at most one frame per connection that started one
before it ran out.
"""

from __future__ import annotations

import struct
import threading
from typing import Callable

_SIZE = struct.Struct(">i")


class RequestBudget:
    """Bytes charged by all connections, shared by the processor threads."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._used = 0
        self._lock = threading.Lock()
        self._on_freed: list[Callable[[], None]] = []

    @property
    def used(self) -> int:
        return self._used

    @property
    def exhausted(self) -> bool:
        return self._used >= self.limit

    def on_freed(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (from any thread) when the budget stops being used up."""
        self._on_freed.append(callback)

    def adjust(self, delta: int) -> None:
        if not delta:
            return
        with self._lock:
            was_exhausted = self._used >= self.limit
            self._used += delta
            freed = was_exhausted and self._used < self.limit
        if freed:
            for callback in list(self._on_freed):
                callback()


def frame_charge(buffer: bytearray, max_frame: int) -> tuple[int, int]:
    """``(charge, missing)`` for a connection's input buffer.

    ``charge`` is the buffered complete frames plus the declared size of a partial one
    (or the bytes held, for a partial size prefix or a size out of range, which closes the
    connection anyway); ``missing`` is how many more bytes complete that partial frame
    (0 when no charged frame is under way: a frame boundary or a partial size prefix).
    """
    position, end = 0, len(buffer)
    while end - position >= 4:
        size = _SIZE.unpack_from(buffer, position)[0]
        if size < 0 or size > max_frame:
            return end, 0
        frame_end = position + 4 + size
        if frame_end > end:
            return frame_end, frame_end - end
        position = frame_end
    return end, 0
