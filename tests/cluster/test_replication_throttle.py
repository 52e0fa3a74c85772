"""Replication throttles (KIP-73) on each side alone: a replica added by a reassignment
copies its first fetch and then waits while the leader's throttle, or the follower's, is
over its rate; raising the rate lets it finish. Replicas in the ISR are never throttled.

(tests/peer/test_kafka_admin_tools.py drives both sides at once through Kafka's
ReassignPartitionsCommand --throttle, next to Apache Kafka.)
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   ConfigSource, NewTopic)
from kafka import TopicPartition as KpPartition
from kafka.admin import KafkaAdminClient

from tests.cluster.cluster_helpers import LocalCluster
from tests.cluster.conftest import wait_until

TOPIC = "throttled"
RECORDS, SIZE = 3000, 1000  # 3 MB: three first fetches' worth (replica.fetch.max.bytes)
MIB = 2**20


@pytest.fixture
def cluster(tmp_path, zk_connect):
    cluster = LocalCluster(tmp_path, zk_connect, extra={
        "replica.fetch.wait.max.ms": 100, "auto.leader.rebalance.enable": "false"}).start()
    try:
        yield cluster
    finally:
        cluster.close()


def alter(admin: AdminClient, kind: ConfigResource.Type, name: str, **configs: str) -> None:
    resource = ConfigResource(kind, name, incremental_configs=[
        ConfigEntry(key.replace("_", "."), value,
                    incremental_operation=AlterConfigOpType.SET)
        for key, value in configs.items()])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def replica_bytes(cluster: LocalCluster, broker_id: int) -> int:
    directory = cluster.brokers[broker_id].log_dir / f"{TOPIC}-0"
    return sum(f.stat().st_size for f in directory.glob("*.log")) if directory.exists() else 0


@pytest.mark.parametrize("side", ["leader", "follower"])
def test_a_moving_replica_waits_for_the_throttle(cluster, side):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    admin.create_topics([NewTopic(TOPIC, 1, -1, replica_assignment=[[1, 2]])])[TOPIC].result(30)
    producer = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all",
                         "linger.ms": 20})
    for _ in range(RECORDS):
        producer.produce(TOPIC, b"x" * SIZE)
    assert producer.flush(60) == 0
    full = replica_bytes(cluster, 1)
    assert full >= RECORDS * SIZE

    # The leader (1) throttles what it sends to out-of-sync followers, or the new replica
    # (3) what it fetches; the existing follower (2) is in the ISR and keeps up either way.
    throttled_broker = 1 if side == "leader" else 3
    alter(admin, ConfigResource.Type.BROKER, str(throttled_broker),
          **{f"{side}_replication_throttled_rate": "10000"})
    alter(admin, ConfigResource.Type.TOPIC, TOPIC,
          **{f"{side}_replication_throttled_replicas": f"0:{throttled_broker}"})
    reassigner = KafkaAdminClient(bootstrap_servers=cluster.bootstrap())
    try:
        reassigner.alter_partition_reassignments({KpPartition(TOPIC, 0): [1, 2, 3]})
    finally:
        reassigner.close()

    wait_until(lambda: replica_bytes(cluster, 3) > 0, message="the new replica's first fetch")
    # More records for the replica in the ISR, and none for the throttled one.
    for _ in range(300):
        producer.produce(TOPIC, b"y" * SIZE)
    assert producer.flush(60) == 0
    wait_until(lambda: replica_bytes(cluster, 2) == replica_bytes(cluster, 1),
               message="the in-sync follower to keep up under the throttle")
    assert replica_bytes(cluster, 3) <= 1.1 * MIB < full

    alter(admin, ConfigResource.Type.BROKER, str(throttled_broker),
          **{f"{side}_replication_throttled_rate": str(10**9)})
    wait_until(lambda: replica_bytes(cluster, 3) == replica_bytes(cluster, 1), timeout=60,
               message="the new replica to catch up once the throttle is raised")


def pylog_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pylog.cli.main", *args],
                          capture_output=True, text=True, timeout=60)


def test_pylog_reassign_with_a_throttle(cluster, tmp_path):
    """``pylog partitions reassign --execute --throttle``: rates on the brokers of the move,
    replicas on the topic; the new replica waits; executing again with a higher throttle lets
    it finish; ``--verify`` then reports it completed and removes every throttle."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    admin.create_topics([NewTopic(TOPIC, 1, -1, replica_assignment=[[1, 2]])])[TOPIC].result(30)
    producer = Producer({"bootstrap.servers": cluster.bootstrap(), "linger.ms": 20})
    for _ in range(RECORDS):
        producer.produce(TOPIC, b"x" * SIZE)
    assert producer.flush(60) == 0
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": TOPIC, "partition": 0, "replicas": [3, 1]}]}))
    reassign = ("partitions", "reassign", "--bootstrap-server", cluster.bootstrap(),
                "--reassignment-json-file", str(plan))

    started = pylog_cli(*reassign, "--execute", "--throttle", "10000")
    assert started.returncode == 0, started.stderr
    assert "The inter-broker throttle limit was set to 10000 B/s on brokers 1,2,3" in started.stdout
    topic_configs = describe(admin, ConfigResource.Type.TOPIC, TOPIC)
    assert topic_configs["leader.replication.throttled.replicas"] == "0:1,0:2"
    assert topic_configs["follower.replication.throttled.replicas"] == "0:3"
    for broker_id in (1, 2, 3):
        assert describe(admin, ConfigResource.Type.BROKER, str(broker_id))[
            "follower.replication.throttled.rate"] == "10000"

    wait_until(lambda: replica_bytes(cluster, 3) > 0, message="the new replica's first fetch")
    moving = pylog_cli(*reassign, "--verify")
    assert moving.returncode == 1 and "is still in progress" in moving.stdout, moving.stdout
    assert replica_bytes(cluster, 3) <= 1.1 * MIB

    raised = pylog_cli(*reassign, "--execute", "--throttle", str(10**9))
    assert raised.returncode == 0, raised.stderr

    def verified():
        done = pylog_cli(*reassign, "--verify")
        return done if done.returncode == 0 else None
    done = wait_until(verified, timeout=60, message="the move to complete")
    assert "Reassignment of partition throttled-0 is completed" in done.stdout
    assert ("Cleared the replication throttles on broker 1; broker 2; broker 3; "
            "topic throttled") in done.stdout
    assert not any(key.endswith("throttled.replicas")
                   for key in describe(admin, ConfigResource.Type.TOPIC, TOPIC))
    assert not any("throttled" in key
                   for key in describe(admin, ConfigResource.Type.BROKER, "3"))
    assert replica_bytes(cluster, 3) == replica_bytes(cluster, 1)


def describe(admin: AdminClient, kind: ConfigResource.Type, name: str) -> dict[str, str]:
    """The configs set on the resource itself (dynamic ones)."""
    [future] = admin.describe_configs([ConfigResource(kind, name)]).values()
    return {entry.name: entry.value for entry in future.result(30).values()
            if entry.source in (ConfigSource.DYNAMIC_TOPIC_CONFIG.value,
                                ConfigSource.DYNAMIC_BROKER_CONFIG.value)}
