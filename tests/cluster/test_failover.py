"""Controller election and failover, brokers leaving and returning, ZooKeeper session loss."""

from __future__ import annotations

import json
import signal

import pytest

from pylog.cluster import layout
from pylog.cluster.controller import Controller, ControllerMovedError
from pylog.cluster.metadata import NO_LEADER
from pylog.cluster.session import close_client, connect_client
from pylog.cluster.zk import ZkClusterMetadata
from pylog.testing.zookeeper import expire_session, running_zookeeper
from tests.cluster.conftest import SESSION_TIMEOUT_MS, wait_until


def partition_states(metadata, topic):
    found = metadata.topic(topic)
    return {} if found is None else dict(found.partitions)


def the_controller(brokers):
    """The one broker acting as controller, once every view agrees on it."""
    def agreed():
        active = [b for b in brokers if b.is_controller()]
        ids = {b.controller_id() for b in brokers}
        if len(active) == 1 and ids == {active[0].local_broker_id}:
            return active[0]
        return None
    return wait_until(agreed, message="one agreed controller")


def test_one_controller_is_elected_and_another_takes_over(start_broker, zk_client):
    brokers = [start_broker(broker_id) for broker_id in (1, 2, 3)]
    first = the_controller(brokers)
    node = json.loads(zk_client.get("/controller")[0])
    assert node["version"] == 1 and node["brokerid"] == first.local_broker_id
    epoch = int(zk_client.get("/controller_epoch")[0])
    first.close()
    survivors = [b for b in brokers if b is not first]
    second = the_controller(survivors)
    assert second is not first
    assert int(zk_client.get("/controller_epoch")[0]) == epoch + 1


def test_partitions_go_offline_with_their_broker_and_come_back(start_broker, zk_client):
    brokers = {broker_id: start_broker(broker_id) for broker_id in (1, 2, 3)}
    wait_until(lambda: len(brokers[1].brokers()) == 3, message="three live brokers")
    brokers[1].create_topic("moves", num_partitions=6)
    observer = brokers[1] if not brokers[1].is_controller() else brokers[2]
    leaving = 3 if observer.local_broker_id != 3 else 2
    brokers[leaving].close()
    wait_until(lambda: all(
        (s.leader == NO_LEADER) == (s.replicas[0] == leaving)
        for s in partition_states(observer, "moves").values()), message="offline leaders")
    offline = {p: s for p, s in partition_states(observer, "moves").items()
               if s.leader == NO_LEADER}
    assert sorted(offline) == [p for p in range(6) if p % 3 == leaving - 1]
    assert all(s.leader_epoch == 1 for s in offline.values())
    back = start_broker(leaving)
    for metadata in (observer, back):
        wait_until(lambda: all(s.leader == s.replicas[0]
                               for s in partition_states(metadata, "moves").values()),
                   message="leaders back")
    assert {p: partition_states(observer, "moves")[p].leader_epoch for p in offline} == {
        p: 2 for p in offline}
    state = json.loads(zk_client.get(f"/brokers/topics/moves/partitions/{min(offline)}/state")[0])
    assert state["leader"] == leaving and state["leader_epoch"] == 2


def test_expired_session_hides_leadership_until_registered_again(start_broker, zk_client,
                                                                 zk_connect):
    brokers = {broker_id: start_broker(broker_id) for broker_id in (1, 2)}
    wait_until(lambda: len(brokers[2].brokers()) == 2, message="two live brokers")
    brokers[1].create_topic("expiry", num_partitions=2)
    broker = brokers[2]
    seen: list[int] = []
    broker.add_listener(lambda: seen.append(partition_states(broker, "expiry")[1].leader))
    old_owner = zk_client.get("/brokers/ids/2")[1].ephemeralOwner
    expire_session(zk_connect, broker.session)
    wait_until(lambda: broker.session and broker.session[0] != old_owner
               and (stat := zk_client.exists("/brokers/ids/2")) is not None
               and stat.ephemeralOwner == broker.session[0], message="registered again")
    wait_until(lambda: partition_states(broker, "expiry")[1].leader == 2,
               message="leadership back after re-registration")
    hidden = seen.index(NO_LEADER)
    assert 2 in seen[hidden:]
    wait_until(lambda: partition_states(brokers[1], "expiry")[1].leader == 2,
               message="the other broker to see the leadership back")


def test_controller_session_expiry_hands_control_on(start_broker, zk_client, zk_connect):
    brokers = [start_broker(broker_id) for broker_id in (1, 2, 3)]
    controller = the_controller(brokers)
    epoch = int(zk_client.get("/controller_epoch")[0])
    expire_session(zk_connect, controller.session)
    wait_until(lambda: int(zk_client.get("/controller_epoch")[0]) > epoch,
               message="a new controller epoch")
    successor = the_controller(brokers)
    successor.create_topic("after-failover", 3)
    for metadata in brokers:
        wait_until(lambda: [s.leader for s in partition_states(
            metadata, "after-failover").values()] == [1, 2, 3], message="leaders elected")


def test_a_replaced_controller_cannot_write_states(zk_connect):
    clients = [connect_client(zk_connect, 5.0, 10.0) for _ in range(2)]
    try:
        for client in clients:
            for path in layout.PERSISTENT_ROOTS:
                client.ensure_path(path)
        old, new = Controller(clients[0], 1), Controller(clients[1], 2)
        assert old.elect() and not new.elect()
        clients[1].delete(layout.CONTROLLER)
        assert new.elect() and new.epoch == old.epoch + 1
        clients[1].create(layout.topic_path("fenced"), layout.encode_assignment({0: (1,)}))
        with pytest.raises(ControllerMovedError):
            old.reconcile()
        assert not old.active
        assert clients[1].exists(layout.partition_state_path("fenced", 0)) is None
        new.reconcile()
        state = layout.PartitionStateNode.decode(
            clients[1].get(layout.partition_state_path("fenced", 0))[0])
        assert state.controller_epoch == new.epoch
    finally:
        for client in clients:
            close_client(client)


def test_suspended_connection_stops_claiming_leadership(tmp_path):
    """A ZooKeeper that stops answering suspends the session; leadership is hidden."""
    with running_zookeeper(tmp_path) as server:
        metadata = ZkClusterMetadata(server.connect_string + "/suspend", 1, "127.0.0.1", 9001,
                                     session_timeout_ms=4000, admin_timeout=15.0)
        try:
            metadata.create_topic("paused", 1)
            wait_until(lambda: partition_states(metadata, "paused")[0].leader == 1,
                       message="leader")
            server.server.signal(signal.SIGSTOP)
            try:
                wait_until(lambda: partition_states(metadata, "paused")[0].leader == NO_LEADER,
                           message="leadership hidden while suspended")
            finally:
                server.server.signal(signal.SIGCONT)
            wait_until(lambda: partition_states(metadata, "paused")[0].leader == 1,
                       message="leadership back once connected")
        finally:
            metadata.close()


class SteppableClock:
    """time.monotonic plus an offset a test can push forward (a pause, as the broker sees it)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        import time
        return time.monotonic() + self.offset


def test_leadership_is_hidden_once_the_session_lease_runs_out(start_broker):
    clock = SteppableClock()
    broker = start_broker(1, clock=clock)
    broker.create_topic("leased", 1)
    wait_until(lambda: partition_states(broker, "leased")[0].leader == 1, message="leader")
    clock.offset += SESSION_TIMEOUT_MS / 1000
    assert broker.topic("leased").partitions[0].leader == NO_LEADER
    assert broker.topics()["leased"].partitions[0].leader == NO_LEADER
    wait_until(lambda: broker.topic("leased").partitions[0].leader == 1,
               message="lease renewed by the next round trip")


def test_admin_calls_fail_fast_and_retriably_without_zookeeper(tmp_path):
    from pylog.errors import RequestTimedOutError, RetriableError

    with running_zookeeper(tmp_path) as server:
        metadata = ZkClusterMetadata(server.connect_string + "/gone", 1, "127.0.0.1", 9001,
                                     session_timeout_ms=4000, admin_timeout=15.0)
        try:
            metadata.create_topic("before", 1)
            server.kill()
            wait_until(lambda: not metadata.connected,
                       message="the client to notice ZooKeeper is gone")
            with pytest.raises(RequestTimedOutError, match="not connected to ZooKeeper") as raised:
                metadata.create_topic("during", 1)
            assert isinstance(raised.value, RetriableError)
            with pytest.raises(RequestTimedOutError):
                metadata.delete_topic("before")
            assert metadata.topic("before") is not None  # the view still answers reads
        finally:
            metadata.close()
