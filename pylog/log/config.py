"""Per-partition log configuration: how segments roll, when data is flushed, deleted or
compacted, and the topic configs replication reads (``min.insync.replicas``, unclean election).

Field names follow Kafka's topic configs (``segment.bytes`` -> ``segment_bytes``);
:meth:`LogConfig.with_overrides` accepts the Kafka spelling, so topic configs from
CreateTopics or ``server.properties`` map onto it directly.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Mapping

from pylog.errors import ConfigError
from pylog.records.compression import (
    GZIP_DEFAULT_LEVEL, GZIP_LEVELS, LZ4_DEFAULT_LEVEL, LZ4_LEVELS, ZSTD_DEFAULT_LEVEL,
    ZSTD_LEVELS, Compression)

DAY_MS = 24 * 3600 * 1000
MAX_SEGMENT_BYTES = 2**31 - 1  # positions in the offset index are int32
MAX_LONG = 2**63 - 1  # Kafka's Long.MAX_VALUE: "no bound" for the timestamp checks
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
# compression.type: "producer" keeps each batch's codec; any other recompresses to it.
_KAFKA_VERSION = re.compile(r"^\d+(\.\d+){1,3}(-IV\d+)?$")
COMPRESSION_TYPES = {"producer": None, "uncompressed": Compression.NONE,
                     "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
                     "lz4": Compression.LZ4, "zstd": Compression.ZSTD}


@dataclass(frozen=True, slots=True)
class LogConfig:
    """How one partition log rolls, flushes and retains its segments.

    Example::

        cfg = LogConfig(segment_bytes=64 << 20, retention_ms=3600_000, flush_messages=1)

    Raises ConfigError (naming the field) for an invalid value.
    """

    segment_bytes: int = 1 << 30
    """Roll to a new segment when the active one would grow past this many bytes."""
    segment_ms: int = 7 * DAY_MS
    """Roll when the first batch of the active segment is older than this (ms)."""
    segment_jitter_ms: int = 0
    """Each segment rolls up to this much (ms, drawn at random per segment) before
    ``segment_ms``, so the partitions of topics created together do not all roll at once."""
    segment_index_bytes: int = 10 * 1024 * 1024
    """Maximum size of each segment's index files; a full index rolls the segment."""
    index_interval_bytes: int = 4096
    """Add an offset-index entry (and maybe a time-index entry) after this many log bytes."""
    flush_messages: int | None = None
    """fsync after this many records since the last flush (None: leave it to the OS)."""
    flush_ms: int | None = None
    """fsync when the last flush is older than this (ms), checked by LogManager (None: never)."""
    retention_ms: int | None = 7 * DAY_MS
    """Delete segments whose newest record is older than this (ms); None keeps them forever."""
    retention_bytes: int | None = None
    """Delete the oldest segments while the log is larger than this; None means no limit."""
    expose_unflushed: bool = True
    """Let readers see appended data before it is fsynced; False caps reads at the flushed offset."""
    max_batch_size: int = 1048588
    """Largest record batch accepted, in bytes including its 12-byte log overhead."""
    min_insync_replicas: int = 1
    """With acks=all, refuse a produce while fewer replicas than this are in sync."""
    unclean_leader_election: bool = False
    """Let a replica outside the in-sync set become leader (may lose committed records)."""
    cleanup_policy: str = "delete"
    """``delete`` (retention by time and size), ``compact`` (the cleaner keeps the last record
    of each key) or ``compact,delete`` (both)."""
    min_cleanable_dirty_ratio: float = 0.5
    """Clean a compacted log once its uncleaned bytes are at least this share of the log."""
    min_compaction_lag_ms: int = 0
    """Records younger than this (ms, by segment's newest timestamp) are not compacted yet."""
    delete_retention_ms: int = DAY_MS
    """A compacted log keeps a tombstone (null value) this long (ms) after its timestamp."""
    max_compaction_lag_ms: int = MAX_LONG
    """A compacted log's records stay uncompacted at most about this long (ms): the active
    segment rolls by then, and a log whose oldest dirty segment began longer ago is cleaned
    whatever its dirty ratio (Kafka's KIP-354). MAX_LONG: no bound."""
    timestamp_type: str = "CreateTime"
    """``CreateTime``: records keep the producer's timestamps; ``LogAppendTime``: the log
    stamps each batch it appends with its own clock (every record then has that time)."""
    timestamp_before_max_ms: int = MAX_LONG
    """With CreateTime, refuse a record whose timestamp is more than this (ms) before the
    broker's clock (INVALID_TIMESTAMP); MAX_LONG: no bound."""
    timestamp_after_max_ms: int = MAX_LONG
    """As ``timestamp_before_max_ms``, for a timestamp ahead of the broker's clock."""
    timestamp_difference_max_ms: int = MAX_LONG
    """Kafka's older bound both ways (deprecated there since 3.6): it applies on the side
    whose own bound (``timestamp_before_max_ms``, ``timestamp_after_max_ms``) is unset."""
    compression_type: str = "producer"
    """``producer``: batches keep the codec their producer chose; ``uncompressed``,
    ``gzip``, ``snappy``, ``lz4`` or ``zstd``: the log recompresses every batch in another
    codec to this one before writing it."""
    message_format_version: str = "3.0-IV1"
    """Kafka's record format for the topic. Kafka 3.x ignores it (from inter-broker protocol
    3.0 on every log is in the v2 format) and so does pylog; it is kept so topic configs
    written for older brokers are taken. A Kafka version (``0.10.0``, ``2.8-IV1``)."""
    file_delete_delay_ms: int = 60000
    """Kafka waits this long before removing a deleted segment's files, for readers still
    on them. pylog removes them at once: a reader holds its own file descriptor, which
    keeps working after the unlink. Taken so Kafka's topic configs are."""
    preallocate: bool = False
    """Kafka preallocates each new segment file to ``segment_bytes`` when true. pylog's
    segment files grow as they are written; taken so Kafka's topic configs are."""
    compression_gzip_level: int = GZIP_DEFAULT_LEVEL
    """The level of gzip recompression: 1-9, or -1 for zlib's default (6)."""
    compression_lz4_level: int = LZ4_DEFAULT_LEVEL
    """The level of lz4 recompression: 1-17."""
    compression_zstd_level: int = ZSTD_DEFAULT_LEVEL
    """The level of zstd recompression: -131072-22."""
    leader_replication_throttled_replicas: str = ""
    """``partition:broker`` pairs, or ``*``: a broker named for a partition sends it to
    out-of-sync followers within its ``leader.replication.throttled.rate`` (KIP-73)."""
    follower_replication_throttled_replicas: str = ""
    """As ``leader_replication_throttled_replicas``, for the brokers that fetch the
    partition as out-of-sync followers within ``follower.replication.throttled.rate``."""

    # Derived in __post_init__, read on every append.
    log_append_time: bool = field(init=False, repr=False, compare=False)
    """The log stamps appended batches with its clock (``message.timestamp.type``)."""
    before_bound_ms: int = field(init=False, repr=False, compare=False)
    """How far before the broker's clock a CreateTime record may be: the before bound, or
    the difference bound when the before bound is unset (as Kafka 3.6-3.9 resolve them)."""
    after_bound_ms: int = field(init=False, repr=False, compare=False)
    """As ``before_bound_ms``, ahead of the broker's clock."""
    checks_timestamps: bool = field(init=False, repr=False, compare=False)
    """Producers' record timestamps are checked against the broker's clock: CreateTime
    with a ``message.timestamp.before.max.ms`` or ``after.max.ms`` bound."""
    codec: Compression | None = field(init=False, repr=False, compare=False)
    """The codec every batch is written in (``compression.type``); None: the producer's."""
    codec_level: int | None = field(init=False, repr=False, compare=False)
    """The level ``codec`` compresses at (``compression.<codec>.level``); None: snappy's."""
    roll_ms: int = field(init=False, repr=False, compare=False)
    """Roll when the active segment's first record is this old: ``segment_ms``, or for a
    compacted log ``max_compaction_lag_ms`` if sooner (its records must become cleanable)."""

    def __post_init__(self) -> None:
        _check_range("segment_bytes", self.segment_bytes, 128, MAX_SEGMENT_BYTES)
        _check_range("segment_ms", self.segment_ms, 1, None)
        _check_range("segment_jitter_ms", self.segment_jitter_ms, 0, None)
        _check_range("segment_index_bytes", self.segment_index_bytes, 12, MAX_SEGMENT_BYTES)
        _check_range("index_interval_bytes", self.index_interval_bytes, 0, None)
        _check_optional("flush_messages", self.flush_messages, 1)
        _check_optional("flush_ms", self.flush_ms, 0)
        _check_optional("retention_ms", self.retention_ms, 0)
        _check_optional("retention_bytes", self.retention_bytes, 0)
        _check_range("max_batch_size", self.max_batch_size, 61, None)
        _check_range("min_insync_replicas", self.min_insync_replicas, 1, None)
        if self.cleanup_policy not in CLEANUP_POLICIES:
            raise ConfigError("cleanup_policy", f"expected delete, compact or compact,delete, "
                                                f"got {self.cleanup_policy!r}")
        if (isinstance(self.min_cleanable_dirty_ratio, bool)
                or not isinstance(self.min_cleanable_dirty_ratio, (int, float))
                or not 0 <= self.min_cleanable_dirty_ratio <= 1):
            raise ConfigError("min_cleanable_dirty_ratio",
                              f"must be between 0 and 1, got {self.min_cleanable_dirty_ratio!r}")
        _check_range("min_compaction_lag_ms", self.min_compaction_lag_ms, 0, None)
        _check_range("delete_retention_ms", self.delete_retention_ms, 0, None)
        _check_range("max_compaction_lag_ms", self.max_compaction_lag_ms, 1, MAX_LONG)
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise ConfigError("max_compaction_lag_ms",
                              f"{self.max_compaction_lag_ms} is less than "
                              f"min.compaction.lag.ms {self.min_compaction_lag_ms}")
        if self.timestamp_type not in TIMESTAMP_TYPES:
            raise ConfigError("timestamp_type", f"expected CreateTime or LogAppendTime, "
                                                f"got {self.timestamp_type!r}")
        if self.compression_type not in COMPRESSION_TYPES:
            raise ConfigError("compression_type", "expected one of " + ", ".join(
                COMPRESSION_TYPES) + f", got {self.compression_type!r}")
        _check_range("compression_gzip_level", self.compression_gzip_level, -1, None)
        if self.compression_gzip_level not in GZIP_LEVELS and (
                self.compression_gzip_level != GZIP_DEFAULT_LEVEL):
            raise ConfigError("compression_gzip_level", "must be between 1 and 9, or -1 for "
                              f"the default, got {self.compression_gzip_level}")
        _check_range("compression_lz4_level", self.compression_lz4_level,
                     LZ4_LEVELS.start, LZ4_LEVELS.stop - 1)
        _check_range("compression_zstd_level", self.compression_zstd_level,
                     ZSTD_LEVELS.start, ZSTD_LEVELS.stop - 1)
        if not _KAFKA_VERSION.match(self.message_format_version):
            raise ConfigError("message_format_version", "expected a Kafka version such as "
                              f"0.10.0 or 2.8-IV1, got {self.message_format_version!r}")
        _check_range("file_delete_delay_ms", self.file_delete_delay_ms, 0, None)
        _check_range("timestamp_before_max_ms", self.timestamp_before_max_ms, 0, MAX_LONG)
        _check_range("timestamp_after_max_ms", self.timestamp_after_max_ms, 0, MAX_LONG)
        _check_range("timestamp_difference_max_ms", self.timestamp_difference_max_ms, 0,
                     MAX_LONG)
        for key in _BOOLEANS:
            if not isinstance(getattr(self, key), bool):
                raise ConfigError(key, f"expected true or false, got {getattr(self, key)!r}")
        object.__setattr__(self, "log_append_time", self.timestamp_type == "LogAppendTime")
        before, after = self.timestamp_before_max_ms, self.timestamp_after_max_ms
        object.__setattr__(self, "before_bound_ms",
                           self.timestamp_difference_max_ms if before == MAX_LONG else before)
        object.__setattr__(self, "after_bound_ms",
                           self.timestamp_difference_max_ms if after == MAX_LONG else after)
        object.__setattr__(self, "checks_timestamps", self.timestamp_type == "CreateTime" and (
            self.before_bound_ms != MAX_LONG or self.after_bound_ms != MAX_LONG))
        object.__setattr__(self, "codec", COMPRESSION_TYPES[self.compression_type])
        object.__setattr__(self, "codec_level", {
            Compression.GZIP: self.compression_gzip_level,
            Compression.LZ4: self.compression_lz4_level,
            Compression.ZSTD: self.compression_zstd_level}.get(self.codec))
        object.__setattr__(self, "roll_ms", min(self.segment_ms, self.max_compaction_lag_ms)
                           if "compact" in self.cleanup_policy else self.segment_ms)

    @property
    def compact(self) -> bool:
        """The cleaner compacts this log (``cleanup.policy`` has ``compact``)."""
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        """Retention deletes by time and size (``cleanup.policy`` has ``delete``)."""
        return "delete" in self.cleanup_policy

    def with_overrides(self, overrides: Mapping[str, object]) -> "LogConfig":
        """Return a copy with Kafka topic configs applied (``{"retention.ms": "3600000"}``).

        Accepts Kafka names (``segment.bytes``, ``retention.ms``, ``flush.messages`` ...) or
        field names. ``-1`` means "none" for retention and flush settings, as in Kafka.
        Raises ConfigError naming the key for an unknown key or a value that is not valid.
        """
        changes: dict[str, object] = {}
        given: dict[str, str] = {}
        for key, raw in overrides.items():
            field = _KAFKA_NAMES.get(key, key)
            if field not in _FIELD_TYPES:
                raise ConfigError(key, "not a log config")
            changes[field] = _parse_value(key, field, raw)
            given[field] = key
        try:
            return dataclasses.replace(self, **changes)
        except ConfigError as exc:
            raise ConfigError(given.get(exc.key, exc.key), exc.problem) from None

    def kafka_value(self, key: str) -> str:
        """The value of topic config ``key`` (a Kafka name) as Kafka writes it: ``-1`` for
        "none", ``true``/``false`` for booleans. ``with_overrides`` reads it back unchanged.

        >>> LogConfig(retention_ms=None).kafka_value("retention.ms")
        '-1'

        Raises ConfigError for a key that is not a log config.
        """
        field = _KAFKA_NAMES.get(key)
        if field is None:
            raise ConfigError(key, "not a log config")
        value = getattr(self, field)
        if value is None:
            return "-1"
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)


_KAFKA_NAMES = {
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "segment.jitter.ms": "segment_jitter_ms",
    "segment.index.bytes": "segment_index_bytes",
    "index.interval.bytes": "index_interval_bytes",
    "flush.messages": "flush_messages",
    "flush.ms": "flush_ms",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "max.message.bytes": "max_batch_size",
    "expose.unflushed": "expose_unflushed",
    "min.insync.replicas": "min_insync_replicas",
    "unclean.leader.election.enable": "unclean_leader_election",
    "cleanup.policy": "cleanup_policy",
    "min.cleanable.dirty.ratio": "min_cleanable_dirty_ratio",
    "min.compaction.lag.ms": "min_compaction_lag_ms",
    "delete.retention.ms": "delete_retention_ms",
    "max.compaction.lag.ms": "max_compaction_lag_ms",
    "message.timestamp.type": "timestamp_type",
    "message.timestamp.before.max.ms": "timestamp_before_max_ms",
    "message.timestamp.after.max.ms": "timestamp_after_max_ms",
    "message.timestamp.difference.max.ms": "timestamp_difference_max_ms",
    "compression.type": "compression_type",
    "message.format.version": "message_format_version",
    "file.delete.delay.ms": "file_delete_delay_ms",
    "preallocate": "preallocate",
    "compression.gzip.level": "compression_gzip_level",
    "compression.lz4.level": "compression_lz4_level",
    "compression.zstd.level": "compression_zstd_level",
    "leader.replication.throttled.replicas": "leader_replication_throttled_replicas",
    "follower.replication.throttled.replicas": "follower_replication_throttled_replicas",
}
# Every topic config a LogConfig takes, by its Kafka name.
TOPIC_CONFIG_NAMES = tuple(_KAFKA_NAMES)
# Normalised spellings; Kafka accepts the list in either order (and with spaces).
CLEANUP_POLICIES = ("delete", "compact", "compact,delete")
_FIELD_TYPES = {f.name: f.type for f in dataclasses.fields(LogConfig) if f.init}
_OPTIONAL = {"flush_messages", "flush_ms", "retention_ms", "retention_bytes"}
_BOOLEANS = ("expose_unflushed", "unclean_leader_election", "preallocate")
_THROTTLED_REPLICAS = ("leader_replication_throttled_replicas",
                       "follower_replication_throttled_replicas")


THROTTLE_ALL = "*"


@lru_cache(maxsize=1024)
def throttled_replicas(value: str) -> frozenset[tuple[int, int]] | str:
    """A ``*.replication.throttled.replicas`` value as ``{(partition, broker)}``, or ``*``.

    >>> sorted(throttled_replicas("0:101, 1:102"))
    [(0, 101), (1, 102)]
    """
    text = value.strip()
    if text == THROTTLE_ALL:
        return THROTTLE_ALL
    pairs = set()
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        partition, colon, broker = item.partition(":")
        if not colon or not partition.strip().isdigit() or not broker.strip().isdigit():
            raise ValueError(item)
        pairs.add((int(partition), int(broker)))
    return frozenset(pairs)


def parse_throttled_replicas(key: str, raw: object) -> str:
    """A topic config value checked as Kafka's ThrottledReplicaListValidator does, written
    back normalised (no spaces)."""
    text = str(raw).strip()
    try:
        pairs = throttled_replicas(text)
    except ValueError as error:
        raise ConfigError(key, f"must be the literal '*' or a list of replicas in the format "
                               f"[partitionId]:[brokerId],[partitionId]:[brokerId],...; "
                               f"{str(error)!r} is neither") from None
    if pairs == THROTTLE_ALL:
        return THROTTLE_ALL
    return ",".join(item.strip() for item in text.split(",") if item.strip())



def _parse_value(key: str, field: str, raw: object) -> object:
    if field in _THROTTLED_REPLICAS:
        return parse_throttled_replicas(key, raw)
    if field == "cleanup_policy":
        return parse_cleanup_policy(key, raw)
    if field in ("timestamp_type", "message_format_version"):
        return str(raw).strip()
    if field == "compression_type":
        return str(raw).strip().lower()
    if field == "min_cleanable_dirty_ratio":
        try:
            return float(str(raw).strip())
        except ValueError:
            raise ConfigError(key, f"expected a number, got {raw!r}") from None
    if field in _BOOLEANS:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text not in ("true", "false"):
            raise ConfigError(key, f"expected true or false, got {raw!r}")
        return text == "true"
    if raw is None and field in _OPTIONAL:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ConfigError(key, f"expected an integer, got {raw!r}") from None
    if field in _OPTIONAL and value == -1:
        return None
    return value


def _check_range(key: str, value: object, low: int, high: int | None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(key, f"expected an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise ConfigError(key, f"must be {bound}, got {value}")


def _check_optional(key: str, value: object, low: int) -> None:
    if value is not None:
        _check_range(key, value, low, None)


def parse_cleanup_policy(key: str, raw: object) -> str:
    """``"compact, delete"`` -> ``"compact,delete"``; ConfigError naming ``key`` otherwise."""
    parts = sorted({part.strip().lower() for part in str(raw).split(",") if part.strip()})
    policy = ",".join(parts)
    if policy not in CLEANUP_POLICIES:
        raise ConfigError(key, f"expected delete, compact or compact,delete, got {raw!r}")
    return policy
