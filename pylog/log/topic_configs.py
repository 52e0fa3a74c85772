"""The topic configs pylog takes, as DescribeConfigs lists them: Kafka name, data type,
one-line documentation, and the broker settings that give the default (Kafka's
``LogConfig.TopicConfigSynonyms``, finest unit first).

A topic's *overrides* are the configs set on the topic itself (CreateTopics, AlterConfigs);
every other config takes the broker's default. ``LogConfig.with_overrides`` checks them and
``LogConfig.kafka_value`` writes a value back as Kafka spells it.
"""

from __future__ import annotations

from dataclasses import dataclass

from pylog.log.config import TOPIC_CONFIG_NAMES


@dataclass(frozen=True, slots=True)
class TopicConfigKey:
    """One topic config: ``type`` is "int", "long", "boolean", "double" or "list"."""

    name: str
    type: str
    documentation: str
    broker_synonyms: tuple[str, ...]

    @property
    def is_list(self) -> bool:
        """A comma-separated list: IncrementalAlterConfigs may APPEND to it or SUBTRACT."""
        return self.type == "list"


def _key(name: str, type_name: str, documentation: str, *synonyms: str) -> TopicConfigKey:
    return TopicConfigKey(name, type_name, documentation, synonyms)


TOPIC_CONFIGS: dict[str, TopicConfigKey] = {key.name: key for key in (
    _key("cleanup.policy", "list",
         "delete (retention by time and size), compact (keep each key's newest record) "
         "or both", "log.cleanup.policy"),
    _key("compression.type", "string",
         "producer (keep the producer's codec), uncompressed, gzip, snappy, lz4 or zstd "
         "(recompress every batch to it)", "compression.type"),
    _key("compression.gzip.level", "int",
         "the level gzip recompression (compression.type gzip) uses: 1-9, -1 for the "
         "default", "compression.gzip.level"),
    _key("compression.lz4.level", "int",
         "the level lz4 recompression (compression.type lz4) uses: 1-17",
         "compression.lz4.level"),
    _key("compression.zstd.level", "int",
         "the level zstd recompression (compression.type zstd) uses: -131072-22",
         "compression.zstd.level"),
    _key("delete.retention.ms", "long",
         "how long a compacted log keeps a tombstone after its timestamp",
         "log.cleaner.delete.retention.ms"),
    _key("expose.unflushed", "boolean",
         "false: consumers see only records fsynced to disk (pylog's own)",
         "log.flush.expose.unflushed"),
    _key("file.delete.delay.ms", "long",
         "Kafka's wait before removing a deleted segment; pylog removes it at once (readers "
         "keep their open file)", "log.segment.delete.delay.ms"),
    _key("flush.messages", "long", "fsync after this many records (-1: leave it to the OS)",
         "log.flush.interval.messages"),
    _key("flush.ms", "long", "fsync when the last flush is older than this (-1: never)",
         "log.flush.interval.ms"),
    _key("index.interval.bytes", "int", "log bytes between two offset index entries",
         "log.index.interval.bytes"),
    _key("follower.replication.throttled.replicas", "list",
         "partition:broker pairs, or *: those brokers fetch those partitions as out-of-sync "
         "followers within follower.replication.throttled.rate"),
    _key("leader.replication.throttled.replicas", "list",
         "partition:broker pairs, or *: those brokers, leading those partitions, send them "
         "to out-of-sync followers within leader.replication.throttled.rate"),
    _key("max.compaction.lag.ms", "long",
         "compact records at most this long after they are written, whatever the dirty "
         "ratio", "log.cleaner.max.compaction.lag.ms"),
    _key("max.message.bytes", "int", "largest record batch accepted, in bytes",
         "message.max.bytes"),
    _key("message.format.version", "string",
         "Kafka's record format version; ignored, as Kafka 3.x ignores it: records are "
         "always v2", "log.message.format.version"),
    _key("message.timestamp.after.max.ms", "long",
         "with CreateTime, refuse records timestamped more than this ahead of the broker's "
         "clock", "log.message.timestamp.after.max.ms"),
    _key("message.timestamp.before.max.ms", "long",
         "with CreateTime, refuse records timestamped more than this before the broker's "
         "clock", "log.message.timestamp.before.max.ms"),
    _key("message.timestamp.difference.max.ms", "long",
         "Kafka's older bound both ways (deprecated): applies where before.max.ms or "
         "after.max.ms is unset", "log.message.timestamp.difference.max.ms"),
    _key("message.timestamp.type", "string",
         "CreateTime (the producer's timestamps) or LogAppendTime (the broker's clock at "
         "append)", "log.message.timestamp.type"),
    _key("min.cleanable.dirty.ratio", "double",
         "compact once the uncleaned bytes are at least this share of the log",
         "log.cleaner.min.cleanable.ratio"),
    _key("min.compaction.lag.ms", "long", "records younger than this are not compacted yet",
         "log.cleaner.min.compaction.lag.ms"),
    _key("min.insync.replicas", "int",
         "acks=all produces need at least this many in-sync replicas", "min.insync.replicas"),
    _key("preallocate", "boolean",
         "Kafka preallocates new segment files; pylog's grow as written (taken, no effect)",
         "log.preallocate"),
    _key("retention.bytes", "long",
         "delete the oldest segments while a partition is larger than this (-1: no limit)",
         "log.retention.bytes"),
    _key("retention.ms", "long", "delete segments older than this (-1: keep forever)",
         "log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    _key("segment.bytes", "int", "roll to a new segment at this size", "log.segment.bytes"),
    _key("segment.index.bytes", "int", "largest offset and time index of a segment",
         "log.index.size.max.bytes"),
    _key("segment.jitter.ms", "long",
         "roll each segment up to this much (drawn at random) before segment.ms",
         "log.roll.jitter.ms", "log.roll.jitter.hours"),
    _key("segment.ms", "long", "roll when the active segment's first record is this old",
         "log.roll.ms", "log.roll.hours"),
    _key("unclean.leader.election.enable", "boolean",
         "let an out-of-sync replica lead when no in-sync one is alive",
         "unclean.leader.election.enable"),
)}

assert set(TOPIC_CONFIGS) == set(TOPIC_CONFIG_NAMES), "every log config needs an entry here"
