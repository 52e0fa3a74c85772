"""Broker configuration: Kafka names, defaults, unit families, errors naming the key."""

import subprocess
import sys
from pathlib import Path

import pytest

from pylog.broker.config import BrokerConfig, parse_properties
from pylog.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def test_shipped_server_properties_loads():
    config = BrokerConfig.load(REPO / "conf" / "server.properties")
    assert config.listener.port == 9092 and config["num.partitions"] == 1
    assert config.log_config.retention_ms == 168 * 3600 * 1000


def test_defaults_and_overrides():
    config = BrokerConfig.load(None, ["num.partitions=4", "log.dirs=/a,/b",
                                      "auto.create.topics.enable=false"])
    assert config["num.partitions"] == 4 and not config["auto.create.topics.enable"]
    assert [str(p) for p in config.log_dirs] == ["/a", "/b"]
    assert config["message.max.bytes"] == 1048588
    assert config.log_config.max_batch_size == 1048588


@pytest.mark.parametrize("settings, retention", [
    ({}, 168 * 3600_000),
    ({"log.retention.hours": "1"}, 3600_000),
    ({"log.retention.hours": "1", "log.retention.minutes": "5"}, 300_000),
    ({"log.retention.minutes": "5", "log.retention.ms": "1234"}, 1234),
    ({"log.retention.ms": "-1"}, None),
])
def test_finest_retention_unit_wins(settings, retention):
    assert BrokerConfig.load(None, settings).log_config.retention_ms == retention


def test_roll_and_flush_settings_reach_the_log_config():
    config = BrokerConfig.load(None, {"log.roll.ms": "5000", "log.flush.interval.messages": "10",
                                      "log.flush.interval.ms": "200",
                                      "log.retention.bytes": "1000000",
                                      "log.flush.expose.unflushed": "false"})
    log_config = config.log_config
    assert log_config.segment_ms == 5000 and log_config.flush_messages == 10
    assert log_config.flush_ms == 200 and log_config.retention_bytes == 1000000
    assert log_config.expose_unflushed is False


@pytest.mark.parametrize("settings, key", [
    ({"no.such.key": "1"}, "no.such.key"),
    ({"num.partitions": "many"}, "num.partitions"),
    ({"num.partitions": "0"}, "num.partitions"),
    ({"auto.create.topics.enable": "yes"}, "auto.create.topics.enable"),
    ({"listeners": "SSL://host:1"}, "ssl.keystore.location"),
    ({"listeners": "CLIENT://host:1"}, "listeners"),
    ({"listeners": "PLAINTEXT://h:1,PLAINTEXT://h:2"}, "listeners"),
    ({"listeners": "PLAINTEXT://h:1,SSL://h:1", "ssl.keystore.location": "/k"}, "listeners"),
    ({"listener.security.protocol.map": "CLIENT:TLS"}, "listener.security.protocol.map"),
    ({"advertised.listeners": "SSL://h:1"}, "advertised.listeners"),
    ({"inter.broker.listener.name": "PLAINTEXT",
      "security.inter.broker.protocol": "PLAINTEXT"}, "inter.broker.listener.name"),
    ({"zookeeper.connect": "zk:2181", "inter.broker.listener.name": "INTERNAL"},
     "inter.broker.listener.name"),
    ({"listeners": "SSL://h:1", "ssl.keystore.location": "/k", "ssl.keystore.type": "JKS"},
     "ssl.keystore.type"),
    ({"listeners": "C://h:1", "listener.security.protocol.map": "C:SSL",
      "ssl.keystore.location": "/k", "listener.name.c.ssl.client.auth": "maybe"},
     "listener.name.c.ssl.client.auth"),
    ({"listener.name.c.no.such.key": "1"}, "listener.name.c.no.such.key"),
    ({"listeners": "PLAINTEXT://nohost"}, "listeners"),
    ({"log.segment.bytes": "10"}, "log.segment.bytes"),
    ({"listeners": "PLAINTEXT://h:99999"}, "listeners"),
    ({"listeners": "PLAINTEXT://h:abc"}, "listeners"),
    ({"advertised.listeners": "PLAINTEXT://h:-1"}, "advertised.listeners"),
    ({"max.partitions.per.topic": "0"}, "max.partitions.per.topic"),
    ({"num.partitions": "11", "max.partitions.per.topic": "10"}, "num.partitions"),
    ({"num.partitions": "20000"}, "num.partitions"),
    ({"queued.max.request.bytes": "0"}, "queued.max.request.bytes"),
    ({"queued.max.request.bytes": "lots"}, "queued.max.request.bytes"),
])
def test_bad_settings_name_the_key(settings, key):
    with pytest.raises(ConfigError) as caught:
        BrokerConfig.load(None, settings)
    assert caught.value.key == key and key in str(caught.value)


def test_named_listeners_with_their_protocols_and_advertised_addresses():
    config = BrokerConfig.load(None, {
        "listeners": "CLIENT://:9093,INTERNAL://10.0.0.1:9092",
        "advertised.listeners": "CLIENT://broker.example:19093,INTERNAL://10.0.0.1:9092",
        "listener.security.protocol.map": "CLIENT:SSL,INTERNAL:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL", "ssl.keystore.location": "/k.pem",
        "listener.name.client.ssl.client.auth": "required"})
    assert [(x.name, x.host, x.port, x.security_protocol) for x in config.listeners] == [
        ("CLIENT", "", 9093, "SSL"), ("INTERNAL", "10.0.0.1", 9092, "PLAINTEXT")]
    assert [(x.name, x.host, x.port) for x in config.advertised_listeners] == [
        ("CLIENT", "broker.example", 19093), ("INTERNAL", "10.0.0.1", 9092)]
    assert config.inter_broker_listener_name == "INTERNAL"
    assert config.tls_settings("CLIENT").client_auth == "required"
    assert config.tls_settings("INTERNAL").client_auth == "none"
    assert config.listener.name == "CLIENT" and config.advertised.host == "broker.example"


def test_inter_broker_listener_by_protocol():
    config = BrokerConfig.load(None, {"listeners": "SSL://h:1,PLAINTEXT://h:2",
                                      "security.inter.broker.protocol": "SSL",
                                      "ssl.keystore.location": "/k.pem"})
    assert config.inter_broker_listener_name == "SSL"


def test_properties_syntax():
    assert parse_properties("# c\n! c\n\na=1\nb : two words\nc=x=y\n") == {
        "a": "1", "b": "two words", "c": "x=y"}
    with pytest.raises(ConfigError):
        parse_properties("just-a-word\n")


def test_cli_reports_a_bad_key_in_one_line(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "pylog.cli.main", "broker", "--override", f"log.dirs={tmp_path}",
         "--override", "log.retention.hourz=3"], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        "pylog broker: error: log.retention.hourz: unknown broker setting "
        "(did you mean log.retention.hours?)"]


def test_cli_reports_a_missing_config_file(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "pylog.cli.main", "broker", "--config", str(tmp_path / "nope")],
        capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_cli_reports_a_taken_port_and_a_locked_log_dir(broker, tmp_path):
    taken = subprocess.run(
        [sys.executable, "-m", "pylog.cli.main", "broker", "--override", f"log.dirs={tmp_path}",
         "--override", f"listeners=PLAINTEXT://{broker.bootstrap}"],
        capture_output=True, text=True, timeout=60)
    assert taken.returncode != 0 and "Traceback" not in taken.stderr
    assert taken.stderr.strip().startswith("pylog broker: error: listeners: cannot listen on")
    locked = subprocess.run(
        [sys.executable, "-m", "pylog.cli.main", "broker", "--override",
         f"log.dirs={broker.log_dir}", "--override", "listeners=PLAINTEXT://127.0.0.1:0"],
        capture_output=True, text=True, timeout=60)
    assert locked.returncode != 0 and "Traceback" not in locked.stderr
    assert len(locked.stderr.strip().splitlines()) == 1 and "in use" in locked.stderr
