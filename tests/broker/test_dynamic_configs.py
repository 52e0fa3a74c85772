"""Dynamic broker configs on a real standalone broker: settings changed while it runs,
per broker or as the cluster-wide default, through confluent-kafka (librdkafka),
kafka-python, pylog's Admin and ``pylog configs``; applied at once to running logs, the
cleaner and the connection limits, and kept across a restart.

One broker for the module. Each test sets what it needs and deletes it again, so the
others start from ``server.properties``.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, ResourceType)

from pylog.client import Admin
from pylog.protocol import ApiKey
from pylog.testing.broker import broker_fixture
from tests.broker.test_configs_api import (
    TIMEOUT, admin_client, compacted, consume_all, create, describe, error_of, produce,
    roll_and_wait_for_the_cleaner, send)
from tests.broker.wire import WireClient

RETENTION_HOURS = 48
broker = broker_fixture(scope="module", overrides={
    "num.partitions": 1, "auto.create.topics.enable": "false", "log.cleaner.backoff.ms": 50,
    "log.retention.hours": RETENTION_HOURS})

SET, DELETE, APPEND = AlterConfigOpType.SET, AlterConfigOpType.DELETE, AlterConfigOpType.APPEND
BROKER_SOURCE = ConfigSource.DYNAMIC_BROKER_CONFIG.value
DEFAULT_SOURCE = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value


def alter_broker(broker, *changes, validate_only: bool = False):
    """IncrementalAlterConfigs on broker 0 through librdkafka (which cannot name the
    cluster default); returns the future."""
    resource = ConfigResource(ResourceType.BROKER, "0", incremental_configs=[
        ConfigEntry(name, value, incremental_operation=op) for name, value, op in changes])
    return admin_client(broker).incremental_alter_configs(
        [resource], validate_only=validate_only)[resource]


def describe_broker(broker, name: str = "0") -> dict:
    resource = ConfigResource(ResourceType.BROKER, name)
    return admin_client(broker).describe_configs([resource])[resource].result(TIMEOUT)


def alter_default(broker, set_configs=None, delete_configs=()) -> None:
    with Admin(broker.bootstrap) as admin:
        admin.incremental_alter_configs("broker", "", set_configs=set_configs,
                                        delete_configs=delete_configs)


def pylog_configs(broker, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pylog.cli.main", "configs", "--bootstrap-server",
                           broker.bootstrap, *args], capture_output=True, text=True,
                          timeout=60)


def test_a_broker_config_reaches_running_logs_and_goes_back_on_delete(broker):
    create(broker, "limits")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    assert send(producer, "limits", 5000) is None  # the log is open from here on
    alter_broker(broker, ("message.max.bytes", "2000", SET)).result(TIMEOUT)
    try:
        entry = describe_broker(broker)["message.max.bytes"]
        assert (entry.value, entry.source, entry.is_read_only) == ("2000", BROKER_SOURCE, False)
        topic_entry = describe(broker, "limits")["max.message.bytes"]
        assert (topic_entry.value, topic_entry.source) == ("2000", BROKER_SOURCE)
        assert send(producer, "limits", 5000).code() == KafkaError.MSG_SIZE_TOO_LARGE
    finally:
        alter_broker(broker, ("message.max.bytes", None, DELETE)).result(TIMEOUT)
    assert describe_broker(broker)["message.max.bytes"].source == \
        ConfigSource.DEFAULT_CONFIG.value
    assert send(producer, "limits", 5000) is None


def test_this_brokers_value_then_the_cluster_default_then_the_file(broker):
    create(broker, "ordered")
    alter_default(broker, {"log.retention.ms": "7200000"})
    try:
        entry = describe(broker, "ordered")["retention.ms"]
        assert (entry.value, entry.source) == ("7200000", DEFAULT_SOURCE)
        alter_broker(broker, ("log.retention.ms", "3600000", SET)).result(TIMEOUT)
        entry = describe(broker, "ordered")["retention.ms"]
        assert (entry.value, entry.source) == ("3600000", BROKER_SOURCE)
        # (librdkafka keeps one synonym per name: pylog's Admin shows them all, in order)
        with Admin(broker.bootstrap) as admin:
            [entry] = admin.describe_configs("topic", "ordered", ["retention.ms"])
        assert [(s.name, s.value, s.source) for s in entry.synonyms][:3] == [
            ("log.retention.ms", "3600000", BROKER_SOURCE),
            ("log.retention.ms", "7200000", DEFAULT_SOURCE),
            ("log.retention.hours", str(RETENTION_HOURS),
             ConfigSource.STATIC_BROKER_CONFIG.value)]
        # The default resource describes only what is set on it, as Kafka does.
        described = pylog_configs(broker, "--describe", "--entity-type", "brokers",
                                  "--entity-default")
        assert described.stdout.splitlines() == [
            "Default configs for brokers in the cluster are:",
            "  log.retention.ms=7200000 sensitive=false "
            "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=7200000}"]
    finally:
        alter_broker(broker, ("log.retention.ms", None, DELETE)).result(TIMEOUT)
        alter_default(broker, delete_configs=["log.retention.ms"])
    entry = describe(broker, "ordered")["retention.ms"]
    assert (entry.value, entry.source) == (str(RETENTION_HOURS * 3600 * 1000),
                                           ConfigSource.STATIC_BROKER_CONFIG.value)


def test_kafka_python_changes_a_broker_config(broker):
    from kafka.admin import ConfigResource as KafkaPythonResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        client.alter_configs([KafkaPythonResource(ConfigResourceType.BROKER, "0", configs={
            "log.segment.bytes": "5000000"})])
        entry = describe_broker(broker)["log.segment.bytes"]
        assert (entry.value, entry.source) == ("5000000", BROKER_SOURCE)
    finally:
        client.close()
        alter_broker(broker, ("log.segment.bytes", None, DELETE)).result(TIMEOUT)
    assert describe_broker(broker)["log.segment.bytes"].source == \
        ConfigSource.DEFAULT_CONFIG.value


@pytest.mark.parametrize("key, value, code, needle", [
    ("log.dirs", "/elsewhere", KafkaError.INVALID_REQUEST, "restart"),
    ("log.retention.ms", "soon", KafkaError.INVALID_CONFIG, "soon"),
    ("log.retention.msec", "1", KafkaError.INVALID_CONFIG, "did you mean log.retention.ms"),
    ("log.cleanup.policy", "shred", KafkaError.INVALID_CONFIG, "shred"),
    ("max.connections.per.ip", "0", KafkaError.INVALID_CONFIG, "overrides"),
])
def test_a_refused_change_names_the_key_and_changes_nothing(broker, key, value, code, needle):
    error = error_of(alter_broker(broker, (key, value, SET)))
    assert error.code() == code and key in error.str() and needle in error.str()
    alter_broker(broker, ("log.retention.ms", "1000", SET), validate_only=True).result(TIMEOUT)
    assert not [name for name, entry in describe_broker(broker).items()
                if entry.source in (BROKER_SOURCE, DEFAULT_SOURCE)]


def test_kafka_settings_pylog_ignores_are_taken_as_librdkafka_sets_them(broker):
    # librdkafka's test 0081 sets these two on a broker resource.
    alter_broker(broker, ("sasl.kerberos.min.time.before.relogin", "58000", SET),
                 ("background.threads", "9", SET)).result(TIMEOUT)
    try:
        entry = describe_broker(broker)["background.threads"]
        assert (entry.value, entry.source) == ("9", BROKER_SOURCE)
        assert "background.threads=9: a Kafka setting pylog does not use" in broker.log_text()
    finally:
        alter_broker(broker, ("sasl.kerberos.min.time.before.relogin", None, DELETE),
                     ("background.threads", None, DELETE)).result(TIMEOUT)
    assert "background.threads" not in describe_broker(broker)


def test_the_default_cleanup_policy_compacts_topics_without_their_own(broker):
    create(broker, "compacted-by-default", segment_ms="100",
           min_cleanable_dirty_ratio="0.01")
    updates = [(b"key-%d" % (i % 5), b"value-%d" % i) for i in range(200)]
    produce(broker, "compacted-by-default", updates)
    alter_broker(broker, ("log.cleanup.policy", "compact", APPEND),
                 ("log.cleaner.threads", "2", SET)).result(TIMEOUT)
    try:
        assert describe_broker(broker)["log.cleanup.policy"].value == "delete,compact"
        roll_and_wait_for_the_cleaner(broker, "compacted-by-default", len(updates))
    finally:
        alter_broker(broker, ("log.cleanup.policy", None, DELETE),
                     ("log.cleaner.threads", None, DELETE)).result(TIMEOUT)
    assert "log cleaner: 2 threads" in broker.log_text()
    assert consume_all(broker, "compacted-by-default") == compacted(updates) + [
        (200, b"key-0", b"last")]


def test_a_connection_limit_applies_to_the_next_connections(broker):
    def served() -> WireClient:
        wire = WireClient(broker.bootstrap, timeout=10, source="127.0.0.2")
        assert wire.call(ApiKey.API_VERSIONS, 0, {})["error_code"] == 0
        return wire

    first = served()
    done = pylog_configs(broker, "--alter", "--entity-type", "brokers", "--entity-default",
                         "--add-config", "max.connections.per.ip.overrides=127.0.0.2:1")
    assert done.returncode == 0, done.stderr
    try:
        second = WireClient(broker.bootstrap, timeout=10, source="127.0.0.2")
        assert second.is_closed_by_peer()  # 127.0.0.2 already has its one connection
        second.close()
        assert first.call(ApiKey.API_VERSIONS, 0, {})["error_code"] == 0  # open ones stay
    finally:
        pylog_configs(broker, "--alter", "--entity-type", "brokers", "--entity-default",
                      "--delete-config", "max.connections.per.ip.overrides")
    served().close()
    first.close()


def test_dynamic_configs_survive_a_restart(broker):
    create(broker, "kept")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    assert send(producer, "kept", 100) is None  # a log on disk, loaded at the restart
    alter_broker(broker, ("message.max.bytes", "2000", SET)).result(TIMEOUT)
    alter_default(broker, {"log.retention.ms": "3600000"})
    broker.restart()
    try:
        configs = describe_broker(broker)
        assert (configs["message.max.bytes"].source, configs["log.retention.ms"].source) == (
            BROKER_SOURCE, DEFAULT_SOURCE)
        # ...and the log loaded at start has them.
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        assert send(producer, "kept", 5000).code() == KafkaError.MSG_SIZE_TOO_LARGE
    finally:
        alter_broker(broker, ("message.max.bytes", None, DELETE)).result(TIMEOUT)
        alter_default(broker, delete_configs=["log.retention.ms"])


def test_a_bad_value_written_by_another_tool_is_left_out(broker):
    path = broker.log_dir / "broker-configs.json"
    path.write_text('{"version": 1, "brokers": {"0": {"log.retention.ms": "soon", '
                    '"message.max.bytes": "3000"}}}')
    broker.restart()
    try:
        configs = describe_broker(broker)
        assert configs["message.max.bytes"].value == "3000"
        assert "log.retention.ms=soon left out" in broker.log_text()
    finally:
        path.unlink()
        broker.restart()
