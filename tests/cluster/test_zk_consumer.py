"""The seeds' ZooKeeper-coordinated consumer groups against a real three-broker cluster."""

from __future__ import annotations

import sys
import uuid

import pytest

from pylog.client import Admin
from pylog.client.zk_consumer import ZkConsumer
from pylog.testing.process import ServerProcess
from pylog.types import TopicPartition
from tests.cluster import clients
from tests.cluster.cluster_helpers import LocalCluster
from tests.cluster.conftest import wait_until


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    connect = f"{zookeeper.connect_string}/consumers-{uuid.uuid4().hex[:8]}"
    local = LocalCluster(tmp_path_factory.mktemp("cluster"), connect).start()
    local.zk_connect = connect
    yield local
    local.close()


@pytest.fixture
def consumers(cluster):
    started: list[ZkConsumer] = []

    def start(group: str, **kwargs) -> ZkConsumer:
        kwargs.setdefault("session_timeout_ms", 2000)
        kwargs.setdefault("auto_commit_interval_ms", 200)
        if "topic_pattern" not in kwargs:
            kwargs.setdefault("topics", [])
        consumer = ZkConsumer(cluster.zk_connect, group, **kwargs)
        started.append(consumer)
        return consumer

    yield start
    for consumer in started:
        consumer.close()


def make_topic(cluster, name: str, partitions: int, per_partition: int = 0) -> set:
    with Admin(cluster.bootstrap()) as admin:
        admin.create_topic(name, num_partitions=partitions)
    wait_until(lambda: -1 not in cluster.leaders(1, name).values()
               and len(cluster.leaders(1, name)) == partitions, message=f"leaders of {name}")
    items = [(p, f"{name}-{p}-{i}") for p in range(partitions) for i in range(per_partition)]
    if items:
        clients.confluent_produce(cluster.bootstrap(), name, items)
    return set(items)


def drain(group: list[ZkConsumer], expected: int, into: dict | None = None) -> dict:
    """Poll every consumer until ``expected`` records arrived in total."""
    received = into if into is not None else {id(c): [] for c in group}

    def enough() -> bool:
        for consumer in group:
            received.setdefault(id(consumer), []).extend(consumer.poll(0.2))
        return sum(map(len, received.values())) >= expected

    wait_until(enough, timeout=60, message=f"{expected} records")
    return received


def test_consumers_of_one_group_split_the_partitions(cluster, consumers):
    sent = make_topic(cluster, "split", 6, per_partition=10)
    group = [consumers("splitters", topics=["split"]) for _ in range(3)]
    wait_until(lambda: all(len(c.wait_for_assignment(10)) == 2 for c in group)
               and len(frozenset().union(*(c.assignment() for c in group))) == 6,
               message="two partitions each")
    shares = [c.assignment() for c in group]
    assert frozenset().union(*shares) == {TopicPartition("split", p) for p in range(6)}
    by_id = sorted(group, key=lambda c: c.consumer_id)
    assert [sorted(tp.partition for tp in c.assignment()) for c in by_id] == [[0, 1], [2, 3],
                                                                              [4, 5]]
    received = drain(group, len(sent))
    for consumer in group:
        records = received[id(consumer)]
        assert {TopicPartition(r.topic, r.partition) for r in records} <= consumer.assignment()
    everything = [(r.partition, r.value.decode()) for rs in received.values() for r in rs]
    assert sorted(everything) == sorted(sent)


def test_two_groups_each_receive_every_message(cluster, consumers):
    sent = make_topic(cluster, "fanout", 3, per_partition=5)
    first, second = consumers("group-a", topics=["fanout"]), consumers("group-b",
                                                                       topics=["fanout"])
    for consumer in (first, second):
        received = drain([consumer], len(sent))[id(consumer)]
        assert {(r.partition, r.value.decode()) for r in received} == sent


def test_topic_filter_follows_new_matching_topics(cluster, consumers):
    first = make_topic(cluster, "wl.one", 2, per_partition=3)
    make_topic(cluster, "not-wl", 1, per_partition=3)
    consumer = consumers("filtered", topic_pattern=r"wl\..*")
    received = drain([consumer], len(first))[id(consumer)]
    assert {(r.topic, r.value.decode()) for r in received} == {
        ("wl.one", value) for _, value in first}
    second = make_topic(cluster, "wl.two", 2, per_partition=3)
    later = drain([consumer], len(second))[id(consumer)]
    assert {(r.topic, r.value.decode()) for r in later} == {("wl.two", v) for _, v in second}
    assert {tp.topic for tp in consumer.assignment()} == {"wl.one", "wl.two"}


def test_a_new_group_can_start_at_the_latest_offset(cluster, consumers):
    make_topic(cluster, "late", 2, per_partition=4)
    consumer = consumers("latecomers", topics=["late"], auto_offset_reset="latest")
    consumer.wait_for_assignment(10)
    wait_until(lambda: consumer.poll(0.1) == [] and len(consumer.assignment()) == 2
               and all(p is not None for p in consumer._positions.values()),
               message="start positions resolved")
    clients.confluent_produce(cluster.bootstrap(), "late", [(0, "new-0"), (1, "new-1")])
    received = drain([consumer], 2)[id(consumer)]
    assert sorted(r.value for r in received) == [b"new-0", b"new-1"]


def test_committed_offsets_survive_a_killed_member(cluster, consumers, tmp_path, zk_client_for):
    sent = make_topic(cluster, "crash", 4, per_partition=100)
    out = tmp_path / "child.txt"
    child = ServerProcess([sys.executable, "-m", "tests.cluster.consumer_child",
                           cluster.zk_connect, "crashers", "crash", str(out)],
                          tmp_path / "child.log").start()
    try:
        survivor = consumers("crashers", topics=["crash"], session_timeout_ms=2000)
        wait_until(lambda: len(survivor.wait_for_assignment(10)) == 2, message="even split")
        wait_until(lambda: out.exists() and len(out.read_text().splitlines()) >= 20,
                   message="the child to process records")
        received: dict = {}
        drain([survivor], 20, received)
        child_share = {TopicPartition("crash", p) for p in range(4)} - survivor.assignment()
        zk = zk_client_for(cluster.zk_connect)
        wait_until(lambda: any(zk.exists(f"/consumers/crashers/offsets/crash/{tp.partition}")
                               for tp in child_share), message="a commit by the child")
        child.kill()
    finally:
        child.kill()
    committed = {tp: int(zk.get(f"/consumers/crashers/offsets/crash/{tp.partition}")[0])
                 for tp in child_share if zk.exists(f"/consumers/crashers/offsets/crash/{tp.partition}")}
    assert any(offset > 0 for offset in committed.values())
    processed = [line.split(" ", 2) for line in out.read_text().splitlines()]
    for tp, offset in committed.items():
        # Only processed records are committed.
        assert offset <= 1 + max((int(o) for p, o, _ in processed if int(p) == tp.partition),
                                 default=-1)

    records = received[id(survivor)]
    by_child = {(int(p), v) for p, _, v in processed}

    def everything_seen() -> bool:
        records.extend(survivor.poll(0.2))
        return len(survivor.assignment()) == 4 and sent <= by_child | {
            (r.partition, r.value.decode()) for r in records}

    wait_until(everything_seen, timeout=60, message="every record, by one consumer or the other")
    for tp in child_share:
        first = min(r.offset for r in records if r.partition == tp.partition)
        assert first == committed.get(tp, 0), "resumed exactly at the committed offset"


def test_members_joining_and_leaving_move_partitions_without_loss(cluster, consumers):
    make_topic(cluster, "churn", 4)
    group = [consumers("churners", topics=["churn"]) for _ in range(2)]
    received: dict = {}

    def produce_round(n: int) -> set:
        items = [(p, f"round{n}-{p}-{i}") for p in range(4) for i in range(10)]
        clients.confluent_produce(cluster.bootstrap(), "churn", items)
        return set(items)

    def shares_settle(members: list[ZkConsumer], sizes: list[int]) -> None:
        wait_until(lambda: sorted(len(c.assignment()) for c in members) == sizes
                   and len(frozenset().union(*(c.assignment() for c in members))) == 4,
                   message=f"shares of sizes {sizes}")

    def delivered() -> set:
        return {(r.partition, r.value.decode()) for rs in received.values() for r in rs}

    def all_delivered(members: list[ZkConsumer], sent: set) -> bool:
        for consumer in members:
            received.setdefault(id(consumer), []).extend(consumer.poll(0.2))
        return sent <= delivered()

    shares_settle(group, [2, 2])
    sent = produce_round(1)
    wait_until(lambda: all_delivered(group, sent), message="round 1")
    group.append(consumers("churners", topics=["churn"]))
    shares_settle(group, [1, 1, 2])
    sent |= produce_round(2)
    wait_until(lambda: all_delivered(group, sent), message="round 2")
    leaving = group.pop(0)
    leaving.close()
    shares_settle(group, [2, 2])
    sent |= produce_round(3)
    wait_until(lambda: all_delivered(group, sent), message="round 3")
    assert delivered() == sent


def test_iteration_commits_only_what_the_application_came_back_from(cluster, consumers,
                                                                     zk_client_for):
    make_topic(cluster, "iter", 1, per_partition=10)
    consumer = consumers("iterators", topics=["iter"], auto_commit=False,
                         consumer_timeout_ms=5000)
    for record in consumer:
        if record.offset == 4:
            break  # record 4 was handed out but never finished
    consumer.commit()
    zk = zk_client_for(cluster.zk_connect)
    assert zk.get("/consumers/iterators/offsets/iter/0")[0] == b"4"
    consumer.close()
    successor = consumers("iterators", topics=["iter"], consumer_timeout_ms=1000)
    assert [r.offset for r in successor] == list(range(4, 10))
    successor.commit()
    assert zk.get("/consumers/iterators/offsets/iter/0")[0] == b"10"


class SteppableClock:
    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        import time
        return time.monotonic() + self.offset


def test_no_records_are_handed_out_once_the_session_lease_runs_out(cluster, consumers):
    sent = make_topic(cluster, "leased", 2, per_partition=20)
    clock = SteppableClock()
    consumer = consumers("leaseholders", topics=["leased"], session_timeout_ms=3000,
                         auto_commit=False, consumer_timeout_ms=2000, clock=clock)
    consumer.wait_for_assignment(10)
    records, without_lease = [], []
    for record in consumer:
        records.append(record)
        without_lease += [record] if not consumer._member.lease.valid() else []
        if len(records) == 1:
            clock.offset += 3.0  # as if the process had been stopped past its session timeout
    assert without_lease == []
    # Nothing was skipped: once the lease was renewed the rest came, each exactly once.
    assert sorted((r.partition, r.value.decode()) for r in records) == sorted(sent)


def test_a_consumer_rejoins_under_a_new_session_after_expiry(cluster, consumers, zk_client_for):
    from pylog.testing.zookeeper import expire_session

    first = make_topic(cluster, "rejoin", 2, per_partition=5)
    consumer = consumers("rejoiners", topics=["rejoin"])
    received = drain([consumer], len(first))[id(consumer)]
    old_session = consumer.session[0]
    expire_session(cluster.zk_connect, consumer.session)
    zk = zk_client_for(cluster.zk_connect)

    def owns_again_under_new_session() -> bool:
        session = consumer.session
        if not session or session[0] == old_session or len(consumer.assignment()) != 2:
            return False
        owners = [zk.exists(f"/consumers/rejoiners/owners/rejoin/{p}") for p in (0, 1)]
        return all(stat is not None and stat.ephemeralOwner == session[0] for stat in owners)

    wait_until(owns_again_under_new_session, message="ownership under the new session")
    assert zk.exists(f"/consumers/rejoiners/ids/{consumer.consumer_id}").ephemeralOwner == \
        consumer.session[0]
    second = {(p, f"again-{p}") for p in (0, 1)}
    clients.confluent_produce(cluster.bootstrap(), "rejoin", sorted(second))
    drain([consumer], len(first) + len(second), {id(consumer): received})
    assert {(r.partition, r.value.decode()) for r in received} >= first | second
