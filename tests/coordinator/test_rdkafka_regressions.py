"""What librdkafka's own integration suite found wrong with a pylog broker, one test each.

Each test replays the part of a librdkafka test (``tests/00NN-*.c``) that failed, with
confluent-kafka against a real broker process, and checks the answer Kafka gives.
"""

from __future__ import annotations

import time

import confluent_kafka
from confluent_kafka import KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pylog.testing.broker import broker_fixture

GROUP_SETTINGS = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 1000,
                  "offsets.topic.num.partitions": 5, "num.partitions": 1}
broker = broker_fixture(scope="module", overrides=GROUP_SETTINGS)


def create_topic(bootstrap: str, topic: str, partitions: int = 1, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=configs)])[topic].result(15)


def test_keyless_records_to_a_compacted_topic_fail_alone(broker):
    """0011: in one batch, only the keyless records get INVALID_RECORD (the response's
    record_errors name them); the others get librdkafka's _INVALID_DIFFERENT_RECORD."""
    create_topic(broker.bootstrap, "compacted", **{"cleanup.policy": "compact"})
    outcomes: list[int] = []
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap,
                                         "linger.ms": 1000, "log_level": 3})  # one batch
    for i in range(20):
        producer.produce("compacted", b"v", key=None if i % 10 == 0 else b"k%d" % i,
                         partition=0,
                         on_delivery=lambda err, msg: outcomes.append(err.code() if err else 0))
    assert producer.flush(15) == 0
    assert outcomes.count(KafkaError.INVALID_RECORD) == 2
    assert outcomes.count(KafkaError._INVALID_DIFFERENT_RECORD) == 18


def test_a_static_members_session_ends_on_time_for_delete_groups(broker):
    """0081 (DescribeConsumerGroups): a static member closes without leaving; a
    DeleteGroups sent just after its session ran out finds the group empty, because
    Kafka's session timer fires on its deadline (pylog's timer thread ticks every 50 ms,
    so the request must not see a member whose time is up)."""
    create_topic(broker.bootstrap, "static-delete")
    session_ms = 1000
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": broker.bootstrap, "group.id": "static-delete",
        "group.instance.id": "instance-0", "session.timeout.ms": session_ms,
        "heartbeat.interval.ms": 200, "log_level": 3})
    consumer.subscribe(["static-delete"])
    deadline = time.monotonic() + 15
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(0.1)
    assert consumer.assignment()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.list_consumer_groups().result(10)  # connected before the clock matters
    # A commit restarts the session, as librdkafka's commit on close does in 0081.
    consumer.commit(offsets=[TopicPartition("static-delete", 0, 0)], asynchronous=False)
    consumer.close()  # a static member sends no LeaveGroup
    closed = time.monotonic()
    time.sleep(max(0.0, closed + session_ms / 1000 + 0.003 - time.monotonic()))
    admin.delete_consumer_groups(["static-delete"])["static-delete"].result(10)
