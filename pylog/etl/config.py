"""The loader's configuration (``conf/loader.yaml``): typed, frozen, validated at start.

Every problem raises :class:`pylog.errors.ConfigError` naming the key by its dotted path,
for example ``topics.page_views.format``. Layout::

    source:
      bootstrap_servers: localhost:9092      # str or list; any Kafka-protocol cluster
      client_id: pylog-loader
      request_timeout_ms: 30000
      fetch_max_bytes: 8388608               # per fetch request
      # on a secured cluster (see pylog.etl.source): security.protocol, sasl.mechanism,
      # sasl.username, sasl.password_env | sasl.password_file, ssl.ca.location, ...;
      # or airflow_conn_id: a kafka connection holding every client setting
    warehouse: file:///var/lib/pylog/warehouse   # file://, hdfs://, webhdfs://
    state: file:///var/lib/pylog/state
    lock_timeout_seconds: 300                # a lock not refreshed for this long is stale
    state_retention_days: 30                 # state of committed runs older than this is deleted
    progress_seconds: 10                     # a progress line this often while tasks run
                                             # (not on a terminal: there a bar is redrawn)
    topics:
      page_views:                            # the topic name
        table: page_views
        format: json                         # json (with schema) | raw
        schema: {user_id: int64, url: string, ts: timestamp}
        event_time: log_timestamp            # or field:<name> (a timestamp/int64-ms field)
        max_event_lateness_seconds: 3600     # field event time: how far log time may differ
        partitioning: [dt, hr]               # [dt] or [dt, hr], UTC
        new_partitions: earliest             # earliest | latest | 2026-11-20T00:00:00Z
        on_retention_gap: fail               # fail | earliest
        max_bad_records: 1000                # quarantined records a run may have ...
        max_bad_ratio: 0.01                  # ... and as a share of records fetched
        max_records_per_task: 1000000        # larger offset ranges are split
    compaction:                              # pylog compact, and the DAG's compact task
      after_load: true                       # the scheduled DAG compacts after its audit
      older_than: 2h                         # partitions that ended this long ago (s, m, h, d)
      lock_wait_seconds: 600                 # how long compaction waits for a load's lock
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pylog.errors import ConfigError
from pylog.etl.source import SOURCE_SECURITY_KEYS, SourceSecurity, parse_source_security
from pylog.timestamps import epoch_ms

# Payload types a JSON schema may declare, by the name used in loader.yaml.
SCHEMA_TYPES = ("string", "int32", "int64", "float32", "float64", "bool", "timestamp", "date")
FORMATS = ("json", "raw")
PARTITIONINGS = (("dt",), ("dt", "hr"))
RETENTION_POLICIES = ("fail", "earliest")
RESERVED_COLUMNS = ("_topic", "_partition", "_offset", "_timestamp", "_key", "dt", "hr")


@dataclass(frozen=True, slots=True)
class SourceConfig:
    bootstrap_servers: tuple[str, ...]
    """host:port of brokers to ask for metadata (empty: the Airflow connection's)."""
    client_id: str = "pylog-loader"
    """Client id sent with every request."""
    request_timeout_ms: int = 30000
    """How long one request may take."""
    fetch_max_bytes: int = 8 * 1024 * 1024
    """max_bytes of each fetch request."""
    security: SourceSecurity = SourceSecurity()
    """Security settings and where the secrets are read from: references only, resolved
    by :func:`pylog.etl.source.resolve_source` where a client is made."""


@dataclass(frozen=True, slots=True)
class NewPartitionPolicy:
    """Where a partition with no committed offset starts: earliest, latest or a timestamp."""

    kind: str
    timestamp_ms: int | None = None


@dataclass(frozen=True, slots=True)
class TopicConfig:
    topic: str
    """The topic to load."""
    table: str
    """The table (directory under the warehouse) it lands in."""
    format: str = "json"
    """json: payload columns from a declared schema; raw: a binary ``value`` column."""
    schema: tuple[tuple[str, str], ...] = ()
    """(column, type) pairs for json payloads, in column order."""
    event_time_field: str | None = None
    """Payload field giving the event time; None means the log timestamp."""
    max_event_lateness_seconds: float = 3600.0
    """With a field event time: how far a record's log timestamp may be from its event time
    (a backfill reads this much more log on each side of its window)."""
    partitioning: tuple[str, ...] = ("dt", "hr")
    """Hive partition columns, from the event time in UTC."""
    new_partitions: NewPartitionPolicy = NewPartitionPolicy("earliest")
    """Start of a partition seen for the first time."""
    on_retention_gap: str = "fail"
    """fail, or earliest: skip records retention deleted and record the gap."""
    max_bad_records: int = 1000
    """A run fails when it quarantines more records than this ..."""
    max_bad_ratio: float = 0.01
    """... or a larger share of the records it fetched than this."""
    max_records_per_task: int = 1_000_000
    """Offset ranges longer than this are split into several tasks."""
    target_file_mb: float = 128.0
    """A task (and compaction) starts a new file in a table partition once the current one
    holds about this much compressed Parquet."""
    row_group_mb: float = 32.0
    """Rows are buffered per table partition up to about this much Arrow memory, then
    written as one row group: what bounds a task's memory, whatever its range."""
    consumer_group: str | bool = True
    """After each scheduled commit, the committed offsets are also committed to this
    consumer group (True: ``pylog-loader.<table>``; False: not published), for lag tools."""

    @property
    def progress_group(self) -> str | None:
        """The consumer group the loader publishes its offsets to, or None."""
        if self.consumer_group is True:
            return f"pylog-loader.{self.table}"
        return self.consumer_group or None

    @property
    def quarantine_table(self) -> str:
        return f"{self.table}_quarantine"


@dataclass(frozen=True, slots=True)
class CompactionConfig:
    """The ``compaction:`` section: when the DAG compacts, and what (see pylog.etl.compact)."""

    after_load: bool = True
    """The scheduled DAG's compact task runs after the audit (False: it is skipped)."""
    older_than_seconds: float | None = 7200.0
    """Only partitions whose hour (or day) ended at least this long ago; None: every one."""
    lock_wait_seconds: float = 600.0
    """How long a compaction waits for a run holding the table lock before giving up."""


@dataclass(frozen=True, slots=True)
class LoaderConfig:
    source: SourceConfig
    warehouse: str
    """URI of the directory holding the tables."""
    state: str
    """URI of the state store (plans, markers, offsets, audits, locks)."""
    topics: tuple[TopicConfig, ...]
    lock_timeout_seconds: float = 300.0
    """A table lock whose heartbeat is older than this belongs to a dead run."""
    state_retention_days: float = 30.0
    """Plans, done markers and audit entries of runs committed longer ago are deleted."""
    progress_seconds: float = 10.0
    """How often a load prints a progress line while its tasks run (not on a terminal)."""
    path: str | None = field(default=None, compare=False)
    """The file this was read from, if any."""
    compaction: CompactionConfig = CompactionConfig()
    """The ``compaction:`` section."""

    def topic(self, name: str) -> TopicConfig:
        for topic in self.topics:
            if topic.topic == name:
                return topic
        raise ConfigError("topics", f"no topic {name!r} in the configuration")

    def select(self, names: list[str] | None) -> tuple[TopicConfig, ...]:
        """The configured topics named in ``names`` (all when None), in config order."""
        if not names:
            return self.topics
        for name in names:
            self.topic(name)
        return tuple(t for t in self.topics if t.topic in names)


def load_config(path: str | os.PathLike) -> LoaderConfig:
    """Read and validate a loader.yaml file. Raises ConfigError naming the bad key."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(str(path), f"cannot read the configuration file: {exc.strerror}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(str(path), f"not valid YAML: {exc}") from None
    config = parse_config(raw)
    return LoaderConfig(config.source, config.warehouse, config.state, config.topics,
                        config.lock_timeout_seconds, config.state_retention_days,
                        progress_seconds=config.progress_seconds, path=str(path),
                        compaction=config.compaction)


def parse_config(raw: Any) -> LoaderConfig:
    """Validate an already parsed mapping (as from YAML). Raises ConfigError."""
    root = _mapping(raw, "(top level)")
    _no_unknown(root, "", {"source", "warehouse", "state", "topics", "lock_timeout_seconds",
                           "state_retention_days", "progress_seconds", "compaction"})
    source = _parse_source(_mapping(_required(root, "source", ""), "source"))
    warehouse = _uri(_required(root, "warehouse", ""), "warehouse")
    state = _uri(_required(root, "state", ""), "state")
    lock_timeout = _number(root.get("lock_timeout_seconds", 300), "lock_timeout_seconds", minimum=1)
    retention_days = _number(root.get("state_retention_days", 30), "state_retention_days", minimum=1)
    progress_seconds = _number(root.get("progress_seconds", 10), "progress_seconds", minimum=0.05)
    topics_raw = _mapping(_required(root, "topics", ""), "topics")
    if not topics_raw:
        raise ConfigError("topics", "at least one topic is required")
    topics = tuple(_parse_topic(str(name), _mapping(spec, f"topics.{name}"))
                   for name, spec in topics_raw.items())
    tables: dict[str, str] = {}
    for topic in topics:
        for table in (topic.table, topic.quarantine_table):
            if table in tables:
                raise ConfigError(f"topics.{topic.topic}.table",
                                  f"table {table!r} is already used by topic {tables[table]!r}; "
                                  "each topic lands in its own table")
            tables[table] = topic.topic
    compaction = _parse_compaction(_mapping(root.get("compaction"), "compaction"))
    return LoaderConfig(source, warehouse, state, topics, float(lock_timeout), float(retention_days),
                        progress_seconds=float(progress_seconds), compaction=compaction)


def _parse_compaction(raw: dict) -> CompactionConfig:
    _no_unknown(raw, "compaction", {"after_load", "older_than", "lock_wait_seconds"})
    after_load = raw.get("after_load", True)
    if not isinstance(after_load, bool):
        raise ConfigError("compaction.after_load", f"{after_load!r} is not true or false")
    older_than = raw.get("older_than", "2h")
    older_than_s = None if older_than is None else parse_duration_seconds(older_than, "compaction.older_than")
    wait = _number(raw.get("lock_wait_seconds", 600), "compaction.lock_wait_seconds", minimum=0)
    return CompactionConfig(after_load, older_than_s, float(wait))


_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration_seconds(value: Any, key: str) -> float:
    """``90s``, ``30m``, ``2h``, ``1d`` or a number of seconds -> seconds; ConfigError naming ``key``."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    text = str(value).strip().lower()
    number, unit = (text[:-1], text[-1]) if text[-1:] in _DURATION_UNITS else (text, "s")
    try:
        seconds = float(number) * _DURATION_UNITS[unit]
    except ValueError:
        seconds = -1.0
    if not number or seconds < 0 or seconds != seconds:
        raise ConfigError(key, f"{value!r} is not a duration such as 90s, 30m, 2h or 1d")
    return seconds


def _parse_source(raw: dict) -> SourceConfig:
    _no_unknown(raw, "source", {"bootstrap_servers", "client_id", "request_timeout_ms", "fetch_max_bytes",
                                *SOURCE_SECURITY_KEYS})
    security = parse_source_security(raw, has_bootstrap=raw.get("bootstrap_servers") is not None)
    servers = [] if security.airflow_conn_id else _required(raw, "bootstrap_servers", "source")
    if isinstance(servers, str):
        servers = [s.strip() for s in servers.split(",") if s.strip()]
    if not isinstance(servers, list) or (not servers and not security.airflow_conn_id):
        raise ConfigError("source.bootstrap_servers", "expected host:port or a list of them")
    for server in servers:
        host, _, port = str(server).rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError("source.bootstrap_servers", f"{server!r} is not host:port")
    return SourceConfig(
        bootstrap_servers=tuple(str(s) for s in servers),
        client_id=str(raw.get("client_id", "pylog-loader")),
        request_timeout_ms=int(_number(raw.get("request_timeout_ms", 30000), "source.request_timeout_ms",
                                       minimum=1, integer=True)),
        fetch_max_bytes=int(_number(raw.get("fetch_max_bytes", 8 * 1024 * 1024), "source.fetch_max_bytes",
                                    minimum=1024, integer=True)),
        security=security)


_TOPIC_KEYS = {"table", "format", "schema", "event_time", "max_event_lateness_seconds",
               "partitioning", "new_partitions",
               "on_retention_gap", "max_bad_records", "max_bad_ratio", "max_records_per_task",
               "target_file_mb", "row_group_mb", "consumer_group"}


def _parse_topic(name: str, raw: dict) -> TopicConfig:
    key = f"topics.{name}"
    _no_unknown(raw, key, _TOPIC_KEYS)
    table = _identifier(raw.get("table", name), f"{key}.table")
    fmt = raw.get("format", "json")
    if fmt not in FORMATS:
        raise ConfigError(f"{key}.format", f"{fmt!r} is not one of {', '.join(FORMATS)}")
    schema = _parse_schema(raw.get("schema"), fmt, f"{key}.schema")
    event_field = _parse_event_time(raw.get("event_time", "log_timestamp"), schema, f"{key}.event_time")
    partitioning = raw.get("partitioning", ["dt", "hr"])
    if not isinstance(partitioning, list) or tuple(partitioning) not in PARTITIONINGS:
        raise ConfigError(f"{key}.partitioning", "expected [dt] or [dt, hr]")
    policy = raw.get("on_retention_gap", "fail")
    if policy not in RETENTION_POLICIES:
        raise ConfigError(f"{key}.on_retention_gap", f"{policy!r} is not one of fail, earliest")
    return TopicConfig(
        topic=name, table=table, format=fmt, schema=schema, event_time_field=event_field,
        max_event_lateness_seconds=float(_number(raw.get("max_event_lateness_seconds", 3600),
                                                 f"{key}.max_event_lateness_seconds", minimum=0)),
        partitioning=tuple(partitioning),
        new_partitions=_parse_new_partitions(raw.get("new_partitions", "earliest"), f"{key}.new_partitions"),
        on_retention_gap=policy,
        max_bad_records=int(_number(raw.get("max_bad_records", 1000), f"{key}.max_bad_records",
                                    minimum=0, integer=True)),
        max_bad_ratio=float(_number(raw.get("max_bad_ratio", 0.01), f"{key}.max_bad_ratio",
                                    minimum=0, maximum=1)),
        max_records_per_task=int(_number(raw.get("max_records_per_task", 1_000_000),
                                         f"{key}.max_records_per_task", minimum=1, integer=True)),
        target_file_mb=float(_number(raw.get("target_file_mb", 128), f"{key}.target_file_mb",
                                     minimum=0.01)),
        row_group_mb=float(_number(raw.get("row_group_mb", 32), f"{key}.row_group_mb", minimum=0.01)),
        consumer_group=_parse_group(raw.get("consumer_group", True), f"{key}.consumer_group"))


def _parse_group(raw: Any, key: str) -> str | bool:
    if isinstance(raw, bool):
        return raw
    if not isinstance(raw, str) or not raw.strip() or len(raw) > 249:
        raise ConfigError(key, f"{raw!r} is not a consumer group name (or true / false)")
    return raw


def _parse_schema(raw: Any, fmt: str, key: str) -> tuple[tuple[str, str], ...]:
    if fmt == "raw":
        if raw is not None:
            raise ConfigError(key, "a raw topic has no schema (its value is stored as bytes)")
        return ()
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(key, "a json topic needs a schema: a mapping of column to type")
    columns = []
    for column, type_name in raw.items():
        column = str(column)
        if column in RESERVED_COLUMNS:
            raise ConfigError(f"{key}.{column}", "this column name is reserved for the loader")
        if type_name not in SCHEMA_TYPES:
            raise ConfigError(f"{key}.{column}", f"{type_name!r} is not one of {', '.join(SCHEMA_TYPES)}")
        columns.append((column, str(type_name)))
    return tuple(columns)


def _parse_event_time(raw: Any, schema: tuple[tuple[str, str], ...], key: str) -> str | None:
    if raw == "log_timestamp":
        return None
    if isinstance(raw, str) and raw.startswith("field:"):
        name = raw[len("field:"):]
        types = dict(schema)
        if name not in types:
            raise ConfigError(key, f"field {name!r} is not in the schema")
        if types[name] not in ("timestamp", "int64"):
            raise ConfigError(key, f"field {name!r} must be a timestamp or int64 (epoch milliseconds)")
        return name
    raise ConfigError(key, f"{raw!r} is not log_timestamp or field:<name>")


def _parse_new_partitions(raw: Any, key: str) -> NewPartitionPolicy:
    if raw in ("earliest", "latest"):
        return NewPartitionPolicy(raw)
    try:
        return NewPartitionPolicy("timestamp", parse_timestamp_ms(raw))
    except ValueError:
        raise ConfigError(key, f"{raw!r} is not earliest, latest or an ISO-8601 timestamp") from None


def parse_timestamp_ms(value: Any) -> int:
    """ISO-8601 (``2026-11-20T00:00:00Z``; no zone means UTC) or a datetime -> epoch ms."""
    return epoch_ms(value)


def _mapping(raw: Any, key: str) -> dict:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(key, f"expected a mapping, got {type(raw).__name__}")
    return raw


def _required(raw: dict, name: str, parent: str) -> Any:
    if name not in raw or raw[name] is None:
        raise ConfigError(f"{parent}.{name}" if parent else name, "is required")
    return raw[name]


def _no_unknown(raw: dict, parent: str, known: set[str]) -> None:
    for name in raw:
        if name not in known:
            path = f"{parent}.{name}" if parent else str(name)
            raise ConfigError(path, f"unknown key (known: {', '.join(sorted(known))})")


def _uri(raw: Any, key: str) -> str:
    if not isinstance(raw, str) or "://" not in raw:
        raise ConfigError(key, f"{raw!r} is not a URI such as file:///path or hdfs://namenode:8020/path")
    scheme = raw.split("://", 1)[0]
    if scheme not in ("file", "hdfs", "webhdfs"):
        raise ConfigError(key, f"scheme {scheme!r} is not one of file, hdfs, webhdfs")
    return raw


def _identifier(raw: Any, key: str) -> str:
    text = str(raw)
    if not text or not all(c.isalnum() or c in "_-" for c in text) or text.startswith(("_", ".")):
        raise ConfigError(key, f"{text!r} must be letters, digits, '_' or '-' and not start with '_'")
    return text


def _number(raw: Any, key: str, minimum: float | None = None, maximum: float | None = None,
            integer: bool = False) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or (integer and not isinstance(raw, int)):
        raise ConfigError(key, f"{raw!r} is not {'an integer' if integer else 'a number'}")
    if minimum is not None and raw < minimum:
        raise ConfigError(key, f"{raw} is below the minimum {minimum}")
    if maximum is not None and raw > maximum:
        raise ConfigError(key, f"{raw} is above the maximum {maximum}")
    return raw
