"""ZkClusterMetadata against a real ZooKeeper: several brokers' cluster state in one process."""

from __future__ import annotations

import json
import threading

import pytest

from pylog.cluster import layout
from pylog.cluster.registry import BrokerIdInUseError
from pylog.cluster.session import ZooKeeperUnavailableError, split_connect
from pylog.errors import (ConfigError, InvalidPartitionsError, InvalidReplicationFactorError,
                          InvalidTopicError, TopicAlreadyExistsError,
                          UnknownTopicOrPartitionError)
from pylog.testing.process import free_port
from tests.cluster.conftest import wait_until


def leaders(metadata, topic):
    found = metadata.topic(topic)
    return None if found is None else {p: s.leader for p, s in found.partitions.items()}


def test_brokers_register_ephemeral_nodes_in_the_seed_format(start_broker, zk_client):
    brokers = [start_broker(broker_id) for broker_id in (2, 0, 1)]
    node, stat = zk_client.get("/brokers/ids/2")
    assert stat.ephemeralOwner != 0
    registration = json.loads(node)
    assert registration["host"] == "127.0.0.1" and registration["port"] == 9002
    assert registration["endpoints"] == ["PLAINTEXT://127.0.0.1:9002"]
    assert registration["jmx_port"] == -1 and int(registration["timestamp"]) > 0
    for metadata in brokers:
        wait_until(lambda: [b.broker_id for b in metadata.brokers()] == [0, 1, 2],
                   message="all three brokers in every view")
    assert brokers[0].brokers()[1].address == "127.0.0.1:9001"
    assert len({metadata.cluster_id for metadata in brokers}) == 1
    assert zk_client.get("/cluster/id")[0] == layout.encode_cluster_id(brokers[0].cluster_id)


def test_nodes_live_under_the_chroot(start_broker, zookeeper, zk_connect):
    from kazoo.client import KazooClient

    start_broker(1)
    root = KazooClient(hosts=zookeeper.connect_string)
    root.start()
    try:
        chroot = split_connect(zk_connect)[1]
        assert root.exists(f"{chroot}/brokers/ids/1") is not None
        assert root.exists("/brokers/ids/1") is None
    finally:
        root.stop()
        root.close()


def test_second_broker_with_the_same_id_is_refused(start_broker):
    start_broker(5)
    with pytest.raises(BrokerIdInUseError, match="broker.id 5 is already registered"):
        start_broker(5, port=9999)


def test_unreachable_zookeeper_and_bad_connect_string_are_clear_errors(start_broker):
    with pytest.raises(ZooKeeperUnavailableError, match="could not connect to ZooKeeper"):
        start_broker(1, connect=f"127.0.0.1:{free_port()}", connection_timeout_ms=1000)
    with pytest.raises(ConfigError, match="zookeeper.connect"):
        split_connect("/just-a-chroot")


def test_topic_placement_and_leaders_follow_the_seed_rule(start_broker, zk_client):
    brokers = [start_broker(broker_id) for broker_id in (10, 20, 30)]
    wait_until(lambda: len(brokers[1].brokers()) == 3, message="three live brokers")
    created = brokers[1].create_topic("spread", num_partitions=5, replication_factor=2,
                                      configs={"retention.ms": "60000"})
    expected = {0: (10, 20), 1: (20, 30), 2: (30, 10), 3: (10, 20), 4: (20, 30)}
    assert {p: s.replicas for p, s in created.partitions.items()} == expected
    assert {p: s.leader for p, s in created.partitions.items()} == {
        p: replicas[0] for p, replicas in expected.items()}
    node = json.loads(zk_client.get("/brokers/topics/spread")[0])
    assert node == {"version": 3, "topic_id": layout.uuid_text(created.topic_id),
                    "partitions": {str(p): list(r) for p, r in expected.items()},
                    "adding_replicas": {}, "removing_replicas": {}}
    state = json.loads(zk_client.get("/brokers/topics/spread/partitions/2/state")[0])
    # Every live replica starts in sync: they all hold the same empty log.
    assert state["leader"] == 30 and state["isr"] == [30, 10] and state["leader_epoch"] == 0
    assert state["version"] == 1 and state["controller_epoch"] >= 1
    assert json.loads(zk_client.get("/config/topics/spread")[0])["config"] == {
        "retention.ms": "60000"}
    for metadata in brokers:
        wait_until(lambda: leaders(metadata, "spread") == {
            p: r[0] for p, r in expected.items()}, message="every view shows the leaders")
        assert metadata.topic("spread").configs == {"retention.ms": "60000"}
        assert metadata.topic("spread").topic_id == created.topic_id


def test_topic_ids_survive_changes_and_old_topics_are_given_one(start_broker, zk_client):
    brokers = [start_broker(broker_id) for broker_id in (1, 2)]
    wait_until(lambda: len(brokers[0].brokers()) == 2, message="two live brokers")
    topic_id = brokers[0].create_topic("kept", 1, replication_factor=2).topic_id
    assert topic_id is not None
    brokers[1].add_partitions("kept", 3)
    assert layout.decode_topic_id(zk_client.get("/brokers/topics/kept")[0]) == topic_id
    for metadata in brokers:
        wait_until(lambda: metadata.topic("kept") is not None
                   and metadata.topic("kept").num_partitions == 3, message="three partitions")
        assert metadata.topic("kept").topic_id == topic_id
    # A topic written the way older brokers and tools write it, without an id: the
    # controller gives it one, and every broker sees the same.
    zk_client.create("/brokers/topics/legacy", layout.encode_assignment({0: (1, 2)}))
    given = wait_until(lambda: layout.decode_topic_id(
        zk_client.get("/brokers/topics/legacy")[0]), message="an id for the old topic")
    for metadata in brokers:
        wait_until(lambda: metadata.topic("legacy") is not None
                   and metadata.topic("legacy").topic_id == given, message="the id seen")
    # An older writer rewrites the node without the id (growing the topic): the
    # controller gives the same id back, not a new one.
    zk_client.set("/brokers/topics/legacy", layout.encode_assignment({0: (1, 2), 1: (2, 1)}))
    wait_until(lambda: layout.decode_topic_id(zk_client.get("/brokers/topics/legacy")[0]),
               message="the id back")
    assert layout.decode_topic_id(zk_client.get("/brokers/topics/legacy")[0]) == given
    # An unreadable id is left alone, and the controller goes on with other topics.
    zk_client.create("/brokers/topics/garbled", json.dumps(
        {"version": 3, "topic_id": "not-an-id", "partitions": {"0": [1]}}).encode())
    zk_client.create("/brokers/topics/after", layout.encode_assignment({0: (2,)}))
    wait_until(lambda: layout.decode_topic_id(zk_client.get("/brokers/topics/after")[0]),
               message="an id for the topic after the unreadable one")
    wait_until(lambda: brokers[0].topic("after") is not None
               and brokers[0].topic("after").partitions[0].leader == 2, message="its leader")
    assert json.loads(zk_client.get("/brokers/topics/garbled")[0])["topic_id"] == "not-an-id"
    assert brokers[0].topic("garbled") is not None and brokers[0].topic("garbled").topic_id is None


def test_topic_creation_errors(start_broker):
    first, _ = start_broker(1), start_broker(2)
    wait_until(lambda: len(first.brokers()) == 2, message="two live brokers")
    with pytest.raises(InvalidReplicationFactorError):
        first.create_topic("too-many", 1, replication_factor=3)
    with pytest.raises(InvalidPartitionsError):
        first.create_topic("none", 0)
    with pytest.raises(InvalidTopicError):
        first.create_topic("bad name", 1)
    first.create_topic("once", 2)
    with pytest.raises(TopicAlreadyExistsError):
        first.create_topic("once", 2)
    assert first.topic("too-many") is None and first.topic("none") is None


def test_listeners_fire_on_changes(start_broker):
    first = start_broker(1)
    changed = threading.Event()
    first.add_listener(changed.set)
    second = start_broker(2)
    second.create_topic("noticed", 1)
    wait_until(changed.is_set, message="a listener call")
    wait_until(lambda: first.topic("noticed") is not None, message="the topic in the view")


def test_delete_topic_removes_it_everywhere(start_broker, zk_client):
    first, second = start_broker(1), start_broker(2)
    wait_until(lambda: len(first.brokers()) == 2, message="two live brokers")
    first.create_topic("doomed", 3)
    wait_until(lambda: second.topic("doomed") is not None, message="topic seen")
    second.delete_topic("doomed")
    assert second.topic("doomed") is None
    wait_until(lambda: first.topic("doomed") is None, message="topic gone from other view")
    assert zk_client.exists("/brokers/topics/doomed") is None
    assert zk_client.exists("/config/topics/doomed") is None
    assert zk_client.get_children("/admin/delete_topics") == []
    with pytest.raises(UnknownTopicOrPartitionError):
        first.delete_topic("doomed")
    recreated = first.create_topic("doomed", 1)
    assert list(recreated.partitions) == [0]
    assert recreated.partitions[0].leader == recreated.partitions[0].replicas[0]
    assert zk_client.exists("/brokers/topics/doomed/partitions/0/state") is not None


def test_restart_waits_for_the_registration_of_its_crashed_predecessor(start_broker, zk_connect,
                                                                       zk_client):
    from pylog.cluster.layout import BrokerRegistration
    from pylog.cluster.session import close_client, connect_client

    predecessor = connect_client(zk_connect, 5.0, 10.0)
    predecessor.create("/brokers/ids/7", BrokerRegistration(7, "127.0.0.1", 9007).encode(1),
                       ephemeral=True, makepath=True)
    # The old session ends while the new broker is already waiting for the id.
    threading.Timer(0.5, close_client, [predecessor]).start()
    restarted = start_broker(7, session_timeout_ms=5000)
    wait_until(lambda: [b.broker_id for b in restarted.brokers()] == [7],
               message="the restarted broker registered")
    assert zk_client.get("/brokers/ids/7")[1].ephemeralOwner == restarted.session[0]
