"""Transactions on the data side of a real broker: transactional batches sent as raw Produce
requests, markers as raw WriteTxnMarkers requests (the transaction coordinator's job), read
by confluent-kafka and kafka-python consumers with isolation read_committed and
read_uncommitted, ListOffsets by isolation, and a restart (clean, then SIGKILL) keeping the
last stable offset and the aborted transactions; in a two-broker cluster, markers wait for
the follower, and after the leader's SIGKILL the new leader has the same LSO and aborted
transactions.

These tests play the transaction coordinator themselves (no InitProducerId with a
transactional id, no AddPartitionsToTxn), so their brokers do not verify transactional
batches with one (``transaction.partition.verification.enable=false``; verification is
tested in tests/transactions/test_verification.py)."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition as CkTopicPartition
from kafka import KafkaConsumer, TopicPartition as KpTopicPartition

from pylog.protocol import ApiKey
from pylog.records import build_batch
from pylog.records.control import TxnMarker, build_marker_batch
from pylog.testing.broker import BrokerProcess
from pylog.testing.zookeeper import zk_chroot_fixture, zookeeper_fixture
from tests.broker.wire import WireClient, create_body, fetch_body, produce_body
from tests.cluster.cluster_helpers import LocalCluster
from tests.cluster.conftest import wait_until

INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED = 47, 52
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, INVALID_RECORD = 53, 87
READ_COMMITTED = 1
UNVERIFIED = {"transaction.partition.verification.enable": "false"}

zookeeper = zookeeper_fixture()
zk_connect = zk_chroot_fixture()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = BrokerProcess(tmp_path_factory.mktemp("txn-data"),
                            {"num.partitions": 1, **UNVERIFIED})
    process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def wire(broker):
    with WireClient(broker.bootstrap) as client:
        yield client


def new_topic(wire: WireClient) -> str:
    name = f"txn-{uuid.uuid4().hex[:8]}"
    result = wire.call(ApiKey.CREATE_TOPICS, 4, create_body(name, 1))
    assert result["topics"][0]["error_code"] == 0, result
    return name


def producer_id(wire: WireClient) -> int:
    response = wire.call(ApiKey.INIT_PRODUCER_ID, 1, {"transactional_id": None,
                                                      "transaction_timeout_ms": 60000})
    assert response["error_code"] == 0, response
    return response["producer_id"]


def produce(wire: WireClient, topic: str, records: bytes, transactional_id: str | None = "tx") -> dict:
    body = produce_body(topic, {0: records}, acks=-1)
    body["transactional_id"] = transactional_id
    response = wire.call(ApiKey.PRODUCE, 8, body)
    return response["responses"][0]["partition_responses"][0]


def txn_batch(pid: int, sequence: int, values: list[bytes], epoch: int = 0) -> bytes:
    return build_batch([(None, v, (), int(time.time() * 1000)) for v in values], producer_id=pid,
                       producer_epoch=epoch, base_sequence=sequence, is_transactional=True)


def plain_batch(values: list[bytes]) -> bytes:
    return build_batch([(None, v, (), int(time.time() * 1000)) for v in values])


def write_marker(wire: WireClient, topic: str, pid: int, commit: bool, epoch: int = 0,
                 coordinator_epoch: int = 0, version: int = 1) -> int:
    """Send WriteTxnMarkers for partition 0 of ``topic``; the partition's error code."""
    response = wire.call(ApiKey.WRITE_TXN_MARKERS, version, {"markers": [{
        "producer_id": pid, "producer_epoch": epoch, "transaction_result": commit,
        "topics": [{"name": topic, "partition_indexes": [0]}],
        "coordinator_epoch": coordinator_epoch}]})
    marker = response["markers"][0]
    assert marker["producer_id"] == pid
    return marker["topics"][0]["partitions"][0]["error_code"]


def fetch(wire: WireClient, topic: str, isolation: int, offset: int = 0, **kwargs) -> dict:
    body = fetch_body(topic, {0: offset}, **kwargs)
    body["isolation_level"] = isolation
    return wire.call(ApiKey.FETCH, 11, body)["responses"][0]["partitions"][0]


def list_offset(wire: WireClient, topic: str, isolation: int, timestamp: int = -1) -> int:
    response = wire.call(ApiKey.LIST_OFFSETS, 5, {"replica_id": -1, "isolation_level": isolation,
                                                  "topics": [{"name": topic, "partitions": [
                                                      {"partition_index": 0, "timestamp": timestamp,
                                                       "current_leader_epoch": -1}]}]})
    partition = response["topics"][0]["partitions"][0]
    assert partition["error_code"] == 0, partition
    return partition["offset"]


def confluent_values(bootstrap: str, topic: str, isolation: str, expected: int) -> list[bytes]:
    """Values a confluent-kafka consumer reads from the start: ``expected`` of them, then
    polls once more to see that nothing follows."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "isolation.level": isolation})
    try:
        consumer.assign([CkTopicPartition(topic, 0, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < expected and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
        extra = consumer.poll(1.0)
        if extra is not None and extra.error() is None:
            values.append(extra.value())
        return values
    finally:
        consumer.close()


def kafka_python_values(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                             enable_auto_commit=False, group_id=None)
    try:
        tp = KpTopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(values) < expected:
            for records in consumer.poll(timeout_ms=500).values():
                values += [r.value for r in records]
        for records in consumer.poll(timeout_ms=1000).values():
            values += [r.value for r in records]
        return values
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def mixed_topic(broker):
    """A topic with a committed, an aborted and an open transaction around plain records::

        0-1 a1 a2 (A)   2 p1   3 b1 (B)   4 COMMIT A   5 ABORT B   6 c1 (C, open)   7 p2
    """
    with WireClient(broker.bootstrap) as wire:
        topic = new_topic(wire)
        a, b, c = producer_id(wire), producer_id(wire), producer_id(wire)
        assert produce(wire, topic, txn_batch(a, 0, [b"a1", b"a2"]))["error_code"] == 0
        assert produce(wire, topic, plain_batch([b"p1"]), None)["error_code"] == 0
        assert produce(wire, topic, txn_batch(b, 0, [b"b1"]))["error_code"] == 0
        assert write_marker(wire, topic, a, commit=True) == 0
        assert write_marker(wire, topic, b, commit=False, version=0) == 0
        assert produce(wire, topic, txn_batch(c, 0, [b"c1"]))["error_code"] == 0
        assert produce(wire, topic, plain_batch([b"p2"]), None)["error_code"] == 0
    return topic, (a, b, c)


def test_fetch_by_isolation_level(wire, mixed_topic):
    topic, (_, b, _) = mixed_topic
    committed = fetch(wire, topic, READ_COMMITTED)
    assert (committed["high_watermark"], committed["last_stable_offset"]) == (8, 6)
    assert committed["aborted_transactions"] == [{"producer_id": b, "first_offset": 3}]
    uncommitted = fetch(wire, topic, 0)
    assert (uncommitted["high_watermark"], uncommitted["last_stable_offset"]) == (8, 6)
    assert uncommitted["aborted_transactions"] is None
    assert len(uncommitted["records"]) > len(committed["records"])
    # Past the aborted transaction there is nothing to report.
    assert fetch(wire, topic, READ_COMMITTED, offset=6)["aborted_transactions"] == []
    assert list_offset(wire, topic, READ_COMMITTED) == 6
    assert list_offset(wire, topic, 0) == 8


def test_consumers_see_committed_records_up_to_the_open_transaction(broker, mixed_topic):
    topic, _ = mixed_topic
    assert confluent_values(broker.bootstrap, topic, "read_committed", 3) == [b"a1", b"a2", b"p1"]
    assert confluent_values(broker.bootstrap, topic, "read_uncommitted", 6) == [
        b"a1", b"a2", b"p1", b"b1", b"c1", b"p2"]
    assert kafka_python_values(broker.bootstrap, topic, 3) == [b"a1", b"a2", b"p1"]


def test_a_parked_read_committed_fetch_wakes_when_the_transaction_commits(broker, wire):
    topic = new_topic(wire)
    pid = producer_id(wire)
    assert produce(wire, topic, txn_batch(pid, 0, [b"x"]))["error_code"] == 0
    assert fetch(wire, topic, READ_COMMITTED)["records"] in (b"", None)
    # Parked far longer than the socket timeout: only the commit's wake-up answers it.
    with WireClient(broker.bootstrap, timeout=20) as reader:
        body = fetch_body(topic, {0: 0}, max_wait_ms=120000, min_bytes=1)
        body["isolation_level"] = READ_COMMITTED
        sent = reader.send(ApiKey.FETCH, 11, body)
        time.sleep(0.3)  # let the fetch park before the marker is written
        assert write_marker(wire, topic, pid, commit=True) == 0
        correlation_id, response = reader.receive(ApiKey.FETCH, 11)
    assert correlation_id == sent
    partition = response["responses"][0]["partitions"][0]
    assert partition["last_stable_offset"] == 2 and partition["records"]


def test_list_offsets_by_timestamp_stops_at_the_last_stable_offset(wire):
    topic = new_topic(wire)
    pid = producer_id(wire)
    early, late = 1_700_000_000_000, 1_700_000_100_000
    assert produce(wire, topic, build_batch([(None, b"p", (), early)]), None)["error_code"] == 0
    open_batch = build_batch([(None, b"t", (), late)], producer_id=pid, producer_epoch=0,
                             base_sequence=0, is_transactional=True)
    assert produce(wire, topic, open_batch)["error_code"] == 0
    assert list_offset(wire, topic, 0, timestamp=late) == 1
    assert list_offset(wire, topic, READ_COMMITTED, timestamp=late) == -1  # not stable yet
    assert list_offset(wire, topic, READ_COMMITTED, timestamp=early) == 0
    assert write_marker(wire, topic, pid, commit=True) == 0
    assert list_offset(wire, topic, READ_COMMITTED, timestamp=late) == 1


def test_produce_checks(wire):
    topic = new_topic(wire)
    pid = producer_id(wire)
    marker = build_marker_batch(pid, 0, TxnMarker(commit=True, coordinator_epoch=0), 0)
    assert produce(wire, topic, marker)["error_code"] == INVALID_RECORD
    refused = produce(wire, topic, txn_batch(pid, 0, [b"x"]), transactional_id=None)
    assert refused["error_code"] == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert produce(wire, topic, txn_batch(-1, -1, [b"x"]))["error_code"] == INVALID_RECORD
    assert fetch(wire, topic, 0)["high_watermark"] == 0  # nothing was written


def test_markers_are_fenced_by_coordinator_and_producer_epochs(wire):
    topic = new_topic(wire)
    pid = producer_id(wire)
    assert produce(wire, topic, txn_batch(pid, 0, [b"x"]))["error_code"] == 0
    # The coordinator aborts with a bumped producer epoch (a timed-out transaction).
    assert write_marker(wire, topic, pid, commit=False, epoch=1, coordinator_epoch=3) == 0
    assert write_marker(wire, topic, pid, commit=True, epoch=1, coordinator_epoch=2) \
        == TRANSACTION_COORDINATOR_FENCED
    assert write_marker(wire, topic, pid, commit=True, epoch=0, coordinator_epoch=3) \
        == INVALID_PRODUCER_EPOCH
    # The fenced producer cannot write at its old epoch any more.
    assert produce(wire, topic, txn_batch(pid, 1, [b"y"]))["error_code"] == INVALID_PRODUCER_EPOCH
    assert produce(wire, topic, txn_batch(pid, 0, [b"z"], epoch=1))["error_code"] == 0
    assert fetch(wire, topic, READ_COMMITTED)["last_stable_offset"] == 2


def test_unknown_partitions_get_their_error(wire):
    pid = producer_id(wire)
    assert write_marker(wire, f"missing-{uuid.uuid4().hex[:6]}", pid, commit=True) == 3


def _state(wire: WireClient, topic: str) -> tuple[int, int, list]:
    committed = fetch(wire, topic, READ_COMMITTED)
    return (committed["high_watermark"], committed["last_stable_offset"],
            committed["aborted_transactions"])


def test_a_restart_keeps_the_last_stable_offset_and_the_aborted_transactions(broker, mixed_topic):
    topic, _ = mixed_topic
    with WireClient(broker.bootstrap) as wire:
        before = _state(wire, topic)
    assert before[1] == 6 and len(before[2]) == 1
    broker.restart()
    with WireClient(broker.bootstrap) as wire:
        assert _state(wire, topic) == before
    broker.kill()
    broker.start()
    with WireClient(broker.bootstrap) as wire:
        assert _state(wire, topic) == before
    assert confluent_values(broker.bootstrap, topic, "read_committed", 3) == [b"a1", b"a2", b"p1"]


def test_a_new_leader_has_the_same_last_stable_offset_and_aborted_transactions(tmp_path, zk_connect):
    cluster = LocalCluster(tmp_path, zk_connect, broker_ids=(1, 2),
                           extra={"offsets.topic.replication.factor": 2, **UNVERIFIED}).start()
    try:
        topic = f"txn-failover-{uuid.uuid4().hex[:6]}"
        with WireClient(cluster.bootstrap(1)) as wire:
            body = create_body(topic, 1)
            body["topics"][0]["replication_factor"] = 2
            assert wire.call(ApiKey.CREATE_TOPICS, 4, body)["topics"][0]["error_code"] == 0
        leader = wait_until(lambda: cluster.leaders(1, topic).get(0, -1) > 0 and cluster.leaders(1, topic)[0],
                            message="a leader")
        follower = 3 - leader
        with WireClient(cluster.bootstrap(leader)) as wire:
            a, b = producer_id(wire), producer_id(wire)
            assert produce(wire, topic, txn_batch(a, 0, [b"a1"]))["error_code"] == 0
            assert produce(wire, topic, plain_batch([b"p1"]), None)["error_code"] == 0
            assert write_marker(wire, topic, a, commit=False) == 0  # answered once replicated
            assert produce(wire, topic, txn_batch(b, 0, [b"b1"]))["error_code"] == 0
            assert produce(wire, topic, plain_batch([b"p2"]), None)["error_code"] == 0
            before = _state(wire, topic)
        assert before == (5, 3, [{"producer_id": a, "first_offset": 0}])
        cluster.brokers[leader].kill()
        wait_until(lambda: cluster.leaders(follower, topic).get(0) == follower, timeout=30,
                   message="the follower to lead")
        with WireClient(cluster.bootstrap(follower)) as wire:
            wait_until(lambda: _state(wire, topic) == before, message="the new leader's state")
    finally:
        cluster.close()
