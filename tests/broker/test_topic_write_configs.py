"""The topic configs that change what a log writes, on a real broker, seen by clients
nobody here wrote: timestamps and compression.

``message.timestamp.type=LogAppendTime``: the broker stamps each batch it appends with
its clock; librdkafka's delivery reports and consumers, kafka-python's consumer and
ListOffsets by time all see that time. ``message.timestamp.before.max.ms`` and
``after.max.ms``: a CreateTime topic refuses records timestamped too far from the
broker's clock with INVALID_TIMESTAMP, naming the records, and writes nothing of them.
``compression.type``: a codec other than ``producer`` recompresses every batch in another
codec before it is written, keeping its records, producer fields and sequence.
"""

from __future__ import annotations

import random
import time

import pytest
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Consumer, KafkaError, KafkaException,
    Producer, TopicPartition)
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaPythonPartition

from pylog.protocol import ApiKey
from pylog.records import build_batch, decode_batch, iter_batch_headers, iter_batches
from pylog.records.compression import Compression
from tests.broker.wire import WireClient, fetch_body, produce_body

INVALID_TIMESTAMP = 32
MESSAGE_TOO_LARGE = 10
HOUR_MS = 3600_000


def now_ms() -> int:
    return int(time.time() * 1000)


def create(broker, topic: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, config=configs)])[topic].result(30)


def produce(broker, topic: str, timestamps: list[int]) -> list:
    """One message per timestamp; the delivery reports, in order, as (error code,
    (timestamp type, timestamp), offset)."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    reports = []
    for i, timestamp in enumerate(timestamps):
        producer.produce(topic, b"v%d" % i, partition=0, timestamp=timestamp,
                         on_delivery=lambda err, msg: reports.append(
                             (err and err.code(), msg.timestamp(), msg.offset())))
    assert producer.flush(30) == 0
    return reports


def consume(broker, topic: str, count: int) -> list:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"ts-{topic}",
                         "auto.offset.reset": "earliest", "check.crcs": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got, deadline = [], time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None:
            assert msg.error() is None, msg.error()
            got.append((msg.offset(), msg.timestamp()))
    consumer.close()
    return got


def test_log_append_time_replaces_the_producers_timestamps(broker):
    create(broker, "ts-append", **{"message.timestamp.type": "LogAppendTime"})
    before = now_ms()
    reports = produce(broker, "ts-append", [1000, 2000, 3000])
    after = now_ms()
    assert [error for error, _, _ in reports] == [None] * 3
    stamps = {timestamp for _, timestamp, _ in reports}
    assert len(stamps) == 1  # one batch, one append time
    kind, stamp = stamps.pop()
    assert kind == TIMESTAMP_LOG_APPEND_TIME and before <= stamp <= after
    # librdkafka checks each batch's CRC: the stamped batch must have a new one.
    assert consume(broker, "ts-append", 3) == [(offset, (TIMESTAMP_LOG_APPEND_TIME, stamp))
                                               for offset in range(3)]
    kafka_python = KafkaConsumer(bootstrap_servers=broker.bootstrap,
                                 auto_offset_reset="earliest", check_crcs=True)
    kafka_python.assign([KafkaPythonPartition("ts-append", 0)])
    records, deadline = [], time.monotonic() + 30
    while len(records) < 3 and time.monotonic() < deadline:
        for batch in kafka_python.poll(timeout_ms=500).values():
            records.extend(batch)
    assert [(r.offset, r.timestamp_type, r.timestamp) for r in records] == [
        (offset, 1, stamp) for offset in range(3)]
    # ListOffsets by time finds the records by their append time, not their create time.
    found = kafka_python.offsets_for_times({KafkaPythonPartition("ts-append", 0): 1500})
    assert found[KafkaPythonPartition("ts-append", 0)].offset == 0
    kafka_python.close()


def test_altering_the_type_stamps_only_later_appends(broker):
    create(broker, "ts-altered")
    created = produce(broker, "ts-altered", [1234])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource("topic", "ts-altered", incremental_configs=[ConfigEntry(
        "message.timestamp.type", "LogAppendTime",
        incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    before = now_ms()
    stamped = produce(broker, "ts-altered", [1234])
    assert created[0][1] == (TIMESTAMP_CREATE_TIME, 1234)
    kind, stamp = stamped[0][1]
    assert kind == TIMESTAMP_LOG_APPEND_TIME and stamp >= before
    assert consume(broker, "ts-altered", 2) == [(0, (TIMESTAMP_CREATE_TIME, 1234)),
                                                (1, (TIMESTAMP_LOG_APPEND_TIME, stamp))]


def test_records_outside_the_timestamp_window_are_refused(broker):
    create(broker, "ts-window", **{"message.timestamp.before.max.ms": str(HOUR_MS),
                                   "message.timestamp.after.max.ms": "60000"})
    now = now_ms()
    too_old, too_new = now - 2 * HOUR_MS, now + 10 * 60000
    reports = [produce(broker, "ts-window", [timestamp])[0]
               for timestamp in (too_old, now, too_new, now - HOUR_MS // 2)]
    assert [error for error, _, _ in reports] == [
        KafkaError.INVALID_TIMESTAMP, None, KafkaError.INVALID_TIMESTAMP, None]
    assert [offset for _, _, offset in reports] == [None, 0, None, 1]
    # A batch with one bad record among good ones: the record is named, nothing written.
    with WireClient(broker.bootstrap) as wire:
        now = now_ms()
        records = build_batch([(None, b"a", (), now), (None, b"b", (), now - 3 * HOUR_MS),
                               (None, b"c", (), now)])
        answer = wire.call(ApiKey.PRODUCE, 8, produce_body("ts-window", {0: records}))
        result = answer["responses"][0]["partition_responses"][0]
        assert result["error_code"] == INVALID_TIMESTAMP
        assert [e["batch_index"] for e in result["record_errors"]] == [1]
        assert "message.timestamp.before.max.ms" in result["error_message"]
        fetched = wire.call(ApiKey.FETCH, 11, fetch_body("ts-window", {0: 0}))
        assert fetched["responses"][0]["partitions"][0]["high_watermark"] == 2


def test_the_older_difference_bound_applies_where_its_own_bound_is_unset(broker):
    # Kafka 3.6-3.9: message.timestamp.difference.max.ms bounds a side whose
    # before/after.max.ms is unset; here the past (before.max.ms is unset), not the future.
    create(broker, "ts-difference", **{"message.timestamp.difference.max.ms": str(HOUR_MS),
                                       "message.timestamp.after.max.ms": str(24 * HOUR_MS)})
    now = now_ms()
    reports = [produce(broker, "ts-difference", [timestamp])[0] for timestamp in (
        now - 2 * HOUR_MS, now - HOUR_MS // 2, now + 2 * HOUR_MS, now + 25 * HOUR_MS)]
    assert [error for error, _, _ in reports] == [
        KafkaError.INVALID_TIMESTAMP, None, None, KafkaError.INVALID_TIMESTAMP]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    described = ConfigResource("topic", "ts-difference")
    entries = admin.describe_configs([described])[described].result(30)
    assert entries["message.timestamp.difference.max.ms"].value == str(HOUR_MS)
    assert entries["message.timestamp.before.max.ms"].is_default


def fetched_batches(broker, topic: str) -> list:
    """(base offset, codec, record count) of every batch of partition 0."""
    with WireClient(broker.bootstrap) as wire:
        answer = wire.call(ApiKey.FETCH, 11, fetch_body(topic, {0: 0}))
    records = answer["responses"][0]["partitions"][0]["records"]
    return [(h.base_offset, h.compression, h.records_count)
            for _, h in iter_batch_headers(records)]


def test_compression_type_recompresses_every_other_codec(broker):
    create(broker, "zstd-topic", **{"compression.type": "zstd"})
    sent = []
    for codec in ("gzip", "none", "zstd", "snappy"):
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50,
                             "compression.type": codec, "enable.idempotence": True})
        values = [b"%s-%d " % (codec.encode(), i) * 20 for i in range(50)]
        for value in values:
            producer.produce("zstd-topic", value, key=value[:8], partition=0)
        assert producer.flush(30) == 0
        sent += values
    batches = fetched_batches(broker, "zstd-topic")
    assert {codec for _, codec, _ in batches} == {Compression.ZSTD}
    assert sum(count for _, _, count in batches) == len(sent)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "zstd-topic",
                         "check.crcs": True})
    consumer.assign([TopicPartition("zstd-topic", 0, 0)])
    got, deadline = [], time.monotonic() + 30
    while len(got) < len(sent) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None:
            assert msg.error() is None, msg.error()
            got.append(msg.value())
    consumer.close()
    assert got == sent


def test_uncompressed_topics_check_the_size_after_decompressing(broker):
    create(broker, "plain-topic", **{"compression.type": "uncompressed"})
    with WireClient(broker.bootstrap) as wire:
        small = build_batch([(None, b"s" * 1000, (), now_ms())], compression=Compression.LZ4)
        # 300 KB of zeros compress to a few hundred bytes, over message.max.bytes (200000)
        # once written uncompressed: refused, as Kafka refuses it.
        large = build_batch([(None, bytes(300_000), (), now_ms())], compression=Compression.ZSTD)
        for records, error in ((small, 0), (large, MESSAGE_TOO_LARGE)):
            answer = wire.call(ApiKey.PRODUCE, 8, produce_body("plain-topic", {0: records}))
            assert answer["responses"][0]["partition_responses"][0]["error_code"] == error
    assert fetched_batches(broker, "plain-topic") == [(0, Compression.NONE, 1)]


def wordy_values(count: int) -> list[bytes]:
    """Text-like values: a higher compression level finds more in them than a lower one."""
    rng = random.Random(7)
    words = [bytes(rng.choices(b"abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 9)))
             for _ in range(300)]
    return [b" ".join(rng.choices(words, k=60)) for _ in range(count)]


def fetched(broker, topic: str) -> list[tuple[int, int, int, list[bytes]]]:
    """(base offset, codec, batch size, values) of every batch of partition 0, read over
    the wire."""
    with WireClient(broker.bootstrap) as wire:
        answer = wire.call(ApiKey.FETCH, 11, fetch_body(topic, {0: 0}))
    records = answer["responses"][0]["partitions"][0]["records"]
    return [(h.base_offset, h.compression, h.size,
             [r.value for r in decode_batch(records[position:position + h.size]).records])
            for position, h in iter_batches(records)]


@pytest.mark.parametrize("codec, low, high", [
    ("gzip", "1", "9"), ("lz4", "1", "17"), ("zstd", "-20", "19")])
def test_compression_levels_set_how_hard_the_broker_recompresses(broker, codec, low, high):
    values = wordy_values(300)
    batch = build_batch([(None, v, (), now_ms()) for v in values])  # uncompressed
    sizes = {}
    for level in (low, high):
        topic = f"level-{codec}-{level}"
        create(broker, topic, **{"compression.type": codec, f"compression.{codec}.level": level})
        with WireClient(broker.bootstrap) as wire:
            answer = wire.call(ApiKey.PRODUCE, 8, produce_body(topic, {0: batch}))
        assert answer["responses"][0]["partition_responses"][0]["error_code"] == 0
        [(_, written_codec, size, got)] = fetched(broker, topic)
        assert written_codec == Compression[codec.upper()] and got == values
        sizes[level] = size
    assert sizes[high] < sizes[low] < len(batch)


def test_altering_the_level_changes_later_appends_and_describe_shows_it(broker):
    create(broker, "level-altered", **{"compression.type": "zstd"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    described = ConfigResource("topic", "level-altered")
    entries = admin.describe_configs([described])[described].result(30)
    # Kafka's defaults, from the broker's settings of the same names.
    assert {name: entries[name].value for name in (
        "compression.gzip.level", "compression.lz4.level", "compression.zstd.level")} == {
        "compression.gzip.level": "-1", "compression.lz4.level": "9",
        "compression.zstd.level": "3"}
    assert entries["compression.zstd.level"].is_default
    values = wordy_values(300)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50,
                         "compression.type": "none"})
    for level in ("-20", "19"):
        resource = ConfigResource("topic", "level-altered", incremental_configs=[ConfigEntry(
            "compression.zstd.level", level, incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([resource])[resource].result(30)
        for value in values:
            producer.produce("level-altered", value, partition=0)
        assert producer.flush(30) == 0
    batches = fetched(broker, "level-altered")
    assert {codec for _, codec, _, _ in batches} == {Compression.ZSTD}
    assert [v for _, _, _, got in batches for v in got] == values * 2
    # offsets 0-299 were written at level -20, 300-599 at 19
    fast = sum(size for base, _, size, _ in batches if base < len(values))
    hard = sum(size for base, _, size, _ in batches if base >= len(values))
    assert hard < fast
    entries = admin.describe_configs([described])[described].result(30)
    assert entries["compression.zstd.level"].value == "19"
    assert not entries["compression.zstd.level"].is_default


def test_an_old_message_format_version_is_taken_and_changes_nothing(broker):
    # Kafka 3.x ignores message.format.version (every log is v2); librdkafka's mixed
    # message version test sets it halfway through a topic.
    create(broker, "old-format")
    first = produce(broker, "old-format", [now_ms()])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource("topic", "old-format", set_config={
        "message.format.version": "0.10.0.0"})
    admin.alter_configs([resource])[resource].result(30)
    second = produce(broker, "old-format", [now_ms()])
    assert [error for error, _, _ in first + second] == [None, None]
    entries = admin.describe_configs([resource])[resource].result(30)
    assert entries["message.format.version"].value == "0.10.0.0"
    with WireClient(broker.bootstrap) as wire:
        answer = wire.call(ApiKey.FETCH, 11, fetch_body("old-format", {0: 0}))
    records = answer["responses"][0]["partitions"][0]["records"]
    assert [h.base_offset for _, h in iter_batches(records)] == [0, 1]  # v2 batches, both
    assert len(consume(broker, "old-format", 2)) == 2


def test_kafkas_compaction_test_topic_configs_are_taken(broker):
    # The configs librdkafka's compaction test creates its topic with, through
    # kafka-topics.sh; file.delete.delay.ms and preallocate have no effect in pylog.
    configs = {"cleanup.policy": "compact", "segment.ms": "500", "segment.bytes": "1048576",
               "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "86400",
               "file.delete.delay.ms": "10000", "max.compaction.lag.ms": "100",
               "preallocate": "true"}
    create(broker, "kafka-compacted", **configs)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource("topic", "kafka-compacted")
    entries = admin.describe_configs([resource])[resource].result(30)
    assert {name: entries[name].value for name in configs} == configs
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    reports = []
    producer.produce("kafka-compacted", b"v", key=b"k", partition=0,
                     on_delivery=lambda err, msg: reports.append(err))
    assert producer.flush(30) == 0 and reports == [None]


@pytest.mark.parametrize("configs, key", [
    ({"message.timestamp.type": "ArrivalTime"}, "message.timestamp.type"),
    ({"message.timestamp.after.max.ms": "-1"}, "message.timestamp.after.max.ms"),
    ({"compression.type": "brotli"}, "compression.type"),
    ({"message.timestamp.difference.max.ms": "-5"}, "message.timestamp.difference.max.ms"),
    ({"compression.gzip.level": "0"}, "compression.gzip.level"),
    ({"message.format.version": "latest"}, "message.format.version"),
    ({"file.delete.delay.ms": "-1"}, "file.delete.delay.ms"),
    ({"preallocate": "yes"}, "preallocate"),
    ({"compression.lz4.level": "18"}, "compression.lz4.level"),
    ({"compression.zstd.level": "23"}, "compression.zstd.level"),
])
def test_a_bad_write_config_is_refused_naming_the_key(broker, configs, key):
    with pytest.raises(KafkaException) as refused:
        create(broker, "ts-bad", **configs)
    error = refused.value.args[0]
    assert error.code() == KafkaError.INVALID_CONFIG and key in error.str()
