"""Replication throttles (KIP-73) on each side alone: a replica added by a reassignment
copies its first fetch and then waits while the leader's throttle, or the follower's, is
over its rate; raising the rate lets it finish. Replicas in the ISR are never throttled.

(tests/peer/test_kafka_admin_tools.py drives both sides at once through Kafka's
ReassignPartitionsCommand --throttle, next to Apache Kafka.)
"""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   NewTopic)
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
