"""Frozen values the client returns, and the client's own error type."""

from __future__ import annotations

from dataclasses import dataclass

from pylog.errors import OffsetOutOfRangeError
from pylog.protocol.configs import ConfigSource, ConfigType
from pylog.records import Record


@dataclass(frozen=True, slots=True)
class FetchResult:
    """Decoded records of one partition from one fetch.

    ``next_offset`` is where the next fetch should start: the offset after the last
    complete batch returned (after the last record, and past any control batch), or the
    requested offset when nothing came back.
    """

    topic: str
    partition: int
    records: list[Record]
    high_watermark: int
    log_start_offset: int
    next_offset: int


@dataclass(frozen=True, slots=True)
class RawFetchResult:
    """Undecoded fetch result: back-to-back v2 batches, the last one possibly partial.

    With read_committed, batches of aborted transactions come back empty (same offsets,
    no records) and the records end at ``last_stable_offset``.
    """

    topic: str
    partition: int
    records: bytes
    high_watermark: int
    log_start_offset: int
    last_stable_offset: int = -1


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where a produced record landed. ``offset`` is -1 with acks=0 (nobody tells us)."""

    topic: str
    partition: int
    offset: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class PartitionDescription:
    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    partitions: list[PartitionDescription]


class OffsetOutOfRange(OffsetOutOfRangeError):
    """A fetch asked for an offset outside ``[log_start_offset, high_watermark]``."""

    def __init__(self, topic: str, partition: int, offset: int, log_start_offset: int,
                 high_watermark: int) -> None:
        super().__init__(
            f"offset {offset} is out of range for {topic}-{partition}: valid offsets are "
            f"{log_start_offset} to {high_watermark} (log start offset to high watermark)")
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.high_watermark = high_watermark


@dataclass(frozen=True, slots=True)
class PartitionReassignmentState:
    """A partition being moved: its replicas now, and which are being added and removed."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    """One source a config's value could come from, in precedence order (DescribeConfigs)."""

    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One config of a topic or broker as DescribeConfigs describes it.

    ``value`` is None for a sensitive config or one without a value; ``source`` says where
    the value comes from (DYNAMIC_TOPIC_CONFIG: set on the topic). ``documentation`` is
    None unless asked for.
    """

    name: str
    value: str | None
    source: ConfigSource
    is_sensitive: bool
    read_only: bool
    synonyms: tuple[ConfigSynonym, ...] = ()
    config_type: ConfigType = ConfigType.UNKNOWN
    documentation: str | None = None

    @property
    def is_dynamic(self) -> bool:
        """Set at run time on the resource (a topic override), not a broker's default."""
        return self.source in (ConfigSource.DYNAMIC_TOPIC_CONFIG,
                               ConfigSource.DYNAMIC_BROKER_CONFIG,
                               ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
