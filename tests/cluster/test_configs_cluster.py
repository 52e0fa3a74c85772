"""Topic configs altered at run time in a cluster: the change goes to ZooKeeper's
``/config/topics/<topic>`` and every broker applies it, the follower included.

Two broker processes on the module's ZooKeeper. The follower shows it applied the change
the way only a running log can: it rolls its segments at the new ``segment.bytes``.
"""

from __future__ import annotations

import json

from confluent_kafka import Producer

from pylog.client import Admin
from pylog.client.connection import BrokerConnection
from pylog.log import layout
from pylog.protocol import ApiKey
from pylog.protocol.configs import AlterConfigOp, ConfigResourceType
from tests.cluster.cluster_helpers import LocalCluster
from tests.cluster.conftest import wait_until

TOPIC = "altered"


def incremental_alter(port: int, configs: dict[str, str]) -> dict:
    """IncrementalAlterConfigs SETs sent to the broker on ``port`` itself."""
    connection = BrokerConnection("127.0.0.1", port, timeout_s=15)
    try:
        return connection.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, {
            "resources": [{"resource_type": int(ConfigResourceType.TOPIC),
                           "resource_name": TOPIC, "configs": [
                               {"name": k, "config_operation": int(AlterConfigOp.SET),
                                "value": v} for k, v in configs.items()]}],
            "validate_only": False})
    finally:
        connection.close()


def segment_count(cluster: LocalCluster, broker_id: int) -> int:
    partition_dir = cluster.brokers[broker_id].log_dir / f"{TOPIC}-0"
    return len(list(partition_dir.glob("*" + layout.LOG_SUFFIX)))


def test_an_alteration_reaches_zookeeper_and_the_follower(tmp_path, zk_connect, zk_client):
    cluster = LocalCluster(tmp_path, zk_connect, broker_ids=(1, 2), extra={
        "replica.fetch.wait.max.ms": 100, "auto.leader.rebalance.enable": "false"}).start()
    try:
        with Admin(cluster.bootstrap()) as admin:
            admin.create_topic(TOPIC, 1, 2, {"retention.ms": "3600000"})
        state = wait_until(lambda: (p := cluster.metadata(1, [TOPIC]).topics[TOPIC]
                                    .partitions.get(0)) and len(p.isr) == 2 and p,
                           message="both replicas in the ISR")
        leader = state.leader
        follower = 3 - leader
        # Creation wrote the node; the alteration (at the leader) rewrites it.
        response = incremental_alter(cluster.ports[leader], {"segment.bytes": "1024"})
        assert [r["error_code"] for r in response["responses"]] == [0]
        data, _ = zk_client.get(f"/config/topics/{TOPIC}")
        assert json.loads(data) == {"version": 1, "config": {"retention.ms": "3600000",
                                                             "segment.bytes": "1024"}}
        # The follower's own answer shows it...
        with Admin(cluster.bootstrap(follower)) as admin:
            wait_until(lambda: {e.name: e.value for e in admin.describe_configs(
                "topic", TOPIC, ["segment.bytes"])} == {"segment.bytes": "1024"},
                timeout=10, message="the follower to describe the new segment.bytes")
        assert segment_count(cluster, follower) == 1
        # ...and its running log rolls at 1 KiB: ~300-byte batches, three or so a segment.
        producer = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all",
                             "linger.ms": 0, "batch.num.messages": 1})
        for i in range(30):
            producer.produce(TOPIC, b"%03d" % i + b"x" * 250, partition=0)
        assert producer.flush(15) == 0
        wait_until(lambda: segment_count(cluster, follower) >= 5, timeout=10,
                   message="the follower's log to roll at the new segment.bytes")
    finally:
        cluster.close()
