"""Apache Kafka 4.4's Java client against a three-broker pylog cluster, through the tools
Kafka's own system tests drive it with: VerifiableProducer (idempotent, acks=all),
VerifiableConsumer (a consumer group, cooperative rebalancing, manual commits) and
TransactionalMessageCopier (consume-transform-produce with read_committed and offsets in
the transaction). Each runs through a real fault: a partition leader SIGKILLed under the
producer, a group member SIGKILLed, a copier and a broker SIGKILLed mid-transaction.

What is checked is what the user relies on: every acknowledged record in the log exactly
once at the offset it was acknowledged with; a group that hands a dead member's partitions
on and commits every offset; an output that holds, read committed, exactly the input in
order, while aborted transactions did reach the log.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pylog.testing.apache_kafka import kafka_classpath
from pylog.testing.waiting import wait_until
from pylog.testing.zookeeper import zookeeper_fixture
from tests.cluster.cluster_helpers import LocalCluster
from tests.peer.java_tools import (TOOLS, JavaClient, java_argv, replicated_cluster_fixture,
                                   write_log_config, write_properties)

pytestmark = pytest.mark.slow

zookeeper = zookeeper_fixture()


cluster = replicated_cluster_fixture("java-clients")


class Java:
    """Starts Kafka's Java tools against the cluster, each with its stderr in ``work_dir``."""

    def __init__(self, cluster: LocalCluster, work_dir: Path) -> None:
        self.cluster = cluster
        self.work_dir = work_dir
        self.log_config = write_log_config(work_dir)
        self.classpath = kafka_classpath()
        self.started = 0

    def start(self, tool: str, *args: str, config: dict[str, object] | None = None,
              config_option: str = "--command-config") -> JavaClient:
        self.started += 1
        argv = list(args)
        if config:
            path = write_properties(self.work_dir / f"{tool}-{self.started}.properties", config)
            argv += [config_option, str(path)]
        return JavaClient(java_argv(self.classpath, self.log_config, TOOLS + tool, argv),
                          self.work_dir / f"{tool}-{self.started}.stderr")


@pytest.fixture
def java(cluster, tmp_path):
    started: list[JavaClient] = []
    tools = Java(cluster, tmp_path)
    original = tools.start

    def start(*args, **kwargs):
        client = original(*args, **kwargs)
        started.append(client)
        return client

    tools.start = start
    yield tools
    for client in started:
        client.kill()


def create_topic(cluster: LocalCluster, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    admin.create_topics([NewTopic(topic, partitions, 3)])[topic].result(30)
    for broker_id in cluster.brokers:
        wait_until(lambda: len(cluster.leaders(broker_id, topic)) == partitions
                   and all(leader >= 0 for leader in cluster.leaders(broker_id, topic).values()),
                   message=f"broker {broker_id} to know {topic}'s leaders")


def read_partitions(cluster: LocalCluster, topic: str, partitions: int,
                    isolation: str = "read_committed") -> dict[int, list[tuple[int, bytes]]]:
    """Every record of ``topic`` visible at ``isolation``: partition -> [(offset, value)]."""
    ends = end_offsets(cluster, topic, partitions, isolation)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": "reader",
                         "enable.auto.commit": False, "isolation.level": isolation})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    found: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    try:
        def caught_up():
            for message in consumer.consume(1000, 0.5):
                assert message.error() is None, message.error()
                found[message.partition()].append((message.offset(), message.value()))
            positions = {tp.partition: tp.offset for tp in consumer.position(
                [TopicPartition(topic, p) for p in range(partitions)])}
            return all(positions[p] >= ends[p] for p in range(partitions) if ends[p] > 0)
        wait_until(caught_up, timeout=60, message=f"reading {topic} to its end")
    finally:
        consumer.close()
    return found


def end_offsets(cluster: LocalCluster, topic: str, partitions: int,
                isolation: str = "read_committed") -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": "reader",
                         "isolation.level": isolation})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15)[1]
                for p in range(partitions)}
    finally:
        consumer.close()


def produce_values(cluster: LocalCluster, topic: str, partitions: int, count: int,
                   prefix: str) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all",
                        "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, f"{prefix}{i}".encode(), partition=i % partitions)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def test_idempotent_producer_through_a_leader_killed(cluster, java):
    """VerifiableProducer with enable.idempotence and acks=all, the leader of partition 0
    SIGKILLed and restarted while it sends: every value acknowledged, each in the log exactly
    once, at the offset its acknowledgement named."""
    topic, partitions, count = "java-idempotent", 3, 30_000
    create_topic(cluster, topic, partitions)
    producer = java.start("VerifiableProducer", "--bootstrap-server", cluster.bootstrap(),
                          "--topic", topic, "--max-messages", str(count),
                          "--throughput", "4000", config={
                              "enable.idempotence": "true", "acks": "all", "retries": 2**31 - 1,
                              "delivery.timeout.ms": 120_000, "request.timeout.ms": 10_000,
                              "linger.ms": 5, "max.in.flight.requests.per.connection": 5})
    producer.wait_for(lambda p: len(p.named("name", "producer_send_success")) >= 6000,
                      "6,000 acknowledgements")
    leader = cluster.leaders(1, topic)[0]
    cluster.brokers[leader].kill()
    acked_at_kill = len(producer.named("name", "producer_send_success"))
    producer.wait_for(lambda p: len(p.named("name", "producer_send_success"))
                      >= acked_at_kill + 3000, "acknowledgements from the new leader")
    cluster.brokers[leader].start()
    assert producer.wait_exit() == 0, producer.diagnostics()

    acks = producer.named("name", "producer_send_success")
    assert producer.named("name", "producer_send_error") == []
    assert sorted(int(a["value"]) for a in acks) == list(range(count))
    assert acked_at_kill < count, "the leader died after the run, not during it"

    log = read_partitions(cluster, topic, partitions, "read_uncommitted")
    values = [value for records in log.values() for _, value in records]
    duplicates = [v for v, n in Counter(values).items() if n > 1]
    assert duplicates == [] and len(values) == count, (
        f"{len(values)} records for {count} values; duplicated: {duplicates[:10]}")
    at = {(p, offset): value for p, records in log.items() for offset, value in records}
    for ack in acks:
        assert at[(ack["partition"], ack["offset"])] == ack["value"].encode(), ack


def test_consumer_group_hands_a_killed_members_partitions_on(cluster, java):
    """Two VerifiableConsumers in one group (cooperative-sticky, commits after each poll):
    both get partitions, one is SIGKILLed, the other takes its partitions after the session
    timeout, consumes what arrives next and commits every partition to its end. Then it
    leaves cleanly and the group is empty."""
    topic, group, partitions = "java-group", "java-verifiable", 6
    create_topic(cluster, topic, partitions)
    produce_values(cluster, topic, partitions, 12_000, "first-")
    options = ["--bootstrap-server", cluster.bootstrap(), "--topic", topic, "--group-id", group,
               "--session-timeout", "6000", "--reset-policy", "earliest",
               "--assignment-strategy",
               "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"]
    first = java.start("VerifiableConsumer", *options)
    first.wait_for(lambda c: assigned(c), "the first member's assignment")
    second = java.start("VerifiableConsumer", *options)
    both = lambda _: assigned(first) and assigned(second) and not (  # noqa: E731
        assigned(first) & assigned(second)) and len(assigned(first) | assigned(second)) == 6
    second.wait_for(both, "the partitions split between both members", timeout=90)
    first_had = assigned(first)

    first.kill()
    second.wait_for(lambda c: len(assigned(c)) == partitions,
                    "the survivor to own every partition", timeout=60)
    produce_values(cluster, topic, partitions, 6_000, "second-")
    ends = end_offsets(cluster, topic, partitions)
    second.wait_for(lambda c: committed(c) == ends, "every partition committed to its end",
                    timeout=90)

    # Together the two consumed every offset: the survivor from where the dead member's
    # last commit left each of its partitions.
    consumed = defaultdict(set)
    for member in (first, second):
        for event in member.named("name", "records_consumed"):
            for part in event["partitions"]:
                consumed[part["partition"]].update(range(part["minOffset"], part["maxOffset"] + 1))
    for p in range(partitions):
        assert consumed[p] >= set(range(ends[p])), f"partition {p}: offsets never consumed"
    assert first_had and first_had < set(range(partitions))

    assert second.terminate() == 143 and second.named("name", "shutdown_complete"), (
        second.diagnostics())
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    description = admin.describe_consumer_groups([group])[group].result(30)
    assert description.members == [] and description.state.name == "EMPTY"


def assigned(consumer: JavaClient) -> set[int]:
    """The partitions a VerifiableConsumer owns after its latest rebalance events (the
    cooperative protocol reports increments: assigned adds, revoked removes)."""
    owned: set[int] = set()
    for event in consumer.named("name"):
        if event["name"] == "partitions_assigned":
            owned |= {p["partition"] for p in event["partitions"]}
        elif event["name"] in ("partitions_revoked", "partitions_lost"):
            owned -= {p["partition"] for p in event["partitions"]}
    return owned


def committed(consumer: JavaClient) -> dict[int, int]:
    """The latest successfully committed offset per partition a VerifiableConsumer reported."""
    latest: dict[int, int] = {}
    for event in consumer.named("name", "offsets_committed"):
        if event.get("success"):
            for offset in event["offsets"]:
                latest[offset["partition"]] = offset["offset"]
    return latest


def test_transactional_copy_through_a_killed_copier_and_broker(cluster, java):
    """Two TransactionalMessageCopiers, one per input partition, with random aborts (one
    transaction in three): read_committed input, output and offsets in one transaction.
    Copier 0 is SIGKILLed mid-transaction and restarted with the same transactional id; a
    broker is SIGKILLed and restarted meanwhile. The output read committed is exactly the
    input, partition by partition, in order; read uncommitted it holds more (the aborted
    attempts), and the group's offsets are at the input's end."""
    source, target, group, partitions, count = "java-txn-in", "java-txn-out", "copier", 2, 20_000
    create_topic(cluster, source, partitions)
    create_topic(cluster, target, partitions)
    produce_values(cluster, source, partitions, count, "v")

    def copier(partition: int) -> JavaClient:
        return java.start("TransactionalMessageCopier", "--broker-list", cluster.bootstrap(),
                          "--input-topic", source, "--input-partition", str(partition),
                          "--output-topic", target, "--transactional-id", f"copier-{partition}",
                          "--consumer-group", group, "--transaction-size", "100",
                          "--transaction-timeout", "10000", "--enable-random-aborts")

    copiers = [copier(0), copier(1)]
    copiers[0].wait_for(lambda c: progressed(c) >= 1000, "copier 0 to commit 1,000 records")
    copiers[0].kill()
    done_before_kill = progressed(copiers[0])
    assert done_before_kill < count // partitions, "copier 0 finished before it was killed"
    victim = next(b for b in cluster.brokers if b != cluster.controller(1))
    cluster.brokers[victim].kill()
    copiers[0] = copier(0)
    copiers[0].wait_for(lambda c: progressed(c) >= 500, "the restarted copier to commit",
                        timeout=90)
    cluster.brokers[victim].start()
    for c in copiers:
        assert c.wait_exit(180) == 0, c.diagnostics()

    source_log = read_partitions(cluster, source, partitions)
    target_log = read_partitions(cluster, target, partitions)
    for p in range(partitions):
        assert [v for _, v in target_log[p]] == [v for _, v in source_log[p]], (
            f"partition {p}: the committed output is not the input")
    everything = read_partitions(cluster, target, partitions, "read_uncommitted")
    assert sum(map(len, everything.values())) > count, "no aborted transaction reached the log"

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": group})
    try:
        offsets = consumer.committed([TopicPartition(source, p) for p in range(partitions)], 30)
    finally:
        consumer.close()
    ends = end_offsets(cluster, source, partitions)
    assert {tp.partition: tp.offset for tp in offsets} == ends


def progressed(copier: JavaClient) -> int:
    """Records the copier has committed since it started (its latest ``totalProcessed``)."""
    reports = copier.named("totalProcessed")
    return reports[-1]["totalProcessed"] if reports else 0
