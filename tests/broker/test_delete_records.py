"""DeleteRecords (api key 21) through confluent-kafka's AdminClient.delete_records and the
``pylog delete-records`` CLI: on a standalone broker subprocess (low watermark, consumers
from the beginning, ListOffsets earliest, offset -1, out of range, a restart, ACLs) and on a
two-broker ZooKeeper cluster, whose follower takes the leader's new log start offset.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition)
from confluent_kafka.admin import AdminClient, NewTopic

from pylog.client.connection import BrokerConnection
from pylog.errors import UnknownTopicOrPartitionError
from pylog.protocol import ApiKey
from pylog.security.acl_store import FileAclStore
from pylog.security.acls import (
    AccessControlEntry, AclBinding, AclOperation, AclPermission, ResourcePattern, ResourceType)
from pylog.testing.broker import BrokerProcess
from pylog.testing.zookeeper import zk_chroot_fixture, zookeeper_fixture
from tests.cluster.cluster_helpers import LocalCluster
from tests.cluster.conftest import wait_until

zookeeper = zookeeper_fixture()
zk_connect = zk_chroot_fixture()

SMALL_SEGMENTS = {"segment.bytes": "1024"}
UNKNOWN_TOPIC_OR_PARTITION = UnknownTopicOrPartitionError.errno


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = BrokerProcess(tmp_path_factory.mktemp("delete-records"),
                            {"num.partitions": 1, "auto.create.topics.enable": "false"})
    process.start()
    try:
        yield process
    finally:
        process.stop()


def create(bootstrap: str, topic: str, replication: int = 1, configs=None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.create_topics([NewTopic(topic, 1, replication,
                                           config=configs or SMALL_SEGMENTS)])[topic]
    future.result(timeout=30)


def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all",
                         "batch.num.messages": 5})
    for i in range(count):
        producer.produce(topic, value=f"record-{i:04d}".encode() * 10)
        producer.poll(0)
    assert producer.flush(30) == 0


def delete_records(bootstrap: str, topic: str, offset: int, timeout: float = 30):
    """The partition's low watermark (raises KafkaException for a refused partition);
    ``timeout`` is how long the leader waits for its in-sync replicas."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records([TopicPartition(topic, 0, offset)],
                                   request_timeout=timeout + 20, operation_timeout=timeout)
    return futures[TopicPartition(topic, 0, offset)].result(timeout=timeout + 30).low_watermark


def earliest_and_latest(bootstrap: str, topic: str) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=15)
    finally:
        consumer.close()


def first_consumed_offset(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"from-start-{topic}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        for _ in range(100):
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                return message.offset()
        pytest.fail("nothing consumed")
    finally:
        consumer.close()


def segment_bases(log_dir, topic: str) -> list[int]:
    return sorted(int(p.stem) for p in (log_dir / f"{topic}-0").glob("*.log"))


def test_delete_records_standalone(broker):
    topic = "deletable"
    create(broker.bootstrap, topic)
    produce(broker.bootstrap, topic, 100)
    assert len(segment_bases(broker.log_dir, topic)) > 3

    answer = delete_records(broker.bootstrap, topic, 42)
    assert answer == 42
    assert earliest_and_latest(broker.bootstrap, topic) == (42, 100)
    assert first_consumed_offset(broker.bootstrap, topic) == 42
    assert segment_bases(broker.log_dir, topic)[0] <= 42 < segment_bases(broker.log_dir,
                                                                          topic)[1]

    # Never down: an offset below the log start leaves it where it is.
    assert delete_records(broker.bootstrap, topic, 10) == 42
    # Above the high watermark: OFFSET_OUT_OF_RANGE, nothing moves.
    with pytest.raises(KafkaException) as refused:
        delete_records(broker.bootstrap, topic, 101)
    assert refused.value.args[0].name() == "OFFSET_OUT_OF_RANGE"
    assert earliest_and_latest(broker.bootstrap, topic) == (42, 100)

    # -1: up to the high watermark; the log keeps only its active segment.
    assert delete_records(broker.bootstrap, topic, -1) == 100
    assert earliest_and_latest(broker.bootstrap, topic) == (100, 100)
    produce(broker.bootstrap, topic, 3)
    assert first_consumed_offset(broker.bootstrap, topic) == 100

    broker.kill()  # no clean shutdown: the checkpoint written at the deletion counts
    broker.start()
    assert earliest_and_latest(broker.bootstrap, topic) == (100, 103)
    assert first_consumed_offset(broker.bootstrap, topic) == 100


def test_unknown_partition_and_compacted_topic(broker):
    # librdkafka refuses an unknown topic itself: ask the broker directly.
    connection = BrokerConnection(broker.host, broker.port)
    try:
        connection.connect()
        answer = connection.request(ApiKey.DELETE_RECORDS, {"timeout_ms": 1000, "topics": [
            {"name": "no-such-topic", "partitions": [{"partition_index": 0, "offset": 1}]}]})
    finally:
        connection.close()
    assert answer["topics"][0]["partitions"][0]["error_code"] == UNKNOWN_TOPIC_OR_PARTITION
    create(broker.bootstrap, "compacted", configs={"cleanup.policy": "compact"})
    with pytest.raises(KafkaException) as compacted:
        delete_records(broker.bootstrap, "compacted", 0)
    assert compacted.value.args[0].name() == "POLICY_VIOLATION"


def test_acls_refuse_topics_without_delete(tmp_path):
    process = BrokerProcess(tmp_path / "authz", {
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "allow.everyone.if.no.acl.found": "false", "auto.create.topics.enable": "false"})
    process.log_dir.mkdir(parents=True)
    anyone = AccessControlEntry
    FileAclStore(process.log_dir).create(
        [AclBinding(ResourcePattern(ResourceType.CLUSTER, "kafka-cluster"),
                    anyone("User:ANONYMOUS", "*", AclOperation.CREATE, AclPermission.ALLOW))]
        + [AclBinding(ResourcePattern(ResourceType.TOPIC, topic),
                      anyone("User:ANONYMOUS", "*", operation, AclPermission.ALLOW))
           for topic in ("allowed", "refused")
           for operation in (AclOperation.WRITE, AclOperation.DESCRIBE)]
        + [AclBinding(ResourcePattern(ResourceType.TOPIC, "allowed"),
                      anyone("User:ANONYMOUS", "*", AclOperation.DELETE, AclPermission.ALLOW))])
    with process.start():
        for topic in ("allowed", "refused"):
            create(process.bootstrap, topic)
            produce(process.bootstrap, topic, 10)
        admin = AdminClient({"bootstrap.servers": process.bootstrap})
        futures = admin.delete_records([TopicPartition("allowed", 0, 4),
                                        TopicPartition("refused", 0, 4)], request_timeout=30)
        answers = {tp.topic: future for tp, future in futures.items()}
        assert answers["allowed"].result(timeout=40).low_watermark == 4
        with pytest.raises(KafkaException) as refused:
            answers["refused"].result(timeout=40)
        assert refused.value.args[0].name() == "TOPIC_AUTHORIZATION_FAILED"
        assert earliest_and_latest(process.bootstrap, "refused") == (0, 10)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pylog.cli.main", "delete-records", *args],
                          capture_output=True, text=True, timeout=60)


def test_cli(broker, tmp_path):
    topic = "cli-deletable"
    create(broker.bootstrap, topic)
    produce(broker.bootstrap, topic, 20)
    offsets = tmp_path / "offsets.json"
    offsets.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "offset": 7}]}))
    done = run_cli("--bootstrap-server", broker.bootstrap, "--offset-json-file", str(offsets))
    assert done.returncode == 0, done.stderr
    assert f"partition: {topic}-0\tlow_watermark: 7" in done.stdout
    assert earliest_and_latest(broker.bootstrap, topic) == (7, 20)

    offsets.write_text('{"partitions": [{"topic": "x", "partition": 0}]}')
    bad = run_cli("--bootstrap-server", broker.bootstrap, "--offset-json-file", str(offsets))
    assert bad.returncode != 0
    assert len(bad.stderr.strip().splitlines()) == 1 and "offset" in bad.stderr
    assert earliest_and_latest(broker.bootstrap, topic) == (7, 20)


def replica_log_start(broker: BrokerProcess, topic: str) -> int:
    """The log start offset of this broker's replica, leader or follower (ListOffsets
    earliest as Kafka's debugging replica id -2 asks it)."""
    connection = BrokerConnection(broker.host, broker.port)
    try:
        connection.connect()
        answer = connection.request(ApiKey.LIST_OFFSETS, {
            "replica_id": -2, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
                {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -2,
                 "max_num_offsets": 1}]}]})
    finally:
        connection.close()
    return answer["topics"][0]["partitions"][0]["offset"]


def test_follower_takes_new_log_start(tmp_path, zk_connect):
    cluster = LocalCluster(tmp_path, zk_connect, broker_ids=(1, 2), session_timeout_ms=10000,
                           extra={"replica.fetch.wait.max.ms": 200}).start()
    brokers = cluster.brokers
    try:
        bootstrap = ",".join(b.bootstrap for b in brokers.values())
        create(bootstrap, "replicated", replication=2)
        produce(bootstrap, "replicated", 60)
        assert delete_records(bootstrap, "replicated", 30) == 30
        # The answer came once both replicas started at 30; each deleted its segments
        # wholly below it.
        for broker in brokers.values():
            assert replica_log_start(broker, "replicated") == 30
            assert 0 < segment_bases(broker.log_dir, "replicated")[0] <= 30

        # A paused follower (still in the ISR) never confirms: REQUEST_TIMED_OUT, though
        # the leader has moved its log start; the follower takes it once it runs again.
        leader_id = AdminClient({"bootstrap.servers": bootstrap}).list_topics(
            "replicated", timeout=15).topics["replicated"].partitions[0].leader
        follower = brokers[3 - leader_id]
        follower.pause()
        try:
            with pytest.raises(KafkaException) as timed_out:
                delete_records(brokers[leader_id].bootstrap, "replicated", 40, timeout=1)
            assert timed_out.value.args[0].name() == "REQUEST_TIMED_OUT"
            assert replica_log_start(brokers[leader_id], "replicated") == 40
        finally:
            follower.resume()
        wait_until(lambda: replica_log_start(follower, "replicated") == 40,
                   message="the follower taking log start 40")
        assert earliest_and_latest(bootstrap, "replicated") == (40, 60)
    finally:
        cluster.close()
