"""How far behind the log each table is: per partition, latest, committed offset and lag.

* latest offset: the partition's high watermark, asked of its leader (ListOffsets -1);
* committed offset: the next offset the scheduled load will read, from the state store;
* lag: latest - committed, in offsets. A partition never loaded counts from its log start
  offset (the loader's ``earliest`` policy); offsets may have gaps, so lag is an upper
  bound on the records still to load.

Together with each table's last audit entry this is what ``pylog status`` prints and
what the DAG's audit task checks against its lag bound. The last entry comes from the
state store's audit index (one file, however many runs); ``pylog status --history``
adds every entry still kept (:func:`format_history`, one file per run).

Usage::

    statuses = collect_status(load_config("conf/loader.yaml"))
    print(format_status(statuses))
"""

from __future__ import annotations

from dataclasses import dataclass
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
    earliest_offset: int
    latest_offset: int
    committed_offset: int | None
    """None before the table's first committed load."""

    @property
    def lag(self) -> int:
        start = self.earliest_offset if self.committed_offset is None else self.committed_offset
        return max(0, self.latest_offset - max(start, self.earliest_offset))


@dataclass(frozen=True, slots=True)
class TableStatus:
    table: str
    topic: str
    partitions: tuple[PartitionStatus, ...]
    last_audit: AuditEntry | None

    @property
    def lag(self) -> int:
        return sum(p.lag for p in self.partitions)


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
        return [_table_status(topic.table, topic.topic, consumer, state)
                for topic in config.select(topics)]
    finally:
        consumer.close()


def _table_status(table: str, topic: str, consumer, state: StateStore) -> TableStatus:
    committed = state.committed_offsets(table)
    partitions = tuple(
        PartitionStatus(topic=topic, partition=partition,
                        earliest_offset=consumer.earliest_offset(topic, partition),
                        latest_offset=consumer.latest_offset(topic, partition),
                        committed_offset=committed.get(partition))
        for partition in consumer.partitions_for(topic))
    return TableStatus(table=table, topic=topic, partitions=partitions,
                       last_audit=state.latest_audit(table))


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


def status_page(statuses: list[TableStatus]) -> str:
    """A small self-contained HTML page with the same tables."""
    body = format_status(statuses, tablefmt="html")
    return ("<!doctype html><html><head><meta charset='utf-8'><title>pylog status</title>"
            "<style>body{font-family:sans-serif}table{border-collapse:collapse;margin:1em 0}"
            "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}</style></head>"
            f"<body><h1>pylog status</h1>{body}</body></html>\n")
