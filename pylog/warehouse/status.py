"""How far behind the log each table is: per partition, latest, committed offset and lag.

* latest offset: the partition's high watermark, asked of its leader (ListOffsets -1);
* committed offset: the next offset the scheduled load will read, from the state store;
* lag: latest - committed, in offsets. A partition never loaded counts from its log start
  offset (the loader's ``earliest`` policy); offsets may have gaps, so lag is an upper
  bound on the records still to load.

Together with each table's last audit entry this is what the DAG's audit task checks
against its lag bound; ``pylog status`` builds its report on it (:mod:`pylog.warehouse.report`,
which also works when no broker answers). The last entry comes from the
state store's audit index (one file, however many runs); ``pylog status --history``
adds every entry still kept (:func:`format_history`, one file per run).

Usage::

    statuses = collect_status(load_config("conf/loader.yaml"))
    print(format_status(statuses))
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from pylog.etl.config import LoaderConfig
from pylog.etl.model import AuditEntry
from pylog.etl.source import resolve_source
from pylog.etl.state import StateStore
from pylog.warehouse.render import human_bytes, text_table, utc_ms


@dataclass(frozen=True, slots=True)
class PartitionStatus:
    topic: str
    partition: int
    earliest_offset: int | None
    """None (as ``latest_offset``) when no broker answered: the lag is unknown."""
    latest_offset: int | None
    committed_offset: int | None
    """None before the table's first committed load."""
    next_timestamp_ms: int | None = None
    """Log timestamp of the first record not loaded yet (None: nothing to load, or unknown)."""

    @property
    def lag(self) -> int | None:
        """Offsets not loaded yet; None when no broker answered."""
        if self.latest_offset is None or self.earliest_offset is None:
            return None
        start = self.earliest_offset if self.committed_offset is None else self.committed_offset
        return max(0, self.latest_offset - max(start, self.earliest_offset))

    def lag_seconds(self, now_ms: int) -> float | None:
        """How old the oldest record not loaded yet is: 0 without lag, None when unknown."""
        if self.lag == 0:
            return 0.0
        if self.next_timestamp_ms is None:
            return None
        return max(0.0, (now_ms - self.next_timestamp_ms) / 1000)


@dataclass(frozen=True, slots=True)
class TableStatus:
    table: str
    topic: str
    partitions: tuple[PartitionStatus, ...]
    last_audit: AuditEntry | None
    broker_error: str | None = None
    """Why the brokers could not tell the latest offsets (the lag is then unknown)."""

    @property
    def lag(self) -> int | None:
        lags = [p.lag for p in self.partitions]
        return None if self.broker_error or any(lag is None for lag in lags) else sum(lags)


def collect_status(config: LoaderConfig, topics: list[str] | None = None,
                   consumer_factory: Callable | None = None) -> list[TableStatus]:
    """Ask the brokers and the state store about every configured topic (or ``topics``).

    Raises the client's errors (UnknownTopicOrPartitionError, NetworkExceptionError ...)
    when the source cluster cannot answer.
    """
    if consumer_factory is None:
        from pylog.client import SimpleConsumer

        consumer_factory = SimpleConsumer
    state = StateStore(config.state)
    servers, settings = resolve_source(config.source).client_arguments(config.source)
    consumer = consumer_factory(servers, **settings)
    try:
        return [table_status(topic.table, topic.topic, consumer, state)
                for topic in config.select(topics)]
    finally:
        consumer.close()


def table_status(table: str, topic: str, consumer, state: StateStore,
                  timestamps: bool = False) -> TableStatus:
    """One table's partitions as the brokers (``consumer``) and the state store know them;
    with ``timestamps``, also the log timestamp of each lagging partition's first record
    not loaded (one small fetch each)."""
    committed = state.committed_offsets(table)
    partitions = []
    for partition in consumer.partitions_for(topic):
        status = PartitionStatus(topic=topic, partition=partition,
                                 earliest_offset=consumer.earliest_offset(topic, partition),
                                 latest_offset=consumer.latest_offset(topic, partition),
                                 committed_offset=committed.get(partition))
        if timestamps and status.lag:
            start = max(status.earliest_offset, status.committed_offset or 0)
            status = replace(status, next_timestamp_ms=_first_timestamp(consumer, topic, partition, start))
        partitions.append(status)
    return TableStatus(table=table, topic=topic, partitions=tuple(partitions),
                       last_audit=state.latest_audit(table))


def _first_timestamp(consumer, topic: str, partition: int, offset: int) -> int | None:
    """Log timestamp of the first record at or after ``offset`` (one small fetch)."""
    records = consumer.fetch(topic, partition, offset, max_bytes=65536, max_wait_ms=0).records
    return records[0].timestamp if records else None


def offline_status(table: str, topic: str, state: StateStore, error: str) -> TableStatus:
    """What the state store alone knows of a table: committed offsets, the last run."""
    return TableStatus(table=table, topic=topic,
                       partitions=tuple(PartitionStatus(topic, partition, None, None, offset)
                                        for partition, offset in sorted(state.committed_offsets(table).items())),
                       last_audit=state.latest_audit(table), broker_error=error)


def format_status(statuses: list[TableStatus], tablefmt: str = "simple") -> str:
    """The partitions table, then one line per table's last run (``tablefmt`` html for a page)."""
    partition_rows = [[s.table, p.topic, p.partition, p.earliest_offset, p.latest_offset,
                       p.committed_offset, p.lag]
                      for s in statuses for p in s.partitions]
    audit_rows = [_audit_row(s) for s in statuses]
    return "\n\n".join([
        text_table(["table", "topic", "partition", "log start", "latest", "committed", "lag"],
                   partition_rows, tablefmt),
        text_table(["table", "last run", "kind", "committed at", "fetched", "written",
                    "quarantined", "gaps", "read", "seconds", "check"], audit_rows, tablefmt),
    ])


def _audit_row(status: TableStatus) -> list:
    audit = status.last_audit
    if audit is None:
        return [status.table, "never loaded"] + [None] * 9
    balanced = audit.rows_written + audit.quarantined == audit.records_fetched
    return [status.table, audit.run_id, audit.kind, utc_ms(audit.committed_at_ms), audit.records_fetched,
            audit.rows_written, audit.quarantined, len(audit.gaps), human_bytes(audit.bytes_fetched),
            round(audit.seconds, 1), "ok" if balanced else "MISMATCH"]


def collect_history(config: LoaderConfig, topics: list[str] | None = None) -> dict[str, list[AuditEntry]]:
    """Every audit entry kept for each configured table (or those of ``topics``), oldest first."""
    state = StateStore(config.state)
    return {topic.table: state.list_audits(topic.table) for topic in config.select(topics)}


def format_history(history: dict[str, list[AuditEntry]], tablefmt: str = "simple") -> str:
    """One line per committed run of each table, oldest first."""
    rows = [[table, a.run_id, a.kind, utc_ms(a.committed_at_ms), a.records_fetched, a.rows_written,
             a.quarantined, len(a.gaps), human_bytes(a.bytes_fetched), round(a.seconds, 1)]
            for table, audits in history.items() for a in audits]
    return text_table(["table", "run", "kind", "committed at", "fetched", "written", "quarantined",
                       "gaps", "read", "seconds"], rows, tablefmt)
