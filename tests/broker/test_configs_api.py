"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs on a real standalone broker,
through confluent-kafka (librdkafka), kafka-python and pylog's own Admin.

One broker for the module; every test uses its own topics. ``log.retention.hours`` is set
so a static broker setting shows up as a source.
"""

from __future__ import annotations

import functools
import time
import warnings

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import (
    AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewTopic,
    ResourceType)

from pylog.client import Admin
from pylog.log import layout
from pylog.log.topic_configs import TOPIC_CONFIGS
from pylog.protocol.configs import ConfigType
from pylog.testing.broker import broker_fixture

RETENTION_HOURS = 48
broker = broker_fixture(scope="module", overrides={
    "num.partitions": 1, "auto.create.topics.enable": "false", "log.cleaner.backoff.ms": 50,
    "log.retention.hours": RETENTION_HOURS})

INVALID_CONFIG = KafkaError.INVALID_CONFIG
INVALID_REQUEST = KafkaError.INVALID_REQUEST
TIMEOUT = 15


@functools.lru_cache(maxsize=None)
def _admin_client(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def admin_client(broker) -> AdminClient:
    """One client per broker, kept: librdkafka fails the futures of a dropped client."""
    return _admin_client(broker.bootstrap)


def create(broker, topic: str, **configs: str) -> None:
    futures = admin_client(broker).create_topics([NewTopic(
        topic, num_partitions=1, replication_factor=1,
        config={k.replace("_", "."): v for k, v in configs.items()})])
    futures[topic].result(TIMEOUT)


def describe(broker, topic: str) -> dict:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    return admin_client(broker).describe_configs([resource])[resource].result(TIMEOUT)


def overrides(broker, topic: str) -> dict[str, str]:
    return {name: entry.value for name, entry in describe(broker, topic).items()
            if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}


def incremental(broker, topic: str, *changes, validate_only: bool = False):
    """``changes``: (name, value, AlterConfigOpType); returns the resource's future."""
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=op) for name, value, op in changes])
    futures = admin_client(broker).incremental_alter_configs([resource],
                                                              validate_only=validate_only)
    return futures[resource]


def error_of(future) -> KafkaError:
    with pytest.raises(KafkaException) as caught:
        future.result(TIMEOUT)
    return caught.value.args[0]


SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE
APPEND, SUBTRACT = AlterConfigOpType.APPEND, AlterConfigOpType.SUBTRACT


def test_describe_gives_every_topic_config_with_value_source_and_synonyms(broker):
    create(broker, "described", retention_ms="3600000")
    configs = describe(broker, "described")
    assert set(configs) == set(TOPIC_CONFIGS)
    retention = configs["retention.ms"]
    assert (retention.value, retention.source) == ("3600000",
                                                   ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert not retention.is_read_only and not retention.is_sensitive
    assert [(s.name, s.value, s.source) for s in retention.synonyms.values()] == [
        ("retention.ms", "3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value),
        ("log.retention.hours", str(RETENTION_HOURS), ConfigSource.STATIC_BROKER_CONFIG.value)]
    policy = configs["cleanup.policy"]
    assert (policy.value, policy.source) == ("delete", ConfigSource.DEFAULT_CONFIG.value)


def test_configuration_keys_and_documentation_through_pylog_admin(broker):
    create(broker, "filtered", cleanup_policy="compact")
    with Admin(broker.bootstrap) as admin:
        entries = admin.describe_configs("topic", "filtered",
                                         ["cleanup.policy", "segment.ms", "no.such.key"],
                                         documentation=True)
    assert [e.name for e in entries] == ["cleanup.policy", "segment.ms"]
    policy, segment_ms = entries
    assert policy.value == "compact" and policy.is_dynamic
    assert policy.config_type == ConfigType.LIST and segment_ms.config_type == ConfigType.LONG
    assert segment_ms.value == str(7 * 24 * 3600 * 1000) and not segment_ms.is_dynamic
    assert all(entry.documentation for entry in entries)


def test_an_unknown_topic_fails_only_its_own_resource(broker):
    create(broker, "known")
    missing = ConfigResource(ResourceType.TOPIC, "no-such-topic")
    known = ConfigResource(ResourceType.TOPIC, "known")
    futures = admin_client(broker).describe_configs([missing, known])
    assert error_of(futures[missing]).code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert futures[known].result(TIMEOUT)["retention.ms"].value == str(
        RETENTION_HOURS * 3600 * 1000)


def test_incremental_set_append_subtract_and_delete(broker):
    create(broker, "incremental")
    incremental(broker, "incremental", ("retention.ms", "60000", SET),
                ("cleanup.policy", "compact", APPEND)).result(TIMEOUT)
    assert overrides(broker, "incremental") == {"retention.ms": "60000",
                                                 "cleanup.policy": "delete,compact"}
    incremental(broker, "incremental", ("cleanup.policy", "delete", SUBTRACT),
                ("retention.ms", None, DELETE)).result(TIMEOUT)
    configs = describe(broker, "incremental")
    assert overrides(broker, "incremental") == {"cleanup.policy": "compact"}
    assert configs["retention.ms"].value == str(RETENTION_HOURS * 3600 * 1000)
    # APPEND is for list configs only; the error names the key.
    error = error_of(incremental(broker, "incremental", ("retention.ms", "1", APPEND)))
    assert error.code() == INVALID_CONFIG and "retention.ms" in error.str()


def send(producer: Producer, topic: str, size: int):
    """Produce one record of ``size`` bytes; its delivery error (None: written)."""
    outcomes = []
    producer.produce(topic, b"x" * size, partition=0,
                     on_delivery=lambda err, msg: outcomes.append(err))
    producer.flush(TIMEOUT)
    return outcomes[0]


def test_alter_configs_replaces_the_whole_set_and_reaches_the_running_log(broker):
    create(broker, "replaced", retention_ms="60000", segment_ms="3600000")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    assert send(producer, "replaced", 5000) is None  # the log is open from here on
    resource = ConfigResource(ResourceType.TOPIC, "replaced",
                              set_config={"max.message.bytes": "2000"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # librdkafka prefers incremental
        admin_client(broker).alter_configs([resource])[resource].result(TIMEOUT)
    assert overrides(broker, "replaced") == {"max.message.bytes": "2000"}
    assert send(producer, "replaced", 100) is None
    assert send(producer, "replaced", 5000).code() == KafkaError.MSG_SIZE_TOO_LARGE


def test_a_bad_key_or_value_is_named_and_costs_only_its_resource(broker):
    create(broker, "bad-value")
    create(broker, "good-neighbour")
    bad = ConfigResource(ResourceType.TOPIC, "bad-value", incremental_configs=[
        ConfigEntry("retention.ms", "soon", incremental_operation=SET)])
    good = ConfigResource(ResourceType.TOPIC, "good-neighbour", incremental_configs=[
        ConfigEntry("retention.ms", "120000", incremental_operation=SET)])
    futures = admin_client(broker).incremental_alter_configs([bad, good])
    error = error_of(futures[bad])
    assert error.code() == INVALID_CONFIG
    assert "retention.ms" in error.str() and "soon" in error.str()
    futures[good].result(TIMEOUT)
    assert overrides(broker, "good-neighbour") == {"retention.ms": "120000"}
    assert overrides(broker, "bad-value") == {}
    error = error_of(incremental(broker, "bad-value", ("retention.mss", "1", SET)))
    assert error.code() == INVALID_CONFIG and "retention.mss" in error.str()
    error = error_of(incremental(broker, "bad-value", ("cleanup.policy", "shred", SET)))
    assert error.code() == INVALID_CONFIG and "cleanup.policy" in error.str()


def test_validate_only_checks_but_changes_nothing(broker):
    create(broker, "validated")
    incremental(broker, "validated", ("segment.ms", "1000", SET),
                validate_only=True).result(TIMEOUT)
    assert overrides(broker, "validated") == {}
    error = error_of(incremental(broker, "validated", ("segment.ms", "0", SET),
                                 validate_only=True))
    assert error.code() == INVALID_CONFIG and "segment.ms" in error.str()


def test_broker_settings_are_described_and_only_dynamic_ones_change(broker):
    resource = ConfigResource(ResourceType.BROKER, "0")
    configs = admin_client(broker).describe_configs([resource])[resource].result(TIMEOUT)
    hours = configs["log.retention.hours"]
    assert (hours.value, hours.source) == (str(RETENTION_HOURS),
                                           ConfigSource.STATIC_BROKER_CONFIG.value)
    assert configs["log.segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert not hours.is_read_only and configs["num.partitions"].is_read_only
    # (tests/broker/test_dynamic_configs.py changes the dynamic ones)
    for key, code in (("num.partitions", INVALID_REQUEST), ("no.such.setting", INVALID_CONFIG)):
        change = ConfigResource(ResourceType.BROKER, "0", incremental_configs=[
            ConfigEntry(key, "1", incremental_operation=SET)])
        error = error_of(admin_client(broker).incremental_alter_configs([change])[change])
        assert error.code() == code and key in error.str()


def test_kafka_python_describes_configs(broker):
    from kafka.admin import ConfigResource as KafkaPythonResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    create(broker, "kafka-python", cleanup_policy="compact")
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        described = client.describe_configs(
            [KafkaPythonResource(ConfigResourceType.TOPIC, "kafka-python")],
            include_synonyms=True, config_filter="all")
    finally:
        client.close()
    configs = described["topic"]["kafka-python"]
    assert set(configs) == set(TOPIC_CONFIGS)
    assert configs["cleanup.policy"]["value"] == "compact"
    assert configs["cleanup.policy"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert configs["segment.bytes"]["value"] == str(1 << 30)


def produce(broker, topic: str, records) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for key, value in records:
        producer.produce(topic, value, key, partition=0)
    assert producer.flush(TIMEOUT) == 0


def consume_all(broker, topic: str) -> list[tuple[int, bytes, bytes]]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "configs-test",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([KafkaTopicPartition(topic, 0, 0)])
    records = []
    try:
        while True:
            message = consumer.poll(TIMEOUT)
            assert message is not None, f"stalled after {len(records)} records"
            if message.error():
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                return records
            records.append((message.offset(), message.key(), message.value()))
    finally:
        consumer.close()


def cleaned_up_to(broker, topic: str) -> int:
    """The cleaner's checkpoint for ``topic`` (0 until its first pass)."""
    path = broker.log_dir / layout.CLEANER_OFFSET_CHECKPOINT
    lines = path.read_text().splitlines()[2:] if path.exists() else []
    return max([int(line.split()[2]) for line in lines if line.split()[0] == topic] or [0])


def test_a_topic_switched_to_compact_is_compacted_without_a_restart(broker):
    create(broker, "switched")
    updates = [(b"key-%d" % (i % 5), b"value-%d" % i) for i in range(200)]
    produce(broker, "switched", updates)
    incremental(broker, "switched", ("cleanup.policy", "compact", SET),
                ("segment.ms", "100", SET), ("min.cleanable.dirty.ratio", "0.01", SET)
                ).result(TIMEOUT)
    roll_and_wait_for_the_cleaner(broker, "switched", len(updates))
    # Each key's newest record of the cleaned segment, then the active segment untouched.
    assert consume_all(broker, "switched") == compacted(updates) + [(200, b"key-0", b"last")]


def roll_and_wait_for_the_cleaner(broker, topic: str, cleaned: int) -> None:
    """Roll the segment with one more record (key-0), then wait until the cleaner has
    cleaned the first ``cleaned`` offsets."""
    time.sleep(0.2)  # older than segment.ms: the next append rolls the segment
    produce(broker, topic, [(b"key-0", b"last")])
    deadline = time.monotonic() + 20
    while cleaned_up_to(broker, topic) < cleaned:
        assert time.monotonic() < deadline, broker.log_text()[-3000:]
        time.sleep(0.05)


def compacted(updates: list[tuple[bytes, bytes]]) -> list[tuple[int, bytes, bytes]]:
    """(offset, key, value) of each key's newest record, in offset order."""
    newest = {key: (offset, value) for offset, (key, value) in enumerate(updates)}
    return sorted((offset, key, value) for key, (offset, value) in newest.items())


def test_overrides_survive_a_restart(broker):
    create(broker, "durable")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    assert send(producer, "durable", 100) is None  # a log on disk, loaded at the restart
    incremental(broker, "durable", ("max.message.bytes", "2000", SET)).result(TIMEOUT)
    broker.restart()
    assert overrides(broker, "durable") == {"max.message.bytes": "2000"}
    # ...and the log loaded at start has them.
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    assert send(producer, "durable", 5000).code() == KafkaError.MSG_SIZE_TOO_LARGE
