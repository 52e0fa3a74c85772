"""Which segments retention deletes: whole segments, oldest first, never the active one.

A segment goes when it lies wholly below the log start offset, when its newest record
is older than ``retention_ms``, or while the log without it is still at least
``retention_bytes``. Time is checked first, then size, as in Kafka. A replicated log keeps
every segment not wholly below its high watermark. A compacted log without ``delete``
in its ``cleanup.policy`` keeps its segments whatever their age and size (the cleaner
shrinks them instead); ``compact,delete`` does both.
"""

from __future__ import annotations

from typing import Sequence

from pylog.log.config import LogConfig
from pylog.log.segment import LogSegment


def count_deletable(segments: Sequence[LogSegment], config: LogConfig, log_start_offset: int,
                    now_ms: int, upper_bound: int | None = None) -> int:
    """How many segments, counted from the oldest, retention deletes now. With an
    ``upper_bound`` (a replicated high watermark) only segments wholly below it go, so
    records not yet replicated are never deleted."""
    candidates = segments[:-1]
    if upper_bound is not None:
        candidates = [s for s in candidates if s.next_offset <= upper_bound]
    count = 0
    while count < len(candidates) and candidates[count].next_offset <= log_start_offset:
        count += 1
    if not config.delete:
        return count
    if config.retention_ms is not None:
        while count < len(candidates) and now_ms - candidates[count].largest_timestamp > config.retention_ms:
            count += 1
    if config.retention_bytes is not None:
        excess = sum(s.size for s in segments[count:]) - config.retention_bytes
        while count < len(candidates) and excess >= candidates[count].size:
            excess -= candidates[count].size
            count += 1
    return count
