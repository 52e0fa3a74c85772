"""The loader reads read_committed from a pylog broker serving transactions: the records of
aborted transactions never reach the table, and a load stops at the last stable offset, so
an open transaction's records wait for a later run (and are loaded once, when committed).

The transactions are written by confluent-kafka's transactional producer (librdkafka), so
the control batches and the aborted lists are the ones real producers and brokers make.
"""

from __future__ import annotations

import json

import confluent_kafka
import pytest

from pylog.client import Admin, SimpleConsumer
from pylog.etl.job import LoadRequest, run_load
from pylog.testing.broker import broker_fixture
from pylog.testing.waiting import wait_until
from tests.etl.helpers import assert_exactly_once, write_config

broker = broker_fixture(scope="module", overrides={
    "num.partitions": 2, "transaction.state.log.num.partitions": 2,
    "transaction.state.log.replication.factor": 1, "offsets.topic.num.partitions": 2})

TOPIC = "tx"


def event(n: int) -> bytes:
    return json.dumps({"user": f"u{n % 5}", "n": n, "ts": "2026-11-20T07:15:00Z"}).encode()


def transactional(bootstrap: str, transactional_id: str) -> confluent_kafka.Producer:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                                         "transactional.id": transactional_id, "log_level": 3})
    producer.init_transactions(60)
    return producer


def send(producer: confluent_kafka.Producer, numbers) -> None:
    for n in numbers:
        producer.produce(TOPIC, value=event(n), key=f"k{n}".encode(), partition=n % 2)
    assert producer.flush(30) == 0


def loaded_numbers(spark, warehouse) -> list[int]:
    return sorted(r["n"] for r in spark.read.parquet(str(warehouse / TOPIC)).collect())


def wait_for_markers(bootstrap: str) -> None:
    """Until no transaction is open in the topic: its stable offsets reach its log ends."""
    def settled() -> bool:
        with SimpleConsumer(bootstrap, isolation_level="read_committed") as committed, \
                SimpleConsumer(bootstrap) as uncommitted:
            return all(committed.latest_offset(TOPIC, p) == uncommitted.latest_offset(TOPIC, p)
                       for p in (0, 1))
    wait_until(settled, message="the commit's markers")


def committed_keys(bootstrap: str) -> set[tuple[str, int, int]]:
    """(topic, partition, offset) of every record a read_committed reader sees."""
    keys = set()
    with SimpleConsumer(bootstrap, isolation_level="read_committed") as consumer:
        for partition in (0, 1):
            offset, end = 0, consumer.latest_offset(TOPIC, partition)
            while offset < end:
                result = consumer.fetch(TOPIC, partition, offset)
                keys |= {(TOPIC, partition, r.offset) for r in result.records}
                offset = result.next_offset
    return keys


@pytest.mark.slow
def test_load_skips_aborted_transactions_and_waits_for_open_ones(spark, broker, tmp_path):
    with Admin(broker.bootstrap) as admin:
        admin.create_topic(TOPIC, num_partitions=2)
    config = write_config(tmp_path, broker.bootstrap, topic=TOPIC, max_records_per_task=25)
    committer = transactional(broker.bootstrap, "loader-test-a")
    committer.begin_transaction()
    send(committer, range(0, 60))
    committer.commit_transaction(30)
    committer.begin_transaction()
    send(committer, range(1000, 1040))
    committer.abort_transaction(30)

    pending = transactional(broker.bootstrap, "loader-test-b")
    pending.begin_transaction()
    send(pending, range(60, 80))  # written, not committed: beyond the last stable offset
    committer.begin_transaction()
    send(committer, range(80, 90))  # committed, but after the open transaction's records
    committer.commit_transaction(30)

    first = run_load(config, spark, LoadRequest(run_id="t1"))
    assert loaded_numbers(spark, tmp_path / "warehouse") == list(range(60))
    assert first[0].rows_written == 60

    pending.commit_transaction(30)
    # EndTxn is answered once the commit is decided; the markers that move the last stable
    # offset follow (as in Kafka), and a load runs to the stable offset it finds: wait for
    # them, as a scheduled run comes later anyway.
    wait_for_markers(broker.bootstrap)
    run_load(config, spark, LoadRequest(run_id="t2"))
    assert loaded_numbers(spark, tmp_path / "warehouse") == list(range(90))
    assert_exactly_once(spark, tmp_path / "warehouse", TOPIC, committed_keys(broker.bootstrap))
