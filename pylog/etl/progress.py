"""What a load is doing while its map tasks run: tasks done of total, records and MB per
second, and the slowest partition, on the driver's stderr.

On a terminal one line is redrawn in place (a progress bar, every half second);
otherwise -- a log file, Airflow's task log -- one line every ``progress_seconds`` (the
loader config, default 10) and a last line when the tasks end::

    pylog load page_views: 5/8 tasks, 2 running, 1200000 records (40000/s), 96.0 MB (3.2 MB/s),
    slowest partition 2 (1/3 tasks), 30s                                      (one line)

Progress comes from the run's done markers in the state store (each finished task's
records and bytes; only markers not seen before are read) and, with Spark, the job
group's status tracker (running tasks). Spark's own console progress bar is turned off
(``spark.ui.showConsoleProgress``) so the two do not draw over each other.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, TextIO

from pylog.etl.model import TablePlan, TaskDoneMarker
from pylog.etl.state import StateStore

TTY_INTERVAL_S = 0.5
BAR_WIDTH = 24


@dataclass(frozen=True, slots=True)
class ProgressSnapshot:
    """The progress of one table's tasks at one moment."""

    table: str
    tasks_done: int
    tasks_total: int
    running: int | None
    """Tasks running now (None: not known, e.g. without Spark)."""
    records: int
    bytes: int
    seconds: float
    slowest_partition: int | None
    """The partition with the smallest share of its tasks done (None once all are)."""
    slowest_done: int = 0
    slowest_total: int = 0

    def line(self) -> str:
        rate = self.records / self.seconds if self.seconds > 0 else 0.0
        mb = self.bytes / 1e6
        mb_rate = mb / self.seconds if self.seconds > 0 else 0.0
        parts = [f"pylog load {self.table}: {self.tasks_done}/{self.tasks_total} tasks"]
        if self.running:
            parts.append(f"{self.running} running")
        parts.append(f"{self.records} records ({rate:.0f}/s)")
        parts.append(f"{mb:.1f} MB ({mb_rate:.1f} MB/s)")
        if self.slowest_partition is not None:
            parts.append(f"slowest partition {self.slowest_partition} "
                         f"({self.slowest_done}/{self.slowest_total} tasks)")
        return ", ".join(parts) + f", {self.seconds:.0f}s"

    def bar(self) -> str:
        filled = BAR_WIDTH * self.tasks_done // max(1, self.tasks_total)
        return f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {self.line()}"


class LoadProgress:
    """Reports a table's tasks from a thread while they run (a ``with`` block).

    ``running`` is a callable returning the number of running tasks (the job group's
    status tracker), or None. ``stream`` defaults to stderr; whether it is a terminal
    decides between the redrawn bar and periodic lines.
    """

    def __init__(self, state: StateStore, plan: TablePlan, interval_s: float = 10.0,
                 stream: TextIO | None = None, running: Callable[[], int] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.state, self.plan, self.running = state, plan, running
        self.stream = stream if stream is not None else sys.stderr
        self.tty = _is_tty(self.stream)
        self.interval_s = TTY_INTERVAL_S if self.tty else interval_s
        self.clock = clock
        self._markers: dict[str, TaskDoneMarker] = {}
        self._earlier: set[str] = set()
        """Markers of tasks finished by an earlier attempt of the run: done, but not in the rates."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"progress-{plan.table}", daemon=True)
        self._started = 0.0

    def __enter__(self) -> "LoadProgress":
        self._started = self.clock()
        self._earlier = self.state.marker_names(self.plan.table, self.plan.run_id)
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()
        self._emit(self.snapshot(running=False), final=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._emit(self.snapshot())
            except Exception as exc:  # noqa: BLE001 -- progress must never fail a load
                self._write(f"pylog load {self.plan.table}: progress unavailable: {exc}\n")
                return

    def snapshot(self, running: bool = True) -> ProgressSnapshot:
        """Read the markers not seen before and sum up."""
        names = self.state.marker_names(self.plan.table, self.plan.run_id)
        for task_range in self.plan.ranges:
            name = task_range.name
            if name in names and name not in self._markers:
                marker = self.state.read_marker(self.plan.table, self.plan.run_id, task_range)
                if marker is not None:
                    self._markers[name] = marker
        return summarise(self.plan, list(self._markers.values()), self.clock() - self._started,
                         self.running() if running and self.running is not None else None,
                         earlier=self._earlier)

    def _emit(self, snapshot: ProgressSnapshot, final: bool = False) -> None:
        if self.tty:
            self._write("\r\x1b[K" + snapshot.bar() + ("\n" if final else ""))
        else:
            self._write(snapshot.line() + "\n")

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # a closed stderr does not stop the load
            pass


def summarise(plan: TablePlan, markers: list[TaskDoneMarker], seconds: float,
              running: int | None = None, earlier: set[str] = frozenset()) -> ProgressSnapshot:
    """A snapshot from the plan and the done markers found so far; the records and bytes
    (and so the rates) count only tasks not in ``earlier`` (done before this attempt)."""
    fresh = [m for m in markers if m.range.name not in earlier]
    per_partition: dict[int, list[int]] = {}
    for task_range in plan.ranges:
        per_partition.setdefault(task_range.partition, [0, 0])[1] += 1
    for marker in markers:
        per_partition[marker.range.partition][0] += 1
    unfinished = [(done / total, partition, done, total)
                  for partition, (done, total) in per_partition.items() if done < total]
    slowest = min(unfinished) if unfinished else None
    return ProgressSnapshot(
        table=plan.table, tasks_done=len(markers), tasks_total=len(plan.ranges), running=running,
        records=sum(m.records_fetched for m in fresh), bytes=sum(m.bytes_fetched for m in fresh),
        seconds=seconds, slowest_partition=slowest[1] if slowest else None,
        slowest_done=slowest[2] if slowest else 0, slowest_total=slowest[3] if slowest else 0)


def spark_running_tasks(sc, group: str) -> Callable[[], int]:
    """A callable counting the running tasks of a Spark job group (its status tracker)."""
    tracker = sc.statusTracker()

    def running() -> int:
        count = 0
        for job in tracker.getJobIdsForGroup(group):
            info = tracker.getJobInfo(job)
            for stage in info.stageIds if info else ():
                stage_info = tracker.getStageInfo(stage)
                count += stage_info.numActiveTasks if stage_info else 0
        return count

    return running


def _is_tty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
