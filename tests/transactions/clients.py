"""Transactional producers and read_committed/read_uncommitted readers built on clients
nobody here wrote (confluent-kafka, kafka-python)."""

from __future__ import annotations

import time

import confluent_kafka
import kafka
import pytest

from pylog.client.connection import BrokerConnection
from pylog.protocol import ApiKey

END = b"END"  # the last record a test writes: a reader that saw it has seen the rest


def transactional(bootstrap: str, transactional_id: str, **settings) -> confluent_kafka.Producer:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap,
                                         "transactional.id": transactional_id,
                                         "log_level": 2, **settings})
    producer.init_transactions(60)
    return producer


def run_transaction(producer: confluent_kafka.Producer, topic: str, values: list[bytes],
                    commit: bool = True) -> None:
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value=value, partition=0)
    producer.flush(30)
    (producer.commit_transaction if commit else producer.abort_transaction)(60)


def read_until_end(bootstrap: str, topic: str, isolation_level: str,
                   timeout: float = 60.0) -> list[bytes]:
    """Partition 0 of ``topic`` from the start up to END, with confluent-kafka."""
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"reader-{topic}",
        "isolation.level": isolation_level, "enable.auto.commit": False, "log_level": 2})
    consumer.assign([confluent_kafka.TopicPartition(topic, 0,
                                                    confluent_kafka.OFFSET_BEGINNING)])
    values, deadline = [], time.monotonic() + timeout
    try:
        while END not in values:
            if time.monotonic() > deadline:
                pytest.fail(f"{isolation_level} reader of {topic} got only {values}")
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                values.append(message.value())
        return values
    finally:
        consumer.close()


def kafka_python_read_committed(bootstrap: str, topic: str, timeout: float = 60.0) -> list[bytes]:
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                                   enable_auto_commit=False, group_id=None)
    partition = kafka.TopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek_to_beginning(partition)
    values, deadline = [], time.monotonic() + timeout
    try:
        while END not in values:
            if time.monotonic() > deadline:
                pytest.fail(f"kafka-python's read_committed reader of {topic} got only {values}")
            for records in consumer.poll(timeout_ms=500).values():
                values += [r.value for r in records]
        return values
    finally:
        consumer.close()


def describe(bootstrap: str, transactional_id: str) -> dict:
    """DescribeTransactions through pylog's client connection (confluent-kafka's admin
    client has no call for it), asked of the id's coordinator."""
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    with_bootstrap = BrokerConnection(host, int(port), timeout_s=30)
    try:
        found = with_bootstrap.request(ApiKey.FIND_COORDINATOR, {
            "key": transactional_id, "key_type": 1}, 3)
    finally:
        with_bootstrap.close()
    coordinator = BrokerConnection(found["host"], found["port"], timeout_s=30)
    try:
        return coordinator.request(ApiKey.DESCRIBE_TRANSACTIONS, {
            "transactional_ids": [transactional_id]}, 0)["transaction_states"][0]
    finally:
        coordinator.close()
