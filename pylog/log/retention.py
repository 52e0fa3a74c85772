"""Which segments retention deletes: whole segments, oldest first, never the active one.

A segment goes when it lies wholly below the log start offset, when its newest record
is older than ``retention_ms``, or while the log without it is still at least
``retention_bytes``. Time is checked first, then size, as in Kafka.
"""

from __future__ import annotations

from typing import Sequence

from pylog.log.config import LogConfig
from pylog.log.segment import LogSegment


def count_deletable(segments: Sequence[LogSegment], config: LogConfig, log_start_offset: int,
                    now_ms: int) -> int:
    """How many segments, counted from the oldest, retention deletes now."""
    candidates = segments[:-1]
    count = 0
    while count < len(candidates) and candidates[count].next_offset <= log_start_offset:
        count += 1
    if config.retention_ms is not None:
        while count < len(candidates) and now_ms - candidates[count].largest_timestamp > config.retention_ms:
            count += 1
    if config.retention_bytes is not None:
        excess = sum(s.size for s in segments[count:]) - config.retention_bytes
        while count < len(candidates) and excess >= candidates[count].size:
            excess -= candidates[count].size
            count += 1
    return count
