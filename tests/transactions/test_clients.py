"""Transactions through confluent-kafka's transactional producer against a standalone
broker: what read_committed and read_uncommitted readers see, a fenced zombie, and a
producer killed in the middle of a transaction."""

from __future__ import annotations

import signal
import subprocess
import sys

import confluent_kafka
import pytest

from pylog.client import Admin
from tests.transactions.clients import (
    END, describe, kafka_python_read_committed, read_until_end, run_transaction,
    transactional)

FENCED = {confluent_kafka.KafkaError._FENCED, confluent_kafka.KafkaError.PRODUCER_FENCED,
          confluent_kafka.KafkaError.INVALID_PRODUCER_EPOCH}


@pytest.fixture(scope="module")
def topics(broker):
    with Admin(broker.bootstrap) as admin:
        for name in ("txn-rw", "txn-zombie", "txn-killed"):
            admin.create_topic(name, num_partitions=1)


def test_committed_and_aborted_transactions_by_isolation_level(broker, topics):
    producer = transactional(broker.bootstrap, "rw")
    committed = [f"c{i}".encode() for i in range(5)]
    aborted = [f"a{i}".encode() for i in range(5)]
    run_transaction(producer, "txn-rw", committed)
    run_transaction(producer, "txn-rw", aborted, commit=False)
    run_transaction(producer, "txn-rw", [b"c5", END])
    producer.flush(10)

    assert read_until_end(broker.bootstrap, "txn-rw", "read_committed") == \
        committed + [b"c5", END]
    assert read_until_end(broker.bootstrap, "txn-rw", "read_uncommitted") == \
        committed + aborted + [b"c5", END]
    assert kafka_python_read_committed(broker.bootstrap, "txn-rw") == committed + [b"c5", END]
    state = describe(broker.bootstrap, "rw")
    assert (state["error_code"], state["transaction_state"], state["topics"]) == (
        0, "CompleteCommit", [])


def test_a_second_producer_with_the_same_id_fences_the_first(broker, topics):
    zombie = transactional(broker.bootstrap, "zombie")
    zombie.begin_transaction()
    zombie.produce("txn-zombie", value=b"from-the-zombie", partition=0)
    zombie.flush(30)

    successor = transactional(broker.bootstrap, "zombie")  # aborts the zombie's transaction
    with pytest.raises(confluent_kafka.KafkaException) as raised:
        zombie.commit_transaction(30)
    error = raised.value.args[0]
    assert error.fatal() and error.code() in FENCED, error

    run_transaction(successor, "txn-zombie", [b"from-the-successor", END])
    assert read_until_end(broker.bootstrap, "txn-zombie", "read_committed") == \
        [b"from-the-successor", END]
    state = describe(broker.bootstrap, "zombie")
    assert state["transaction_state"] == "CompleteCommit" and state["producer_epoch"] >= 2


def test_a_killed_producers_transaction_is_aborted_after_its_timeout(broker, topics):
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.transactions.producer_child", broker.bootstrap,
         "killed", "txn-killed", "2000"], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        opened = describe(broker.bootstrap, "killed")
        assert opened["transaction_state"] == "Ongoing"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()

    # The open transaction holds the last stable offset until the coordinator aborts it.
    producer = transactional(broker.bootstrap, "after-the-kill")
    run_transaction(producer, "txn-killed", [b"later", END])
    assert read_until_end(broker.bootstrap, "txn-killed", "read_committed") == [b"later", END]
    assert read_until_end(broker.bootstrap, "txn-killed", "read_uncommitted") == \
        [b"killed-0", b"killed-1", b"killed-2", b"later", END]
    aborted = describe(broker.bootstrap, "killed")
    assert aborted["transaction_state"] == "CompleteAbort"
    assert aborted["producer_epoch"] == opened["producer_epoch"] + 1  # the producer is fenced


def test_offsets_sent_with_a_transaction_commit_and_abort_with_it(broker, topics):
    with Admin(broker.bootstrap) as admin:
        admin.create_topic("txn-offsets", num_partitions=1)
    producer = transactional(broker.bootstrap, "offsets")
    reader = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap,
                                       "group.id": "txn-group", "enable.auto.commit": False,
                                       "log_level": 2})
    metadata = reader.consumer_group_metadata()
    partition = [confluent_kafka.TopicPartition("txn-offsets", 0)]

    def send_offset(offset: int, commit: bool) -> None:
        producer.begin_transaction()
        producer.produce("txn-offsets", value=b"x", partition=0)
        producer.send_offsets_to_transaction(
            [confluent_kafka.TopicPartition("txn-offsets", 0, offset)], metadata, 30)
        (producer.commit_transaction if commit else producer.abort_transaction)(60)

    try:
        send_offset(5, commit=True)
        assert reader.committed(partition, 30)[0].offset == 5
        send_offset(9, commit=False)
        assert reader.committed(partition, 30)[0].offset == 5
        state = describe(broker.bootstrap, "offsets")
        assert state["transaction_state"] == "CompleteAbort"
    finally:
        reader.close()
