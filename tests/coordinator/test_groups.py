"""Consumer groups served by a pylog broker, as stock clients use them.

confluent-kafka (librdkafka), kafka-python and kcat members share groups; the broker
relays the leader's assignment, so every client-side assignor works. Members that die
are evicted after their session; static members come back to their partitions without a
rebalance; committed offsets survive restarts and SIGKILL.
"""

from __future__ import annotations

import collections
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import confluent_kafka
import kafka
import pytest
from confluent_kafka import TopicPartition
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient, NewTopic

from pylog.testing.broker import BrokerProcess, broker_fixture

GROUP_SETTINGS = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 1000,
                  "offsets.topic.num.partitions": 5, "num.partitions": 1}
broker = broker_fixture(scope="module", overrides=GROUP_SETTINGS)
ROOT = Path(__file__).resolve().parents[2]


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(15)


def produce(bootstrap: str, topic: str, values: list[str], partitions: int) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, value in enumerate(values):
        producer.produce(topic, value.encode(), partition=i % partitions)
    assert producer.flush(15) == 0


class Member:
    """A confluent-kafka member polled by the test's thread; commits before revocation."""

    def __init__(self, bootstrap: str, group: str, topic: str, assignor: str = "range",
                 **settings) -> None:
        self.consumer = confluent_kafka.Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 300, "partition.assignment.strategy": assignor,
            # Also the rebalance timeout: members closed one after another while a
            # rebalance waits for the others (not polled meanwhile) wait 15 s at most.
            "max.poll.interval.ms": 15000, "log_level": 3, **settings})
        self.values: list[str] = []
        self.assignments = 0
        self.revocations = 0
        self.consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked)

    def _assigned(self, consumer, partitions) -> None:
        self.assignments += 1

    def _revoked(self, consumer, partitions) -> None:
        self.revocations += 1
        try:
            consumer.commit(asynchronous=False)
        except confluent_kafka.KafkaException:
            pass  # nothing consumed since the last commit

    def poll(self, timeout: float = 0.05) -> None:
        message = self.consumer.poll(timeout)
        if message is not None and not message.error():
            self.values.append(message.value().decode())

    def partitions(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def close(self) -> None:
        self.consumer.close()


def poll_until(members, condition, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for member in members:
            member.poll()
        if condition():
            return
    raise AssertionError(f"timed out waiting for {what}: " + "; ".join(
        f"member {i}: partitions {sorted(m.partitions())}, {len(m.values)} records"
        for i, m in enumerate(members)))


def close_together(members, timeout: float = 60.0) -> None:
    """Close the members of one group at the same time. Closed one after another, the
    last ones, not polled meanwhile, can be handed a new cooperative assignment while
    closing, and librdkafka's close can then wait for an assignment call that never
    comes (its issue 4527; one close hung so here, with librdkafka 2.16, after the
    broker had logged every member's LeaveGroup). Together, they all leave."""
    threads = [threading.Thread(target=member.close, daemon=True) for member in members]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    stuck = sum(thread.is_alive() for thread in threads)
    if stuck:
        warnings.warn(f"{stuck} librdkafka consumer(s) still closing after {timeout:.0f} s")


def split_cleanly(members, partitions: int) -> bool:
    owned = [m.partitions() for m in members]
    return (all(owned) and sum(len(o) for o in owned) == partitions
            and set().union(*owned) == set(range(partitions)))


@pytest.mark.parametrize("assignor", ["range", "roundrobin", "cooperative-sticky"])
def test_members_split_partitions_and_a_newcomer_gets_a_share(broker, assignor):
    topic, group = f"split-{assignor}", f"split-{assignor}"
    create_topic(broker.bootstrap, topic, 6)
    produce(broker.bootstrap, topic, [f"a{i}" for i in range(60)], 6)
    members = [Member(broker.bootstrap, group, topic, assignor) for _ in range(3)]
    try:
        consumed = lambda: sum(len(m.values) for m in members)  # noqa: E731
        poll_until(members, lambda: split_cleanly(members, 6) and consumed() == 60,
                   what="three members splitting six partitions")
        members.append(Member(broker.bootstrap, group, topic, assignor))
        produce(broker.bootstrap, topic, [f"b{i}" for i in range(60)], 6)
        poll_until(members, lambda: split_cleanly(members, 6) and consumed() == 120,
                   what="four members splitting six partitions")
        assert sorted(len(m.partitions()) for m in members) == [1, 1, 2, 2]
        counts = collections.Counter(v for m in members for v in m.values)
        assert set(counts.values()) == {1} and len(counts) == 120, "a record was read twice"
    finally:
        close_together(members)


def test_two_groups_each_read_everything(broker):
    create_topic(broker.bootstrap, "two-groups", 2)
    produce(broker.bootstrap, "two-groups", [str(i) for i in range(20)], 2)
    members = [Member(broker.bootstrap, g, "two-groups") for g in ("first", "second")]
    try:
        poll_until(members, lambda: all(len(m.values) == 20 for m in members),
                   what="both groups reading all 20 records")
        assert sorted(members[0].values, key=int) == sorted(members[1].values, key=int)
    finally:
        for member in members:
            member.close()


def start_child(broker, group: str, topic: str, out: Path, session_ms: int,
                instance_id: str | None = None) -> subprocess.Popen:
    argv = [sys.executable, "-m", "tests.coordinator.member_child", broker.bootstrap, group,
            topic, str(out), str(session_ms)] + ([instance_id] if instance_id else [])
    return subprocess.Popen(argv, cwd=ROOT)


def child_assignments(out: Path) -> list[set[int]]:
    if not out.exists():
        return []
    return [{int(p) for p in line.split()[1].split(",")} if len(line.split()) > 1 else set()
            for line in out.read_text().splitlines() if line.startswith("assigned")]


def test_a_killed_member_is_evicted_and_its_partitions_move(broker, tmp_path):
    create_topic(broker.bootstrap, "evict", 4)
    out = tmp_path / "child.out"
    child = start_child(broker, "evict", "evict", out, session_ms=2000)
    survivor = Member(broker.bootstrap, "evict", "evict")
    try:
        poll_until([survivor], lambda: bool(child_assignments(out))
                   and len(survivor.partitions()) + len(child_assignments(out)[-1]) == 4
                   and bool(survivor.partitions()) and bool(child_assignments(out)[-1]),
                   what="the child and the survivor sharing four partitions")
        child_partitions = child_assignments(out)[-1]
        produce(broker.bootstrap, "evict", [str(i) for i in range(20)], 4)
        child.send_signal(signal.SIGKILL)
        child.wait()
        produce(broker.bootstrap, "evict", [str(i) for i in range(20, 40)], 4)
        poll_until([survivor], lambda: survivor.partitions() == {0, 1, 2, 3}
                   and len(set(survivor.values) | child_values(out)) == 40,
                   what="the survivor taking over and the group reading all 40 records")
        moved = {v for v in survivor.values if int(v) >= 20 and int(v) % 4 in child_partitions}
        assert len(moved) == 5 * len(child_partitions)
    finally:
        if child.poll() is None:
            child.kill()
        survivor.close()


def child_values(out: Path) -> set[str]:
    return {line.split()[2] for line in out.read_text().splitlines()
            if line.startswith("record")}


def test_a_restarted_static_member_gets_its_partitions_back_without_a_rebalance(broker,
                                                                                tmp_path):
    create_topic(broker.bootstrap, "static", 4)
    out = tmp_path / "static.out"
    child = start_child(broker, "static", "static", out, session_ms=10000,
                        instance_id="static-a")
    other = Member(broker.bootstrap, "static", "static", **{"group.instance.id": "static-b",
                                                             "session.timeout.ms": 10000})
    try:
        poll_until([other], lambda: bool(child_assignments(out))
                   and len(child_assignments(out)[-1]) + len(other.partitions()) == 4
                   and bool(other.partitions()),
                   what="two static members sharing four partitions")
        before = child_assignments(out)[-1]
        assignments, revocations = other.assignments, other.revocations
        child.send_signal(signal.SIGKILL)
        child.wait()
        restarted = start_child(broker, "static", "static", out, session_ms=10000,
                                instance_id="static-a")
        try:
            poll_until([other], lambda: len(child_assignments(out)) == 2,
                       what="the restarted member's assignment")
            assert child_assignments(out)[-1] == before
            for _ in range(20):  # a rebalance would reach the other member by now
                other.poll(0.05)
            assert (other.assignments, other.revocations) == (assignments, revocations)
        finally:
            restarted.kill()
            restarted.wait()
    finally:
        if child.poll() is None:
            child.kill()
        other.close()


def test_kafka_python_kcat_and_confluent_kafka_share_one_group(broker, tmp_path):
    create_topic(broker.bootstrap, "mixed", 3)
    kcat_out = (tmp_path / "kcat.out").open("w")
    kcat = subprocess.Popen(
        ["kcat", "-b", broker.bootstrap, "-G", "mixed", "-X", "auto.offset.reset=earliest",
         "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=300",
         "-f", "%s\n", "-u", "mixed"], stdout=kcat_out, stderr=subprocess.DEVNULL)
    python_member = kafka.KafkaConsumer(
        "mixed", bootstrap_servers=broker.bootstrap, group_id="mixed",
        auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=300,
        enable_auto_commit=False)
    confluent_member = Member(broker.bootstrap, "mixed", "mixed")
    python_values: list[str] = []

    class PythonMember:
        def poll(self) -> None:
            for records in python_member.poll(timeout_ms=50).values():
                python_values.extend(r.value.decode() for r in records)

        def partitions(self) -> set[int]:
            return {tp.partition for tp in python_member.assignment()}

    members = [PythonMember(), confluent_member]
    try:
        poll_until(members, lambda: len(python_member.assignment()) == 1
                   and len(confluent_member.partitions()) == 1
                   and confluent_member.partitions() != PythonMember().partitions(),
                   what="three clients owning one partition each")
        produce(broker.bootstrap, "mixed", [str(i) for i in range(30)], 3)
        kcat_path = tmp_path / "kcat.out"
        poll_until(members, lambda: len(python_values) + len(confluent_member.values)
                   + len(kcat_path.read_text().split()) >= 30,
                   what="the three clients reading all 30 records")
        everything = python_values + confluent_member.values + kcat_path.read_text().split()
        assert sorted(everything, key=int) == [str(i) for i in range(30)]
        assert python_values and confluent_member.values and kcat_path.read_text().split()
    finally:
        kcat.terminate()
        kcat.wait()
        kcat_out.close()
        python_member.close()
        confluent_member.close()


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                         "log_level": 3})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], 15)
        return {tp.partition: tp.offset for tp in found}
    finally:
        consumer.close()


def test_committed_offsets_survive_a_restart_and_a_sigkill(tmp_path):
    with BrokerProcess(tmp_path / "b", GROUP_SETTINGS) as restarted:
        create_topic(restarted.bootstrap, "durable", 2)
        produce(restarted.bootstrap, "durable", [str(i) for i in range(10)], 2)
        member = Member(restarted.bootstrap, "durable", "durable")
        try:
            poll_until([member], lambda: len(member.values) == 10, what="10 records")
            member.consumer.commit(asynchronous=False)
        finally:
            member.close()
        assert committed(restarted.bootstrap, "durable", "durable", 2) == {0: 5, 1: 5}
        restarted.stop()
        restarted.start()
        assert committed(restarted.bootstrap, "durable", "durable", 2) == {0: 5, 1: 5}
        consumer = confluent_kafka.Consumer({"bootstrap.servers": restarted.bootstrap,
                                             "group.id": "durable", "log_level": 3})
        consumer.commit(offsets=[TopicPartition("durable", 0, 3)], asynchronous=False)
        consumer.close()
        restarted.kill()
        restarted.start()
        assert committed(restarted.bootstrap, "durable", "durable", 2) == {0: 3, 1: 5}


def test_admin_client_lists_describes_alters_and_deletes_groups(broker):
    create_topic(broker.bootstrap, "admin-groups", 2)
    produce(broker.bootstrap, "admin-groups", [str(i) for i in range(4)], 2)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    member = Member(broker.bootstrap, "admin-g", "admin-groups", **{"client.id": "the-client"})
    try:
        poll_until([member], lambda: len(member.values) == 4, what="4 records")
        member.consumer.commit(asynchronous=False)
        listed = {g.group_id: g for g in admin.list_consumer_groups().result(15).valid}
        assert listed["admin-g"].state == confluent_kafka.ConsumerGroupState.STABLE
        described = admin.describe_consumer_groups(["admin-g"])["admin-g"].result(15)
        assert described.state == confluent_kafka.ConsumerGroupState.STABLE
        assert [m.client_id for m in described.members] == ["the-client"]
        assert {tp.partition for tp in described.members[0].assignment.topic_partitions} == {0, 1}
        assert described.partition_assignor == "range"
        refused = admin.delete_consumer_groups(["admin-g"])["admin-g"]
        with pytest.raises(confluent_kafka.KafkaException) as info:
            refused.result(15)
        assert info.value.args[0].code() == confluent_kafka.KafkaError.NON_EMPTY_GROUP
    finally:
        member.close()

    request = [ConsumerGroupTopicPartitions("admin-g")]
    offsets = admin.list_consumer_group_offsets(request)["admin-g"].result(15)
    assert {tp.partition: tp.offset for tp in offsets.topic_partitions} == {0: 2, 1: 2}
    altered = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
        "admin-g", [TopicPartition("admin-groups", 0, 1)])])["admin-g"].result(15)
    assert [(tp.partition, tp.offset) for tp in altered.topic_partitions] == [(0, 1)]
    assert committed(broker.bootstrap, "admin-g", "admin-groups", 2) == {0: 1, 1: 2}
    admin.delete_consumer_groups(["admin-g"])["admin-g"].result(15)
    assert "admin-g" not in {g.group_id for g in admin.list_consumer_groups().result(15).valid}
    assert committed(broker.bootstrap, "admin-g", "admin-groups", 2) == {0: -1001, 1: -1001}
