"""The mirror's console progress: rates from cumulative counters, one line per interval
into a file or pipe, the table redrawn in place on a terminal."""

from __future__ import annotations

import io

from pylog.mirror.progress import ProgressReporter, human_bytes


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_one_line_per_interval_into_a_file():
    clock, out = FakeClock(), io.StringIO()
    reporter = ProgressReporter(out, "dc1", clock)
    clock.now += 2
    reporter.print(reporter.rows({"orders": (4000, 2_000_000)}, {"orders": 12}), "3 partitions")
    clock.now += 2
    reporter.print(reporter.rows({"orders": (5000, 2_500_000), "payments": (10, 1000)},
                                 {"orders": 0, "payments": None}), "3 partitions")
    lines = out.getvalue().splitlines()
    assert lines == [
        "mirror dc1: 3 partitions | orders 2000 rec/s 1.0 MB/s lag 12",
        "mirror dc1: 3 partitions | orders 500 rec/s 250.0 kB/s lag 0 | payments 5 rec/s 500 B/s lag ?"]


def test_a_terminal_is_redrawn_in_place():
    clock, out = FakeClock(), Terminal()
    reporter = ProgressReporter(out, "dc1", clock)
    clock.now += 1
    reporter.print(reporter.rows({"orders": (10, 100)}, {"orders": 1}), "1 partitions")
    first = out.getvalue()
    assert "\x1b[" not in first and first.count("\n") == 2
    reporter.print(reporter.rows({"orders": (10, 100)}, {"orders": 0}), "1 partitions")
    assert out.getvalue()[len(first):].startswith("\x1b[2F\x1b[J")   # up two lines, clear


def test_human_bytes():
    assert [human_bytes(n) for n in (0, 999, 1000, 1_500_000, 3e12)] == [
        "0 B", "999 B", "1.0 kB", "1.5 MB", "3000.0 GB"]
