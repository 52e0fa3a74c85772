"""A Kafka ``server.properties`` runs a pylog broker, and the connection and fetch limits
operators set in it hold.

Kafka's stock file names settings pylog has no use for (``num.io.threads``...): the broker
starts and logs each one it ignores, with the reason. A setting that would ask for what
pylog cannot do safely (``zookeeper.set.acl=true``) is refused, a misspelt key is refused
with the key it resembles. ``max.connections.per.ip`` closes a connection beyond it,
``max.connections`` leaves it waiting until one closes, ``fetch.max.bytes`` caps what a
consumer's Fetch gets, ``socket.listen.backlog.size`` sizes the listen queue.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from pylog.broker.config import BrokerConfig
from pylog.errors import ConfigError
from pylog.protocol import ApiKey
from pylog.testing.broker import BrokerProcess
from tests.broker.wire import WireClient, batch, fetch_body, produce_body

# Kafka 3.x's config/server.properties (ZooKeeper mode), comments left out; the broker's
# listener, log dir and ZooKeeper (none: standalone) are the test's.
KAFKA_SERVER_PROPERTIES = """\
broker.id=0
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
zookeeper.connection.timeout.ms=18000
group.initial.rebalance.delay.ms=0
"""


def test_kafkas_stock_server_properties_run_a_broker(tmp_path):
    config_file = tmp_path / "server.properties"
    config_file.write_text(KAFKA_SERVER_PROPERTIES)
    with BrokerProcess(tmp_path / "b", config_file=config_file) as broker:
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce("stock", b"hello", partition=0)
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "stock"})
        consumer.assign([TopicPartition("stock", 0, 0)])
        deadline, got = time.monotonic() + 30, None
        while got is None and time.monotonic() < deadline:
            got = consumer.poll(0.5)
        consumer.close()
        assert got is not None and got.error() is None and got.value() == b"hello"
        logged = broker.log_text()
    for key in ("num.io.threads", "num.recovery.threads.per.data.dir"):
        assert f"{key}: a Kafka setting pylog does not use" in logged


def test_settings_pylog_ignores_are_still_checked_and_listed():
    config = BrokerConfig.load(None, ["num.io.threads=8", "background.threads=4",
                                      "metric.reporters=com.example.Reporter"])
    assert [key for key, _ in config.ignored] == [
        "num.io.threads", "background.threads", "metric.reporters"]
    assert "num.io.threads" not in config.explicit
    with pytest.raises(ConfigError, match="num.io.threads: expected an integer"):
        BrokerConfig.load(None, ["num.io.threads=many"])


@pytest.mark.parametrize("override, message", [
    ("zookeeper.set.acl=true", "zookeeper.set.acl: true is not supported"),
    ("num.partitons=3", "num.partitons: unknown broker setting (did you mean num.partitions?)"),
    ("max.connections.per.ip=0", "max.connections.per.ip: 0 needs "
                                 "max.connections.per.ip.overrides"),
    ("max.connections.per.ip.overrides=127.0.0.1", "expected host:count"),
])
def test_settings_pylog_cannot_honour_are_refused_in_one_line(tmp_path, override, message):
    result = subprocess.run(
        [sys.executable, "-m", "pylog.cli.main", "broker", "--override",
         f"log.dirs={tmp_path}", "--override", override],
        capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("pylog broker: error: ") and message in line


def api_versions(wire: WireClient) -> int:
    return wire.call(ApiKey.API_VERSIONS, 0, {})["error_code"]


def served(broker: BrokerProcess) -> WireClient:
    """A connection the broker answers, once a closed one's slot is free again (the
    broker counts a connection until it has seen it close: the start-up probe's too)."""
    deadline = time.monotonic() + 10
    while True:
        wire = WireClient(broker.bootstrap, timeout=10)
        try:
            assert api_versions(wire) == 0
            return wire
        except (ConnectionError, OSError):
            wire.close()
            assert time.monotonic() < deadline, "a closed connection's slot never freed"
            time.sleep(0.1)


def test_a_connection_beyond_max_connections_per_ip_is_closed(tmp_path):
    with BrokerProcess(tmp_path / "b", {"max.connections.per.ip": 2}) as broker:
        first, second = served(broker), served(broker)
        third = WireClient(broker.bootstrap, timeout=10)
        assert third.is_closed_by_peer()
        third.close()
        first.close()
        again = served(broker)  # the slot comes back once the broker has seen the close
        assert api_versions(second) == 0
        for wire in (again, second):
            wire.close()
        assert "already has its most connections (max.connections.per.ip)" in broker.log_text()


def test_an_address_override_raises_its_limit(tmp_path):
    settings = {"max.connections.per.ip": 0,
                "max.connections.per.ip.overrides": "127.0.0.1:3"}
    with BrokerProcess(tmp_path / "b", settings) as broker:
        wires = [served(broker) for _ in range(3)]
        wires.append(WireClient(broker.bootstrap, timeout=10))
        assert wires[3].is_closed_by_peer()
        for wire in wires:
            wire.close()


def test_beyond_max_connections_a_client_waits_for_a_free_slot(tmp_path):
    with BrokerProcess(tmp_path / "b", {"max.connections": 2}) as broker:
        first, second = WireClient(broker.bootstrap), WireClient(broker.bootstrap)
        assert api_versions(first) == api_versions(second) == 0
        # The kernel completes the third handshake, but the broker does not accept it.
        third = WireClient(broker.bootstrap, timeout=1)
        third.send(ApiKey.API_VERSIONS, 0, {})
        with pytest.raises(socket.timeout):
            third.read_frame()
        first.close()
        third.sock.settimeout(30)
        _, answer = third.receive(ApiKey.API_VERSIONS, 0)
        assert answer["error_code"] == 0
        for wire in (second, third):
            wire.close()


def test_fetch_max_bytes_caps_what_a_consumer_gets(tmp_path):
    with BrokerProcess(tmp_path / "b", {"fetch.max.bytes": 3000}) as broker:
        with WireClient(broker.bootstrap) as wire:
            wire.call(ApiKey.METADATA, 4, {"topics": [{"name": "capped"}],
                                           "allow_auto_topic_creation": True})
            for i in range(10):
                answer = wire.call(ApiKey.PRODUCE, 8, produce_body(
                    "capped", {0: batch([b"%d" % i * 1000])}))
                assert answer["responses"][0]["partition_responses"][0]["error_code"] == 0
            got = wire.call(ApiKey.FETCH, 11, fetch_body("capped", {0: 0}))
            records = got["responses"][0]["partitions"][0]["records"]
            # whole batches of about 1070 bytes, as many as fit in 3000
            assert 1000 < len(records) <= 3000
            # a request asking for less than the cap gets what it asked for
            small = wire.call(ApiKey.FETCH, 11, fetch_body("capped", {0: 0}, max_bytes=1200))
            assert len(small["responses"][0]["partitions"][0]["records"]) <= 1200
        # a consumer still reads everything, a few batches per Fetch
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "capped"})
        consumer.assign([TopicPartition("capped", 0, 0)])
        values, deadline = [], time.monotonic() + 30
        while len(values) < 10 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
        consumer.close()
        assert values == [b"%d" % i * 1000 for i in range(10)]


def test_listen_backlog_size_sizes_the_listen_queue(tmp_path):
    with BrokerProcess(tmp_path / "b", {"socket.listen.backlog.size": 77}) as broker:
        listening = subprocess.run(["ss", "-ltnH", f"sport = :{broker.port}"],
                                   capture_output=True, text=True, check=True).stdout.split()
        # State, Recv-Q, Send-Q (the backlog for a listening socket), ...
        assert listening[0] == "LISTEN" and listening[2] == "77"
