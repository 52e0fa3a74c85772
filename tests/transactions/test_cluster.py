"""Three brokers: the broker coordinating a transaction is SIGKILLed in the middle of it;
the new leader of its ``__transaction_state`` partition loads it and commits it."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, NewTopic

from pylog.testing.zookeeper import zk_chroot_fixture, zookeeper_fixture
from tests.cluster.cluster_helpers import LocalCluster
from tests.transactions.clients import END, describe, read_until_end, transactional

zookeeper = zookeeper_fixture()
zk_connect = zk_chroot_fixture()

CLUSTER_SETTINGS = {"transaction.state.log.num.partitions": 3,
                    "transaction.state.log.replication.factor": 3,
                    "transaction.state.log.min.isr": 2,
                    "offsets.topic.num.partitions": 3, "offsets.topic.replication.factor": 3,
                    "default.replication.factor": 3}


def test_the_next_coordinator_commits_a_transaction_whose_coordinator_was_killed(
        tmp_path, zk_connect):
    cluster = LocalCluster(tmp_path, zk_connect, extra=CLUSTER_SETTINGS).start()
    try:
        bootstrap = cluster.bootstrap()
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("txn-failover", 1, 3)])["txn-failover"].result(20)
        producer = transactional(bootstrap, "failover")
        producer.begin_transaction()
        values = [f"f{i}".encode() for i in range(5)] + [END]
        for value in values:
            producer.produce("txn-failover", value=value, partition=0)
        producer.flush(30)
        before = describe(bootstrap, "failover")
        assert before["transaction_state"] == "Ongoing"

        coordinator = _coordinator_id(cluster, "failover")
        cluster.brokers[coordinator].kill()
        survivors = [b for b in cluster.brokers if b != coordinator]
        producer.commit_transaction(90)

        survivor_bootstrap = cluster.bootstrap(*survivors)
        assert read_until_end(survivor_bootstrap, "txn-failover", "read_committed") == values
        after = describe(survivor_bootstrap, "failover")
        assert (after["producer_id"], after["producer_epoch"]) == (
            before["producer_id"], before["producer_epoch"])
        assert _coordinator_id(cluster, "failover", survivors[0]) in survivors
    finally:
        cluster.close()


def _coordinator_id(cluster: LocalCluster, transactional_id: str, via: int | None = None) -> int:
    from pylog.client.connection import BrokerConnection
    from pylog.protocol import ApiKey

    via = via if via is not None else next(iter(cluster.brokers))
    connection = BrokerConnection("127.0.0.1", cluster.ports[via], timeout_s=30)
    try:
        found = connection.request(ApiKey.FIND_COORDINATOR, {"key": transactional_id,
                                                             "key_type": 1}, 3)
    finally:
        connection.close()
    assert found["error_code"] == 0, found
    return found["node_id"]
