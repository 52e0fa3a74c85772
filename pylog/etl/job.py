"""The driver of a load: lock, plan, run the map tasks on Spark, commit, summarise.

``run_load(config, spark, request)`` is what ``jobs/load_log.py`` (spark-submit) calls.
A run works table by table through the same steps:

1. take the table's lock (a live holder is never taken over, even one of the same run id;
   see :mod:`pylog.etl.locks`);
2. finish a pending run of another id first (it may be past its commit point, publishing);
3. reuse this run id's plan, or plan and write it before any task starts;
4. run one Spark task per range without a done marker, then commit.

Every state write of the driver first checks that the run still holds the lock (its
token), and a heartbeat that finds the lock taken over stops the run before it commits.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable

from pylog.client import SimpleConsumer
from pylog.client.group_offsets import commit_group_offsets
from pylog.errors import PylogError
from pylog.etl import faults
from pylog.etl.commit import commit
from pylog.etl.config import LoaderConfig, TopicConfig
from pylog.etl.errors import LoaderError, TableLockedError
from pylog.etl.fs import Storage
from pylog.etl.layout import bucket_ms
from pylog.etl.model import BACKFILL, SCHEDULED, AuditEntry, TablePlan, TaskDoneMarker
from pylog.etl.planner import plan_backfill, plan_scheduled, topic_offsets
from pylog.etl.progress import LoadProgress, spark_running_tasks
from pylog.etl.source import resolve_source
from pylog.etl.state import StateStore
from pylog.etl.task import TaskSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LoadRequest:
    """What to load: a scheduled load, or a backfill when ``since_ms`` is set.

    ``run_id`` defaults to ``<kind>-<UTC time>-<random>``; ``topics`` to all configured;
    ``until_ms`` (backfill) to now; ``fault`` is the test-only PYLOG_FAULT point.
    """

    run_id: str | None = None
    topics: tuple[str, ...] | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    fault: str | None = None

    @property
    def kind(self) -> str:
        return BACKFILL if self.since_ms is not None else SCHEDULED


def new_run_id(kind: str, now: float | None = None) -> str:
    moment = datetime.fromtimestamp(now if now is not None else time.time(), tz=timezone.utc)
    return f"{kind}-{moment:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"


def run_load(config: LoaderConfig, spark, request: LoadRequest) -> list[AuditEntry]:
    """Run (or finish) a load; returns the audit entries of the tables it committed.

    ``spark`` is a SparkSession (its master decides where the map tasks run) or None to
    run the tasks in this process. Tables are loaded one after the other, each under its
    lock. Rerunning a run id reuses its plan; a committed run id returns its audit again.

    >>> config = load_config("conf/loader.yaml")
    >>> run_load(config, spark, LoadRequest(run_id="2026-11-22T10"))              # scheduled
    >>> run_load(config, spark, LoadRequest(since_ms=parse_timestamp_ms("2026-11-20T00:00Z")))

    Raises ConfigError (unknown topic), TableLockedError (another live run holds a table),
    RetentionGapError (policy ``fail``), BadRecordThresholdError, or LoaderError (map tasks
    failed: rerun the same run id). Nothing is committed for a table whose run raised.
    """
    run_id = request.run_id or new_run_id(request.kind)
    state = StateStore(config.state)
    warehouse = Storage.from_uri(config.warehouse)
    # Secrets are read here, on the driver; the task specs carry only their references.
    servers, settings = resolve_source(config.source).client_arguments(config.source)
    consumer = SimpleConsumer(servers, **settings, isolation_level="read_committed")
    audits = []
    try:
        selected = config.select(list(request.topics) if request.topics else None)
        # One Metadata request and two ListOffsets per leader for every table of the run.
        offsets = (topic_offsets(consumer, list(dict.fromkeys(t.topic for t in selected)))
                   if request.kind != BACKFILL else None)
        for topic in selected:
            with TableLockHolder(state, topic.table, run_id, request.kind, config.lock_timeout_seconds) as lock:
                try:
                    audits += _load_table(config, spark, request, run_id, topic, state.guarded(lock.check),
                                          warehouse, consumer, offsets)
                except (PylogError, OSError) as exc:
                    if not isinstance(exc, TableLockedError):  # another run owns the table now
                        record_failure(state, topic.table, run_id, exc)
                    raise
            if request.kind != BACKFILL:
                publish_progress(topic, state, consumer)
    finally:
        consumer.close()
    return audits


def record_failure(state: StateStore, table: str, run_id: str, exc: BaseException) -> None:
    """Note the error on the table's pending run (this run, or the one it was finishing),
    for ``pylog status``. A storage failure here is logged, never raised over ``exc``."""
    failed = run_id
    try:
        failed = state.pending_run(table) or run_id
        if state.read_plan(table, failed) is not None:
            state.record_failure(table, failed, f"{type(exc).__name__}: {exc}")
    except (PylogError, OSError) as note_error:
        log.warning("table %s: could not record the failure of run %s: %s", table, failed, note_error)


def publish_progress(topic: TopicConfig, state: StateStore, consumer: SimpleConsumer) -> bool:
    """Commit the table's committed offsets to its consumer group (``consumer_group``), so
    the lag tools every Kafka shop runs see the loader. The state store stays the only
    source of truth: a failure is a warning, never a failed load, and the next run
    publishes again. Returns whether the offsets were published."""
    group = topic.progress_group
    snapshot = state.offsets_snapshot(topic.table)
    if group is None or snapshot is None or not snapshot.offsets:
        return False
    try:
        commit_group_offsets(consumer.network, group, topic.topic, snapshot.offsets,
                             metadata=f"pylog-loader run {snapshot.run_id}")
    except (PylogError, OSError) as exc:
        log.warning("table %s: committed offsets not published to consumer group %s: %s "
                    "(the loader's own offsets are unaffected; the next run publishes again)",
                    topic.table, group, exc)
        return False
    log.info("table %s: committed offsets published to consumer group %s", topic.table, group)
    return True


def _load_table(config, spark, request, run_id, topic, state, warehouse, consumer,
                offsets=None) -> list[AuditEntry]:
    audits = []
    pending = state.pending_run(topic.table)
    if pending is not None and pending != run_id and not state.is_committed(topic.table, pending):
        plan = state.read_plan(topic.table, pending)
        if plan is not None:
            log.warning("table %s: finishing run %s first (planned, not committed)", topic.table, pending)
            audits.append(_execute(config, spark, plan, topic, state, warehouse, request.fault))
    if state.is_committed(topic.table, run_id):
        audit = state.audit_for_run(topic.table, run_id)
        return audits + ([audit] if audit else [])
    plan = state.read_plan(topic.table, run_id)
    if plan is None:
        if request.kind == BACKFILL:
            plan = plan_backfill(run_id, topic, consumer, state, _window(request, topic, state))
        else:
            plan = plan_scheduled(run_id, topic, consumer, state, offsets)
        state.write_plan(plan)
    elif plan.kind != request.kind:
        raise LoaderError(f"run id {run_id!r} is a {plan.kind} run of table {topic.table}; "
                          f"it cannot be rerun as a {request.kind}")
    faults.kill_driver_at("after_plan", request.fault)
    return audits + [_execute(config, spark, plan, topic, state, warehouse, request.fault)]


def _window(request: LoadRequest, topic: TopicConfig, state: StateStore) -> tuple[int, int]:
    """The backfill window widened to whole table partitions (hours or days)."""
    width = bucket_ms(topic.partitioning)
    until = request.until_ms if request.until_ms is not None else state.now_ms()
    if until <= request.since_ms:
        raise LoaderError(f"--until ({_iso(until)}) must be after --since ({_iso(request.since_ms)})")
    return request.since_ms // width * width, -(-until // width) * width


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _execute(config: LoaderConfig, spark, plan: TablePlan, topic: TopicConfig, state: StateStore,
             warehouse: Storage, fault: str | None) -> AuditEntry:
    specs = [TaskSpec(plan.run_id, plan.kind, index, r, topic, config.source, config.warehouse,
                      config.state, plan.window_ms, fault)
             for index, r in enumerate(plan.ranges)]
    todo = [s for s in specs if state.read_marker(topic.table, plan.run_id, s.range) is None]
    if todo:
        watcher = _MidTaskKiller(state, plan) if fault == "mid_tasks" else None
        group = f"pylog-tasks-{uuid.uuid4().hex}"
        running = spark_running_tasks(spark.sparkContext, group) if spark is not None else None
        try:
            with LoadProgress(state, plan, config.progress_seconds, running=running):
                run_tasks(spark, todo, f"pylog load {plan.table} {plan.run_id}", group)
        finally:
            if watcher:
                watcher.stop()
    markers = [state.read_marker(topic.table, plan.run_id, s.range) for s in specs]
    missing = [s.range.name for s, m in zip(specs, markers) if m is None]
    if missing:
        raise LoaderError(f"table {plan.table}: tasks finished without done markers for {missing}")
    faults.kill_driver_at("before_commit", fault)
    # ``state`` is guarded by the table lock: each commit step re-verifies our token.
    retention_ms = int(config.state_retention_days * 24 * 3600 * 1000)
    return commit(state, warehouse, plan, topic, markers, fault, retention_ms)


def run_tasks(spark, specs: list[TaskSpec], description: str, group: str | None = None) -> list[TaskDoneMarker]:
    """One Spark task per spec, in the job group ``group`` (default: a new one); ``spark``
    may be None: run them here, in order."""
    from pylog.etl.task import run_task

    if spark is None:
        return [run_task(spec) for spec in specs]
    sc = spark.sparkContext
    group = group or f"pylog-tasks-{uuid.uuid4().hex}"
    sc.setJobGroup(group, description, interruptOnCancel=True)
    try:
        return sc.parallelize(specs, len(specs)).map(_run_on_executor).collect()
    except Exception as exc:  # Py4JJavaError and friends carry the task's Python error as text
        _stop_running_tasks(sc, group)
        raise LoaderError(f"map tasks failed: {_task_error(exc)}") from exc
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)


def _stop_running_tasks(sc, group: str, timeout_s: float = 120.0) -> None:
    """Cancel the failed job's tasks and wait until none runs any more.

    When a job fails, Spark aborts it at once but its other running tasks end only when
    their Python workers notice: a task of the failed run could still be writing into
    the run's staging directory while a rerun of the same run id (the same plan and
    paths) already works there. So a failed run returns only once its tasks stopped.
    """
    sc.cancelJobGroup(group)
    tracker = sc.statusTracker()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        stages = [stage for job in tracker.getJobIdsForGroup(group)
                  for stage in (tracker.getJobInfo(job).stageIds
                                if tracker.getJobInfo(job) else [])]
        infos = [tracker.getStageInfo(stage) for stage in stages]
        if not any(info is not None and info.numActiveTasks > 0 for info in infos):
            return
        time.sleep(0.05)
    log.warning("tasks of the failed job group %s still run after %.0f s", group, timeout_s)


def _run_on_executor(spec: TaskSpec) -> TaskDoneMarker:
    from pyspark import TaskContext

    from pylog.etl.task import run_task

    context = TaskContext.get()
    return run_task(spec, context.attemptNumber() if context else 0)


_ERROR_LINE = re.compile(r"^(?:[\w.]+\.)?(\w*(?:Error|Range|Fault)): (.+)$")


def _task_error(exc: Exception) -> str:
    """The last Python error line in a Spark job failure, e.g. 'RetentionGapError: ...'."""
    found = [m for m in (_ERROR_LINE.match(line.strip()) for line in str(exc).splitlines())
             if m and m.group(1) not in ("Py4JJavaError", "PythonException")]
    if found:
        return f"{found[-1].group(1)}: {found[-1].group(2)}"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


class TableLockHolder:
    """Holds the table lock for a ``with`` block and refreshes its heartbeat meanwhile.

    :meth:`check` raises TableLockedError once the lock is lost (seen by a heartbeat, or
    by reading the lock file now); the driver calls it before every state write.
    """

    def __init__(self, state: StateStore, table: str, run_id: str, kind: str, timeout_s: float,
                 wait_s: float = 0.0, wait_key: str = "", sleep: Callable[[float], None] = time.sleep) -> None:
        """``wait_s``: how long to wait for another run's lock before giving up (0: refuse at
        once, as loads do); ``wait_key`` names the setting in the refusal."""
        self.state, self.table, self.run_id, self.kind, self.timeout_s = state, table, run_id, kind, timeout_s
        self.wait_s, self.wait_key, self._sleep = wait_s, wait_key, sleep
        self.waited_s = 0.0
        self._stop = threading.Event()
        self.lost: TableLockedError | None = None

    def __enter__(self) -> "TableLockHolder":
        started = time.monotonic()
        deadline = started + self.wait_s
        while True:
            try:
                self.lock = self.state.acquire_lock(self.table, self.run_id, self.kind, self.timeout_s)
                break
            except TableLockedError as exc:
                if not self.wait_s:
                    raise
                if time.monotonic() >= deadline:
                    raise TableLockedError(f"{exc} ({self.kind} waited {self.wait_s:.0f}s: "
                                           f"{self.wait_key})") from None
                log.info("table %s: waiting for the lock: %s", self.table, exc)
                self._sleep(min(1.0, max(deadline - time.monotonic(), 0.05)))
        self.waited_s = time.monotonic() - started
        self._thread = threading.Thread(target=self._beat, name=f"lock-{self.table}", daemon=True)
        self._thread.start()
        return self

    def _beat(self) -> None:
        while not self._stop.wait(max(self.timeout_s / 4, 0.5)):
            try:
                self.lock = self.state.heartbeat(self.lock, self.table)
            except TableLockedError as exc:
                log.error("table %s: %s", self.table, exc)
                self.lost = exc
                return
            except Exception:  # noqa: BLE001 -- a storage blip: the next beat tries again
                log.exception("table %s: lock heartbeat failed", self.table)

    def check(self) -> None:
        if self.lost is not None:
            raise self.lost
        self.state.verify_lock(self.table, self.lock)

    RELEASE_RETRY_S = 60.0
    """How long a release keeps trying through a storage outage (a NameNode restarting and
    in safe mode takes seconds to tens of seconds)."""

    def __exit__(self, exc_type, exc, traceback) -> None:
        self._stop.set()
        self._thread.join()
        deadline = time.monotonic() + self.RELEASE_RETRY_S
        pause = 0.5
        while True:
            try:
                self.state.release_lock(self.table, self.lock)
                return
            except TableLockedError:
                raise
            except (PylogError, OSError) as error:
                if time.monotonic() + pause > deadline:
                    if exc is None:
                        raise
                    # The run failed anyway; its lock is left to expire, or to a rerun of
                    # the same run id once this process is gone (see pylog.etl.locks).
                    log.error("table %s: lock of run %s not released: %s", self.table, self.run_id, error)
                    return
                log.warning("table %s: releasing the lock failed, retrying: %s", self.table, error)
                self._sleep(pause)
                pause = min(pause * 2, 8.0)


class _MidTaskKiller:
    """Test fault ``mid_tasks``: kill the driver once the first task's marker exists."""

    def __init__(self, state: StateStore, plan: TablePlan) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, args=(state, plan), daemon=True)
        self._thread.start()

    def _watch(self, state: StateStore, plan: TablePlan) -> None:
        while not self._stop.wait(0.2):
            if state.count_markers(plan.table, plan.run_id) >= 1:
                faults.kill_driver_at("mid_tasks", "mid_tasks")

    def stop(self) -> None:
        self._stop.set()
