"""Three brokers: the broker coordinating a transaction is SIGKILLed in the middle of it;
the new leader of its ``__transaction_state`` partition loads it and commits it. Then a
partition leader verifies transactional batches with a coordinator on another broker
(KIP-890): a late batch of a committed transaction is refused, and a batch whose
coordinator does not answer is refused retriably."""

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
        _late_batch_refused_by_a_remote_coordinator(cluster, survivors)
    finally:
        cluster.close()


def _late_batch_refused_by_a_remote_coordinator(cluster: LocalCluster, live: list[int]) -> None:
    from pylog.client.connection import BrokerConnection
    from pylog.protocol import ApiKey
    from tests.transactions.conftest import init_producer, wait_until
    from tests.transactions.test_coordinator_wire import add_partitions, end_txn
    from tests.transactions.test_verification import produce

    leader = cluster.leaders(live[0], "txn-failover")[0]
    transactional_id = next(t for t in (f"remote-{i}" for i in range(100))
                            if _coordinator_id(cluster, t, live[0]) != leader)
    coordinator = _coordinator_id(cluster, transactional_id, live[0])
    to_coordinator = BrokerConnection("127.0.0.1", cluster.ports[coordinator], timeout_s=30)
    to_leader = BrokerConnection("127.0.0.1", cluster.ports[leader], timeout_s=30)
    try:
        producer = init_producer(to_coordinator, transactional_id)
        producer_id, epoch = producer["producer_id"], producer["producer_epoch"]
        assert add_partitions(to_coordinator, transactional_id, producer_id, epoch,
                              {"txn-failover": [0]}) == {("txn-failover", 0): 0}
        # The leader asks the other broker, which vouches for the partition.
        assert produce(to_leader, "txn-failover", 0, transactional_id, producer_id, epoch,
                       0)[0] == 0
        assert end_txn(to_coordinator, transactional_id, producer_id, epoch, True) == 0
        wait_until(lambda: to_coordinator.request(ApiKey.DESCRIBE_TRANSACTIONS, {
            "transactional_ids": [transactional_id]}, 0)["transaction_states"][0][
                "transaction_state"] == "CompleteCommit", message="the commit")
        assert produce(to_leader, "txn-failover", 0, transactional_id, producer_id, epoch,
                       1) == (48, -1)  # INVALID_TXN_STATE: not in any transaction now

        # A coordinator that does not answer (SIGSTOP, shorter than its ZooKeeper session):
        # NOT_ENOUGH_REPLICAS, which clients retry, and nothing written; the retry passes.
        assert add_partitions(to_coordinator, transactional_id, producer_id, epoch,
                              {"txn-failover": [0]}) == {("txn-failover", 0): 0}
        cluster.brokers[coordinator].pause()
        try:
            assert produce(to_leader, "txn-failover", 0, transactional_id, producer_id, epoch,
                           1, timeout_ms=1000) == (19, -1)
        finally:
            cluster.brokers[coordinator].resume()
        assert produce(to_leader, "txn-failover", 0, transactional_id, producer_id, epoch,
                       1)[0] == 0
        assert end_txn(to_coordinator, transactional_id, producer_id, epoch, False) == 0
    finally:
        to_coordinator.close()
        to_leader.close()


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
