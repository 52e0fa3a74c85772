"""The audit a DAG run ends with: did the run land every record it fetched, and is the
table caught up with the log?

For every table of the run, from the loader's audit entry of that run id:

* rows written + records quarantined == records fetched, in total and per log partition
  (a backfill reads whole offset ranges around its window and drops the records whose
  event time is outside it, so there the sum may be lower, never higher);
* when the run is the table's latest, the rows actually in the table's (and quarantine
  table's) files named after the run's offset ranges equal what the entry says was
  written -- the entry is checked against the data, not only against itself;
* for a scheduled run, every log partition's lag (latest offset - committed offset) is at
  most ``max_lag``.

A run id without an audit entry did not commit, which is a failure too.

Usage::

    checks = audit_run(config, run_id="scheduled__2026-11-20T07:00:00+00:00", max_lag=10_000)
    enforce(checks)    # raises AuditFailedError listing every problem
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from pylog.errors import PylogError
from pylog.etl.config import LoaderConfig, TopicConfig
from pylog.etl.fs import Storage
from pylog.etl.layout import range_of_file
from pylog.etl.model import BACKFILL, SCHEDULED, AuditEntry
from pylog.etl.state import StateStore
from pylog.warehouse.status import collect_status
from pylog.warehouse.tables import data_file_paths, read_footer


class AuditFailedError(PylogError):
    """A loaded run does not add up, or a table lags the log more than allowed."""


@dataclass(frozen=True, slots=True)
class AuditCheck:
    """The outcome of auditing one table of one run."""

    table: str
    run_id: str
    entry: AuditEntry | None
    problems: tuple[str, ...]
    rows_in_table: int | None = None
    """Rows found in the files of the run's ranges (None when not checked)."""
    max_partition_lag: int | None = None

    @property
    def ok(self) -> bool:
        return not self.problems


def audit_run(config: LoaderConfig, run_id: str, topics: list[str] | None = None,
              max_lag: int | None = None, consumer_factory: Callable | None = None) -> list[AuditCheck]:
    """Audit ``run_id`` for each configured table (or those of ``topics``)."""
    state = StateStore(config.state)
    warehouse = Storage.from_uri(config.warehouse)
    selected = config.select(topics)
    lags: dict[str, dict[int, int]] = {}
    if max_lag is not None:
        for status in collect_status(config, [t.topic for t in selected], consumer_factory):
            lags[status.table] = {p.partition: p.lag for p in status.partitions}
    return [_audit_table(topic, run_id, state, warehouse, max_lag, lags.get(topic.table))
            for topic in selected]


def _audit_table(topic: TopicConfig, run_id: str, state: StateStore, warehouse: Storage,
                 max_lag: int | None, lags: dict[int, int] | None) -> AuditCheck:
    entry = state.audit_for_run(topic.table, run_id)
    if entry is None:
        return AuditCheck(topic.table, run_id, None,
                          (f"table {topic.table}: run {run_id!r} has no audit entry (it did not commit)",))
    problems = list(_balance_problems(entry))
    rows_in_table = None
    latest = state.latest_audit(topic.table)
    if latest is not None and latest.run_id == entry.run_id:
        rows_in_table, quarantined_in_table = (
            _rows_of_ranges(warehouse, name, entry) for name in (topic.table, topic.quarantine_table))
        if rows_in_table != entry.rows_written:
            problems.append(f"table {topic.table}: the run's files hold {rows_in_table} rows, "
                            f"its audit entry says {entry.rows_written} were written")
        if quarantined_in_table != entry.quarantined:
            problems.append(f"table {topic.quarantine_table}: the run's files hold {quarantined_in_table} "
                            f"rows, its audit entry says {entry.quarantined} were quarantined")
    worst = None
    if max_lag is not None and lags is not None and entry.kind == SCHEDULED:
        worst = max(lags.values(), default=0)
        for partition, lag in sorted(lags.items()):
            if lag > max_lag:
                problems.append(f"table {topic.table}: partition {partition} of {topic.topic} lags "
                                f"{lag} offsets behind the log (bound {max_lag})")
    return AuditCheck(topic.table, run_id, entry, tuple(problems), rows_in_table, worst)


def _balance_problems(entry: AuditEntry):
    totals = [("", entry.rows_written, entry.quarantined, entry.records_fetched)]
    totals += [(f"partition {p.partition}: ", p.rows_written, p.quarantined, p.records_fetched)
               for p in entry.partitions]
    for where, written, quarantined, fetched in totals:
        landed = written + quarantined
        if landed != fetched and not (entry.kind == BACKFILL and landed < fetched):
            relation = ">" if landed > fetched else "!="
            yield (f"table {entry.table}: {where}rows written ({written}) + quarantined "
                   f"({quarantined}) {relation} records fetched ({fetched})")


def _rows_of_ranges(warehouse: Storage, table: str, entry: AuditEntry) -> int:
    """Rows in the table's files whose names are the run's ranges (any dt/hr directory)."""
    names = {r.name for r in entry.ranges}
    return sum(read_footer(warehouse, path).num_rows
               for path in data_file_paths(warehouse, warehouse.join(table))
               if range_of_file(warehouse.name(path)) in names)


def enforce(checks: list[AuditCheck]) -> None:
    """Raise AuditFailedError naming every problem; nothing when all checks passed."""
    problems = [problem for check in checks for problem in check.problems]
    if problems:
        raise AuditFailedError("audit failed: " + "; ".join(problems))


def format_checks(checks: list[AuditCheck]) -> str:
    """One line per table, for the task log."""
    lines = []
    for check in checks:
        entry = check.entry
        counts = (f"fetched {entry.records_fetched}, written {entry.rows_written}, "
                  f"quarantined {entry.quarantined}" if entry else "no audit entry")
        lag = "" if check.max_partition_lag is None else f", max partition lag {check.max_partition_lag}"
        lines.append(f"{check.table} run {check.run_id}: {counts}{lag}: "
                     f"{'ok' if check.ok else 'FAILED'}")
    return "\n".join(lines)
