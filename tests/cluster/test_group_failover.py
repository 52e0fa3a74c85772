"""A group's coordinator dies: the new leader of its ``__consumer_offsets`` partition
loads the group and its offsets, and the member goes on consuming and committing there."""

from __future__ import annotations

import time

import confluent_kafka
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pylog.protocol import ApiKey
from tests.broker.wire import WireClient
from tests.cluster.cluster_helpers import LocalCluster
from tests.cluster.conftest import wait_until

GROUP_SETTINGS = {"offsets.topic.num.partitions": 3, "offsets.topic.replication.factor": 3,
                  "group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 1000,
                  "default.replication.factor": 3}


def coordinator_id(bootstrap: str, group: str) -> int:
    with WireClient(bootstrap.split(",")[0]) as wire:
        found = wire.call(ApiKey.FIND_COORDINATOR, 2, {"key": group, "key_type": 0})
    return found["node_id"] if found["error_code"] == 0 else -1  # -1: none right now


def committed(bootstrap: str, group: str) -> dict[int, int]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                         "log_level": 3})
    try:
        found = consumer.committed([TopicPartition("orders", p) for p in range(3)], 20)
        return {tp.partition: tp.offset for tp in found}
    finally:
        consumer.close()


def test_offsets_and_the_member_survive_the_coordinators_broker_being_killed(tmp_path,
                                                                             zk_connect):
    cluster = LocalCluster(tmp_path, zk_connect, extra=GROUP_SETTINGS).start()
    try:
        bootstrap = cluster.bootstrap()
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("orders", 3, 3)])["orders"].result(20)
        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for i in range(30):
            producer.produce("orders", str(i).encode(), partition=i % 3)
        assert producer.flush(20) == 0
        member = confluent_kafka.Consumer({
            "bootstrap.servers": bootstrap, "group.id": "fo", "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 300, "log_level": 3})
        member.subscribe(["orders"])
        values: list[str] = []

        def read(expected: int) -> bool:
            message = member.poll(0.1)
            if message is not None and not message.error():
                values.append(message.value().decode())
                member.commit(message, asynchronous=False)
            return len(values) >= expected

        wait_until(lambda: read(30), timeout=40, message="the first 30 records")
        coordinator = coordinator_id(bootstrap, "fo")
        assert coordinator in cluster.brokers
        cluster.brokers[coordinator].kill()
        survivors = [b for b in cluster.brokers if b != coordinator]
        live = cluster.bootstrap(*survivors)
        wait_until(lambda: coordinator_id(live, "fo") in survivors, timeout=30,
                   message="a new coordinator for the group")
        for i in range(30, 60):
            producer.produce("orders", str(i).encode(), partition=i % 3)
        assert producer.flush(30) == 0
        wait_until(lambda: read(60), timeout=60, message="the next 30 records")
        member.close()
        assert sorted(set(values), key=int) == [str(i) for i in range(60)]
        deadline = time.monotonic() + 20
        while committed(live, "fo") != {0: 20, 1: 20, 2: 20} and time.monotonic() < deadline:
            time.sleep(0.2)
        assert committed(live, "fo") == {0: 20, 1: 20, 2: 20}
    finally:
        cluster.close()
