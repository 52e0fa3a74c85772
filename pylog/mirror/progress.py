"""The mirror's progress on the console: per topic records/s, bytes/s and lag.

On a terminal the table is redrawn in place every interval; otherwise (a log file, a
pipe) one line per interval::

    mirror dc1: 6 partitions, committed 18:02:11 | orders 2013 rec/s 1.9 MB/s lag 12 | ...
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TextIO


@dataclass(frozen=True)
class TopicProgress:
    topic: str
    records_per_s: float
    bytes_per_s: float
    lag: int | None
    """Source records not yet mirrored (None while unknown)."""


def human_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


class ProgressReporter:
    """Turns cumulative per-topic counters into rates and prints them."""

    def __init__(self, stream: TextIO, alias: str, clock=time.monotonic) -> None:
        self.stream = stream
        self.alias = alias
        self.clock = clock
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self._last: dict[str, tuple[int, int]] = {}
        self._last_time = clock()
        self._lines_drawn = 0

    def rows(self, counters: dict[str, tuple[int, int]], lags: dict[str, int | None]) -> list[TopicProgress]:
        """``counters``: topic -> (records, bytes) since start."""
        now = self.clock()
        elapsed = max(now - self._last_time, 1e-6)
        rows = []
        for topic in sorted(set(counters) | set(lags)):
            records, size = counters.get(topic, (0, 0))
            last_records, last_size = self._last.get(topic, (0, 0))
            rows.append(TopicProgress(topic, max(records - last_records, 0) / elapsed,
                                      max(size - last_size, 0) / elapsed, lags.get(topic)))
        self._last = dict(counters)
        self._last_time = now
        return rows

    def print(self, rows: list[TopicProgress], status: str) -> None:
        parts = [f"{r.topic} {r.records_per_s:.0f} rec/s {human_bytes(r.bytes_per_s)}/s "
                 f"lag {'?' if r.lag is None else r.lag}" for r in rows]
        head = f"mirror {self.alias}: {status}"
        if not self.tty:
            self.stream.write(" | ".join([head, *parts]) + "\n")
            self.stream.flush()
            return
        lines = [head] + [f"  {p}" for p in parts]
        redraw = f"\x1b[{self._lines_drawn}F\x1b[J" if self._lines_drawn else ""
        self.stream.write(redraw + "\n".join(lines) + "\n")
        self.stream.flush()
        self._lines_drawn = len(lines)
