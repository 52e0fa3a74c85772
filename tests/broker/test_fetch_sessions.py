"""Incremental fetch sessions (KIP-227) on a real broker: opened by a full Fetch, then
requests that list only what changed and responses that carry only what is new; the epoch
checked, forgotten partitions dropped, closing; and kafka-python, which uses sessions,
reading every record through one."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from pylog.client.connection import BrokerConnection
from pylog.protocol import ApiKey
from pylog.testing.broker import broker_fixture

TOPIC = "sessions"
FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH = 70, 71

broker = broker_fixture(scope="module", overrides={"group.initial.rebalance.delay.ms": 0})


@pytest.fixture(scope="module")
def topic(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 3, 1)])[TOPIC].result(30)
    produce(broker, {0: 5, 1: 5, 2: 5})
    return TOPIC


def produce(broker, counts: dict[int, int]) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for partition, count in counts.items():
        for i in range(count):
            producer.produce(TOPIC, f"{partition}-{i}".encode(), partition=partition)
    assert producer.flush(30) == 0


def entry(partition: int, offset: int) -> dict:
    return {"partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
            "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 20}


def fetch(connection, session_id: int, epoch: int, offsets: dict[int, int],
          forgotten: list[int] = (), max_wait_ms: int = 50) -> dict:
    return connection.request(ApiKey.FETCH, {
        "replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": session_id, "session_epoch": epoch,
        "topics": [{"topic": TOPIC, "partitions": [entry(p, o) for p, o in offsets.items()]}]
        if offsets else [],
        "forgotten_topics_data": [{"topic": TOPIC, "partitions": list(forgotten)}]
        if forgotten else [],
        "rack_id": ""}, 12)


def partitions(response: dict) -> dict[int, int]:
    """partition -> bytes of records in the response."""
    return {p["partition_index"]: len(p["records"] or b"")
            for t in response["responses"] for p in t["partitions"]}


def test_a_session_sends_only_what_changed(broker, topic):
    connection = BrokerConnection("127.0.0.1", broker.port, timeout_s=10)
    connection.connect()
    try:
        opened = fetch(connection, 0, 0, {0: 0, 1: 0, 2: 0})
        session = opened["session_id"]
        assert opened["error_code"] == 0 and session != 0
        assert set(partitions(opened)) == {0, 1, 2}  # the opening Fetch is answered in full

        # Caught up: the client moves its positions; nothing new, nothing sent.
        idle = fetch(connection, session, 1, {0: 5, 1: 5, 2: 5})
        assert idle["error_code"] == 0 and idle["session_id"] == session
        assert partitions(idle) == {}
        assert partitions(fetch(connection, session, 2, {})) == {}

        produce(broker, {1: 3})
        news = fetch(connection, session, 3, {})
        assert list(partitions(news)) == [1] and partitions(news)[1] > 0
        # The same position again: its data is sent again (the client decides positions).
        again = fetch(connection, session, 4, {})
        assert list(partitions(again)) == [1]
        assert partitions(fetch(connection, session, 5, {1: 8})) == {}

        # A forgotten partition is no longer fetched.
        assert partitions(fetch(connection, session, 6, {}, forgotten=[0])) == {}
        produce(broker, {0: 2, 2: 2})
        assert set(partitions(fetch(connection, session, 7, {}))) == {2}

        # A Fetch waiting on the session is woken by an append to a partition it did not
        # name, and answers with it before its long wait is over.
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(fetch, connection, session, 8, {2: 7}, (), 20000)
            time.sleep(0.5)
            produce(broker, {2: 1})
            woken = waiting.result(15)
        assert list(partitions(woken)) == [2]  # well before the 20 s wait (result(15))
        epoch = 9

        # Out of turn, unknown, closed.
        assert fetch(connection, session, 3, {})["error_code"] == INVALID_FETCH_SESSION_EPOCH
        assert fetch(connection, session, epoch, {})["error_code"] == 0
        assert fetch(connection, session + 1, 1, {})["error_code"] == FETCH_SESSION_ID_NOT_FOUND
        closed = fetch(connection, session, -1, {0: 0})
        assert closed["error_code"] == 0 and closed["session_id"] == 0
        assert partitions(closed)[0] > 0
        assert fetch(connection, session, epoch + 1, {})["error_code"] == \
            FETCH_SESSION_ID_NOT_FOUND
    finally:
        connection.close()


def test_kafka_python_reads_through_a_session(broker, topic):
    from kafka import KafkaConsumer, TopicPartition

    produce(broker, {0: 100, 1: 100, 2: 100})
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest", fetch_max_wait_ms=50,
                             consumer_timeout_ms=3000)
    consumer.assign([TopicPartition(TOPIC, p) for p in range(3)])
    try:
        values = [message.value for message in consumer]
        ends = consumer.end_offsets([TopicPartition(TOPIC, p) for p in range(3)])
        assert len(values) == sum(ends.values())
        handlers = consumer._fetcher._session_handlers  # kafka-python's own session state
        assert any(h.next_metadata.session_id != 0 for h in handlers.values()), \
            "kafka-python did not keep a fetch session"
    finally:
        consumer.close()
