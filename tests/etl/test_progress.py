"""A load's progress: lines while its Spark tasks run (not on a terminal), a bar redrawn in
place on a real terminal (a pty), and the sums behind both."""

from __future__ import annotations

import io
import os
import re
import time

from pylog.etl.job import LoadRequest, run_load
from pylog.etl.model import TablePlan, TaskDoneMarker, TaskRange
from pylog.etl.progress import LoadProgress, summarise
from pylog.etl.state import StateStore
from tests.etl.helpers import events, write_config

LINE = re.compile(r"^pylog load ev: (\d+)/(\d+) tasks(?:, \d+ running)?, (\d+) records \(\d+/s\), "
                  r"[\d.]+ MB \([\d.]+ MB/s\)(?:, slowest partition \d \(\d+/\d+ tasks\))?, \d+s$")


def _plan(partitions: int = 2, tasks_each: int = 2, run_id: str = "r1") -> TablePlan:
    ranges = tuple(TaskRange("ev", p, t * 10, t * 10 + 10) for p in range(partitions) for t in range(tasks_each))
    return TablePlan(run_id=run_id, kind="scheduled", table="ev", topic="ev", created_at_ms=0, ranges=ranges,
                     start_offsets={p: 0 for p in range(partitions)},
                     end_offsets={p: tasks_each * 10 for p in range(partitions)})


def _marker(task_range: TaskRange, records: int = 10) -> TaskDoneMarker:
    return TaskDoneMarker(range=task_range, next_offset=task_range.end, records_fetched=records,
                          rows_written=records, quarantined=0, bytes_fetched=records * 100_000,
                          bytes_written=0, files=(), gaps=(), seconds=0.1)


def test_summary_names_the_partition_least_done():
    plan = _plan(partitions=3, tasks_each=2)
    done = [_marker(r) for r in plan.ranges if (r.partition, r.start) in {(0, 0), (0, 10), (1, 0), (2, 0)}]
    snapshot = summarise(plan, done, seconds=2.0, running=2, earlier={plan.ranges[0].name})
    assert (snapshot.tasks_done, snapshot.tasks_total, snapshot.running) == (4, 6, 2)
    assert snapshot.records == 30 and snapshot.bytes == 3_000_000  # the earlier attempt's task left out
    assert (snapshot.slowest_partition, snapshot.slowest_done, snapshot.slowest_total) == (1, 1, 2)
    assert snapshot.line() == ("pylog load ev: 4/6 tasks, 2 running, 30 records (15/s), 3.0 MB (1.5 MB/s), "
                               "slowest partition 1 (1/2 tasks), 2s")
    assert summarise(plan, [_marker(r) for r in plan.ranges], 1.0).slowest_partition is None


def _wait_for(read, pattern: str, timeout_s: float = 60.0) -> str:
    deadline = time.monotonic() + timeout_s
    seen = ""
    while pattern not in seen:
        assert time.monotonic() < deadline, f"{pattern!r} never appeared in {seen!r}"
        seen += read()
        time.sleep(0.02)
    return seen


def test_lines_every_interval_off_a_terminal(tmp_path):
    state = StateStore((tmp_path / "state").as_uri())
    plan = _plan()
    stream = io.StringIO()
    with LoadProgress(state, plan, interval_s=0.05, stream=stream):
        state.write_marker("ev", "r1", _marker(plan.ranges[0]))
        _wait_for(stream.getvalue, "1/4 tasks")
        for task_range in plan.ranges[1:]:
            state.write_marker("ev", "r1", _marker(task_range))
    lines = stream.getvalue().splitlines()
    assert all(LINE.match(line) for line in lines), lines
    assert "\r" not in stream.getvalue()
    first = next(line for line in lines if "1/4 tasks" in line)
    assert "slowest partition 1 (0/2 tasks)" in first
    assert lines[-1].startswith("pylog load ev: 4/4 tasks, 40 records") and "slowest" not in lines[-1]


def test_a_bar_redrawn_in_place_on_a_terminal(tmp_path):
    state = StateStore((tmp_path / "state").as_uri())
    plan = _plan()
    master, slave = os.openpty()
    os.set_blocking(master, False)
    terminal = os.fdopen(slave, "w")

    def read() -> str:
        try:
            return os.read(master, 65536).decode()
        except BlockingIOError:
            return ""

    try:
        with LoadProgress(state, plan, interval_s=60, stream=terminal):
            seen = _wait_for(read, "0/4 tasks")
            for task_range in plan.ranges[:2]:
                state.write_marker("ev", "r1", _marker(task_range))
            seen += _wait_for(read, "2/4 tasks")
            for task_range in plan.ranges[2:]:
                state.write_marker("ev", "r1", _marker(task_range))
        seen += _wait_for(read, "4/4 tasks")
    finally:
        terminal.close()
        os.close(master)
    assert "\r\x1b[K[............" in seen and "\r\x1b[K[############............] pylog load ev: 2/4" in seen
    # One line in the end: every redraw starts at the line's beginning; the last one ends it.
    last = seen.rsplit("\r\x1b[K", 1)[1]
    assert seen.count("\n") == 1 and last.endswith("\n")
    assert last.startswith("[########################] pylog load ev: 4/4 tasks, 40 records")


def test_a_spark_load_reports_its_tasks(spark, mock_cluster, tmp_path, capsys):
    mock_cluster.produce("ev", events(0, 40), partitions=4)
    config = write_config(tmp_path, mock_cluster.bootstrap, max_records_per_task=10)
    config = type(config)(**{**{f: getattr(config, f) for f in config.__dataclass_fields__}, "progress_seconds": 0.1})
    [audit] = run_load(config, spark, LoadRequest(run_id="p1"))
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("pylog load ev:")]
    assert lines and all(LINE.match(line) for line in lines), lines
    done = [int(LINE.match(line).group(1)) for line in lines]
    assert done == sorted(done)
    total = len(audit.ranges)
    assert total == 4 and lines[-1].startswith(f"pylog load ev: {total}/{total} tasks, {audit.records_fetched} records")
