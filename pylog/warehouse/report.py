"""``pylog status`` as operators and monitoring use it: everything the state store knows,
what the brokers add when they answer, the runs still pending, and an exit status.

The report never fails because a broker is down: each table then shows its committed
offsets and runs from the state store, marked "broker unreachable" with its lag unknown.

Exit status (:attr:`StatusReport.exit_code`; the most severe finding wins)::

    0  healthy
    3  no broker answered for some table: its lag is unknown
    4  a partition lags more than --max-lag offsets or --max-lag-seconds
    5  a run failed, or has been pending longer than --max-pending-seconds
       (a pending run blocks every later load of its table until it is finished)

(1 stays "the command itself failed", e.g. a bad config; 2 is a usage mistake.)

Usage::

    report = collect_report(load_config("conf/loader.yaml"), limits=Limits(max_lag=10_000))
    print(format_report(report)); sys.exit(report.exit_code)
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable

from pylog.errors import ConfigError, NetworkExceptionError, PylogError
from pylog.etl.config import LoaderConfig, TopicConfig
from pylog.etl.model import BACKFILL, AuditEntry
from pylog.etl.source import resolve_source
from pylog.etl.state import StateStore
from pylog.warehouse.render import text_table, utc_ms
from pylog.warehouse.status import TableStatus, offline_status, table_status
from pylog.warehouse.values import iso_epoch_ms

HEALTHY, BROKER_UNREACHABLE, LAGGING, RUN_FAILED_OR_STUCK = 0, 3, 4, 5
RECENT_RUNS = 10
STATUS_RETRIES = 2


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds beyond which status exits non-zero (None: not checked)."""

    max_lag: int | None = None
    """Offsets a partition may lag."""
    max_lag_seconds: float | None = None
    """Age of a partition's oldest record not loaded yet."""
    max_pending_seconds: float = 3600.0
    """How long a run may stay planned and uncommitted (a load normally takes minutes)."""


@dataclass(frozen=True, slots=True)
class PendingRun:
    """A planned, uncommitted run of a table: running, failed or abandoned."""

    table: str
    topic: str
    run_id: str
    kind: str
    planned_at_ms: int
    tasks_done: int
    tasks_total: int
    error: str | None
    """The last attempt's error (None: no attempt failed, or it died without a word)."""
    failed_at_ms: int | None
    running: bool
    """A live lock of this run holds the table."""
    command: str
    """The command that finishes it."""

    @property
    def state(self) -> str:
        return "running" if self.running else "failed" if self.error else "pending"

    def age_seconds(self, now_ms: int) -> float:
        return max(0.0, (now_ms - self.planned_at_ms) / 1000)


@dataclass(frozen=True, slots=True)
class Problem:
    exit_code: int
    message: str


@dataclass(frozen=True)
class StatusReport:
    generated_at_ms: int
    tables: tuple[TableStatus, ...]
    pending: tuple[PendingRun, ...]
    recent_runs: dict[str, tuple[AuditEntry, ...]]
    """The newest runs of each table, oldest first."""
    limits: Limits
    problems: tuple[Problem, ...] = field(default=())

    @property
    def exit_code(self) -> int:
        return max((p.exit_code for p in self.problems), default=HEALTHY)

    @property
    def broker_reachable(self) -> bool:
        return not any(t.broker_error for t in self.tables)


def collect_report(config: LoaderConfig, topics: list[str] | None = None, limits: Limits = Limits(),
                   config_path: str = "conf/loader.yaml", consumer_factory: Callable | None = None,
                   clock: Callable[[], float] = time.time, recent: int = RECENT_RUNS) -> StatusReport:
    """Status of every configured table (or those of ``topics``); never raises for a broker
    that does not answer. ``config_path`` goes into the commands that finish pending runs."""
    if consumer_factory is None:
        from pylog.client import SimpleConsumer

        consumer_factory = SimpleConsumer
    state = StateStore(config.state)
    selected = config.select(topics)
    now_ms = int(clock() * 1000)
    tables = _table_statuses(config, selected, state, consumer_factory)
    pending = tuple(run for topic in selected
                    if (run := _pending_run(state, topic, config_path)) is not None)
    recent_runs = {topic.table: tuple(state.recent_audits(topic.table)[-recent:]) for topic in selected}
    report = StatusReport(now_ms, tables, pending, recent_runs, limits)
    return replace(report, problems=tuple(find_problems(report)))


def _table_statuses(config: LoaderConfig, selected: list[TopicConfig], state: StateStore,
                    consumer_factory: Callable) -> tuple[TableStatus, ...]:
    try:
        servers, settings = resolve_source(config.source).client_arguments(config.source)
        # A status is a snapshot: two quick retries, not the loader's patience.
        consumer = consumer_factory(servers, **{"retries": STATUS_RETRIES, **settings})
    except ConfigError:
        raise  # a mistake in the source settings (a secret not set) is not an outage
    except (PylogError, OSError) as exc:
        return tuple(offline_status(t.table, t.topic, state, str(exc)) for t in selected)
    statuses, unreachable = [], None
    try:
        for topic in selected:
            if unreachable is not None:  # no broker answered: do not wait again per table
                statuses.append(offline_status(topic.table, topic.topic, state, unreachable))
                continue
            try:
                statuses.append(table_status(topic.table, topic.topic, consumer, state, timestamps=True))
            except (PylogError, OSError) as exc:
                if isinstance(exc, (NetworkExceptionError, OSError)):
                    unreachable = str(exc)
                statuses.append(offline_status(topic.table, topic.topic, state, str(exc)))
    finally:
        consumer.close()
    return tuple(statuses)


def _pending_run(state: StateStore, topic: TopicConfig, config_path: str) -> PendingRun | None:
    run_id = state.pending_run(topic.table)
    if run_id is None or state.is_committed(topic.table, run_id):
        return None
    plan = state.read_plan(topic.table, run_id)
    if plan is None:  # a crash between recording the run and writing its plan: ignored by loads
        return None
    failure = state.read_failure(topic.table, run_id) or {}
    lock = state.read_lock(topic.table)
    command = f"pylog load --config {config_path} --topics {topic.topic} --run-id {run_id}"
    if plan.kind == BACKFILL and plan.window_ms:
        command += f" --since {iso_epoch_ms(plan.window_ms[0])} --until {iso_epoch_ms(plan.window_ms[1])}"
    return PendingRun(table=topic.table, topic=topic.topic, run_id=run_id, kind=plan.kind,
                      planned_at_ms=plan.created_at_ms,
                      tasks_done=state.count_markers(topic.table, run_id), tasks_total=len(plan.ranges),
                      error=failure.get("error"), failed_at_ms=failure.get("at_ms"),
                      running=lock is not None and lock.run_id == run_id
                      and lock.heartbeat_at_ms >= state.now_ms() - 60_000,
                      command=command)


def find_problems(report: StatusReport) -> list[Problem]:
    """What makes the report unhealthy, each with its exit code."""
    limits, now_ms = report.limits, report.generated_at_ms
    problems = []
    for run in report.pending:
        if run.error and not run.running:
            problems.append(Problem(RUN_FAILED_OR_STUCK, f"table {run.table}: run {run.run_id} failed: "
                                                         f"{run.error}; finish it: {run.command}"))
        elif run.age_seconds(now_ms) > limits.max_pending_seconds:
            problems.append(Problem(RUN_FAILED_OR_STUCK, f"table {run.table}: run {run.run_id} has been "
                                    f"pending for {run.age_seconds(now_ms):.0f}s (bound "
                                    f"{limits.max_pending_seconds:g}s); finish it: {run.command}"))
    for table in report.tables:
        if table.broker_error:
            problems.append(Problem(BROKER_UNREACHABLE, f"table {table.table}: broker unreachable, lag "
                                                        f"unknown: {table.broker_error}"))
        for p in table.partitions:
            if limits.max_lag is not None and p.lag is not None and p.lag > limits.max_lag:
                problems.append(Problem(LAGGING, f"table {table.table}: partition {p.partition} lags "
                                                 f"{p.lag} offsets (bound {limits.max_lag})"))
            seconds = p.lag_seconds(now_ms)
            if limits.max_lag_seconds is not None and seconds is not None and seconds > limits.max_lag_seconds:
                problems.append(Problem(LAGGING, f"table {table.table}: partition {p.partition} lags "
                                                 f"{seconds:.0f}s (bound {limits.max_lag_seconds:g}s)"))
    return problems


def is_lagging(report: StatusReport, lag: int | None, seconds: float | None) -> bool:
    """Whether a partition's lag is over a bound (highlighted on the page)."""
    limits = report.limits
    return ((limits.max_lag is not None and lag is not None and lag > limits.max_lag)
            or (limits.max_lag_seconds is not None and seconds is not None and seconds > limits.max_lag_seconds))


# -- text ----------------------------------------------------------------------------------

def format_report(report: StatusReport) -> str:
    """Pending and failed runs first, then partitions, the newest runs, and the findings."""
    now = report.generated_at_ms
    blocks = [f"pylog status at {utc_ms(now)}"
              + ("" if report.broker_reachable else "  (broker unreachable: lag unknown)")]
    if report.pending:
        blocks.append("PENDING RUNS\n" + text_table(
            ["table", "run", "kind", "state", "planned at", "age s", "tasks", "error"],
            [[r.table, r.run_id, r.kind, r.state, utc_ms(r.planned_at_ms), round(r.age_seconds(now)),
              f"{r.tasks_done}/{r.tasks_total}", r.error] for r in report.pending])
            + "\n" + "\n".join(f"  finish {r.table}: {r.command}" for r in report.pending))
    rows = []
    for table in report.tables:
        if table.broker_error and not table.partitions:
            rows.append([table.table, table.topic, None, None, None, None, None, None, "broker unreachable"])
        for p in table.partitions:
            seconds = p.lag_seconds(now)
            rows.append([table.table, p.topic, p.partition, p.earliest_offset, p.latest_offset,
                         p.committed_offset, p.lag, None if seconds is None else round(seconds),
                         "broker unreachable" if table.broker_error else
                         "LAGGING" if is_lagging(report, p.lag, seconds) else ""])
    blocks.append(text_table(["table", "topic", "partition", "log start", "latest", "committed", "lag",
                              "lag s", "note"], rows))
    blocks.append(text_table(
        ["table", "run", "kind", "committed at", "fetched", "written", "quarantined", "seconds", "check"],
        [_run_row(table, audit) for table, audits in report.recent_runs.items() for audit in audits]
        or [[t.table, "never loaded"] + [None] * 7 for t in report.tables]))
    if report.problems:
        blocks.append("\n".join(f"{p.message}" for p in report.problems))
    blocks.append(f"exit status {report.exit_code}")
    return "\n\n".join(blocks)


def _run_row(table: str, audit: AuditEntry) -> list:
    return [table, audit.run_id, audit.kind, utc_ms(audit.committed_at_ms), audit.records_fetched,
            audit.rows_written, audit.quarantined, round(audit.seconds, 1), check(audit)]


def check(audit: AuditEntry) -> str:
    """``ok`` when written + quarantined add up to fetched."""
    return "ok" if audit.rows_written + audit.quarantined == audit.records_fetched else "MISMATCH"


def backlog(audit: AuditEntry) -> int:
    """The lag a run worked off: offsets from its start to its end offsets, when planned."""
    return sum(max(0, p.end - p.start) for p in audit.partitions)


# -- JSON ----------------------------------------------------------------------------------

def report_json(report: StatusReport) -> dict:
    """The report as JSON-ready values (timestamps ISO-8601, durations in seconds)."""
    now = report.generated_at_ms
    return {
        "generated_at": iso_epoch_ms(now),
        "exit_code": report.exit_code,
        "broker_reachable": report.broker_reachable,
        "problems": [{"exit_code": p.exit_code, "message": p.message} for p in report.problems],
        "pending_runs": [{
            "table": r.table, "topic": r.topic, "run_id": r.run_id, "kind": r.kind, "state": r.state,
            "planned_at": iso_epoch_ms(r.planned_at_ms), "age_seconds": round(r.age_seconds(now), 3),
            "tasks_done": r.tasks_done, "tasks_total": r.tasks_total, "error": r.error,
            "failed_at": None if r.failed_at_ms is None else iso_epoch_ms(r.failed_at_ms),
            "command": r.command} for r in report.pending],
        "tables": [{
            "table": t.table, "topic": t.topic, "lag": t.lag, "broker_error": t.broker_error,
            "partitions": [{
                "partition": p.partition, "log_start_offset": p.earliest_offset,
                "latest_offset": p.latest_offset, "committed_offset": p.committed_offset,
                "lag": p.lag, "lag_seconds": _round(p.lag_seconds(now)),
                "lagging": is_lagging(report, p.lag, p.lag_seconds(now))} for p in t.partitions],
            "recent_runs": [{
                "run_id": a.run_id, "kind": a.kind, "committed_at": iso_epoch_ms(a.committed_at_ms),
                "records_fetched": a.records_fetched, "rows_written": a.rows_written,
                "quarantined": a.quarantined, "seconds": a.seconds, "backlog": backlog(a),
                "check": check(a)} for a in report.recent_runs.get(t.table, ())],
        } for t in report.tables],
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
