"""pylog's client against three pylog brokers coordinated through a real ZooKeeper.

Each partition has its own leader, so requests must be routed per leader, and the client
must notice when a leader goes away or a partition moves and find the new one.
"""


import pytest

from pylog.client import Admin, Producer, SimpleConsumer, TopicPartition
from pylog.errors import KafkaError
from pylog.testing.zookeeper import zk_chroot_fixture, zookeeper_fixture
from pylog.testing.waiting import wait_until
from tests.cluster.cluster_helpers import LocalCluster

zookeeper = zookeeper_fixture()
zk_connect = zk_chroot_fixture()


@pytest.fixture
def cluster(tmp_path, zk_connect):
    local = LocalCluster(tmp_path, zk_connect).start()
    yield local
    local.close()


def test_requests_go_to_each_partitions_leader(cluster):
    with Admin(cluster.bootstrap(1)) as admin:
        admin.create_topic("routed", num_partitions=6)
    wait_until(lambda: -1 not in cluster.leaders(1, "routed").values() and
               len(cluster.leaders(1, "routed")) == 6, message="six leaders")
    leaders = cluster.leaders(1, "routed")
    assert len(set(leaders.values())) == 3
    with Producer(cluster.bootstrap(1)) as producer:  # bootstrap through one broker only
        futures = {p: [producer.send("routed", f"{p}-{i}".encode(), partition=p) for i in range(10)]
                   for p in range(6)}
    assert all(f.result().offset == i for fs in futures.values() for i, f in enumerate(fs))
    with SimpleConsumer(cluster.bootstrap(3)) as consumer:
        assert {p: consumer.leader_for("routed", p).broker_id for p in range(6)} == leaders
        results = consumer.fetch_many({TopicPartition("routed", p): 0 for p in range(6)})
    assert {tp.partition: [r.value.decode() for r in res.records] for tp, res in results.items()} == {
        p: [f"{p}-{i}" for i in range(10)] for p in range(6)}


def test_partition_moved_to_another_broker_is_found_again(cluster):
    with Admin(cluster.bootstrap(1)) as admin:
        admin.create_topic("moving", num_partitions=3)
    wait_until(lambda: sorted(cluster.leaders(1, "moving").values()) == [1, 2, 3], message="leaders")
    old_leaders = cluster.leaders(1, "moving")
    moved = next(p for p, leader in old_leaders.items() if leader == 2)
    with Producer(cluster.bootstrap(1, 3), retries=10) as producer, \
            SimpleConsumer(cluster.bootstrap(1, 3), retries=10) as consumer:
        assert producer.send("moving", b"first", partition=moved).result(timeout=30).offset == 0
        assert consumer.leader_for("moving", moved).broker_id == 2
        # Broker 2 leaves; the topic is re-created on the two brokers left, then 2 returns:
        # both clients still believe broker 2 leads the partition.
        cluster.brokers[2].stop()
        cluster.wait_for_brokers([1, 3])
        with Admin(cluster.bootstrap(1)) as admin:
            admin.delete_topic("moving")
            wait_until(lambda: "moving" not in admin.list_topics(), message="deletion")
            admin.create_topic("moving", num_partitions=3)
        wait_until(lambda: -1 not in cluster.leaders(1, "moving").values(), message="new leaders")
        new_leader = cluster.leaders(1, "moving")[moved]
        assert new_leader != 2
        cluster.brokers[2].start()
        cluster.wait_for_brokers([1, 2, 3])
        # Broker 2 now answers NOT_LEADER_OR_FOLLOWER / UNKNOWN_TOPIC_OR_PARTITION: the
        # clients refresh metadata and go to the new leader.
        assert producer.send("moving", b"second", partition=moved).result(timeout=30).offset == 0
        assert [r.value for r in consumer.fetch("moving", moved, 0).records] == [b"second"]
        assert consumer.leader_for("moving", moved).broker_id == new_leader


def test_offline_partition_fails_its_records_and_recovers(cluster):
    with Admin(cluster.bootstrap(1)) as admin:
        admin.create_topic("outage", num_partitions=3)
    wait_until(lambda: sorted(cluster.leaders(1, "outage").values()) == [1, 2, 3], message="leaders")
    on_two = next(p for p, leader in cluster.leaders(1, "outage").items() if leader == 2)
    others = [p for p in range(3) if p != on_two]
    with Producer(cluster.bootstrap(1, 3), retries=2, retry_backoff_ms=50) as producer:
        producer.send("outage", b"warm", partition=on_two).result(timeout=30)
        cluster.brokers[2].kill()
        lost = producer.send("outage", b"nowhere", partition=on_two)
        kept = [producer.send("outage", b"elsewhere", partition=p) for p in others]
        with pytest.raises(KafkaError) as caught:
            lost.result(timeout=60)
        assert caught.value.retriable  # a leader or connection problem, reported, not dropped
        assert [f.result(timeout=30).partition for f in kept] == others
        cluster.brokers[2].start()
        wait_until(lambda: cluster.leaders(1, "outage").get(on_two) == 2, message="leader back")
        assert producer.send("outage", b"back", partition=on_two).result(timeout=30).offset == 1
