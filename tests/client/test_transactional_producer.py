"""pylog's transactional Producer against a pylog broker subprocess (transaction
coordinator, markers, last stable offset) and against librdkafka's mock cluster.

The mock serves the transaction APIs and writes the markers, but neither hides aborted
records from read_committed readers, nor applies transactional offset commits, nor fences
an older producer (each InitProducerId gets a new producer id): those are checked on the
pylog broker only. A broker answers EndTxn before it has written the markers, so reads
after a commit or an abort wait until the markers are there (``settled``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from typing import Callable, TypeVar

import confluent_kafka
import pytest

from pylog.client import SimpleConsumer
from pylog.client.group_offsets import fetch_group_offsets
from pylog.client.producer import (
    ConsumerGroupMetadata, Producer, TransactionAbortedError, TransactionStateError)
from pylog.client.transactions import ABORT_MARKER, drop_aborted
from pylog.client.txn_manager import ProducerFencedError, TransactionAbortableError
from pylog.errors import ConfigError, UnknownTopicOrPartitionError
from pylog.records import decode_batch, iter_batch_headers
from pylog.testing.broker import BrokerProcess
from pylog.types import TopicPartition

TIMEOUT = 30
T = TypeVar("T")
# Few partitions of the internal topics: each one is loaded at start.
BROKER_SETTINGS = {"transaction.state.log.num.partitions": 2, "offsets.topic.num.partitions": 2,
                   "num.partitions": 2, "group.initial.rebalance.delay.ms": 0}


@pytest.fixture(scope="module")
def pylog_broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("txn-broker"), BROKER_SETTINGS) as broker:
        yield broker


@pytest.fixture(scope="module", params=["pylog-broker", "librdkafka-mock"])
def bootstrap(request) -> str:
    if request.param == "pylog-broker":
        return request.getfixturevalue("pylog_broker").bootstrap
    return request.getfixturevalue("mock_bootstrap")


def settled(read: Callable[[], T], expected: T, timeout_s: float = TIMEOUT) -> T:
    """``read()`` once it returns ``expected``, else its last value after ``timeout_s``
    (for the assertion to show)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = read()
        if value == expected or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def transactional(bootstrap: str, transactional_id: str | None = None, **settings) -> Producer:
    settings = {"linger_ms": 5, "transaction_timeout_ms": 20000, **settings}
    producer = Producer(bootstrap, transactional_id=transactional_id or unique("txn"), **settings)
    producer.init_transactions(TIMEOUT)
    return producer


def in_transaction(producer: Producer, topic: str, values: list[bytes], commit: bool) -> None:
    producer.begin_transaction()
    futures = [producer.send(topic, v, partition=i % 2) for i, v in enumerate(values)]
    producer.flush(TIMEOUT)  # written to the log before the transaction ends
    assert all(f.result(timeout=0).offset >= 0 for f in futures)
    (producer.commit_transaction if commit else producer.abort_transaction)(TIMEOUT)


def log_contents(bootstrap: str, topic: str, partition: int) -> list:
    """The partition as written: each record's value, each control batch as "COMMIT" or
    "ABORT", and the (producer id, transactional) of every data batch."""
    tokens, producers, offset = [], set(), 0
    with SimpleConsumer(bootstrap) as consumer:
        end = consumer.latest_offset(topic, partition)
        while offset < end:
            raw = drop_aborted(bytes(consumer.fetch_raw(topic, partition, offset).records), [])
            for position, header in iter_batch_headers(raw):
                records = decode_batch(raw, position).records
                if header.is_control:
                    kind = int.from_bytes(records[0].key[2:4], "big")
                    tokens.append("ABORT" if kind == ABORT_MARKER else "COMMIT")
                else:
                    tokens += [r.value for r in records]
                    producers.add((header.producer_id, header.is_transactional))
                offset = header.next_offset
    return [tokens, producers]


def read_all(consumer: SimpleConsumer, topic: str, partition: int) -> list[bytes]:
    offset, end, found = 0, consumer.latest_offset(topic, partition), []
    while offset < end:
        result = consumer.fetch(topic, partition, offset)
        found += [r.value for r in result.records]
        offset = result.next_offset
    return found


def values(prefix: bytes, count: int) -> list[bytes]:
    return [b"%s%d" % (prefix, i) for i in range(count)]


def test_each_transaction_ends_with_its_marker(bootstrap):
    topic = unique("txn-markers")
    with transactional(bootstrap) as producer:
        in_transaction(producer, topic, values(b"c", 10), commit=True)
        in_transaction(producer, topic, values(b"a", 6), commit=False)
        in_transaction(producer, topic, values(b"d", 4), commit=True)
    for partition in (0, 1):
        expected = (values(b"c", 10)[partition::2] + ["COMMIT"] + values(b"a", 6)[partition::2]
                    + ["ABORT"] + values(b"d", 4)[partition::2] + ["COMMIT"])
        assert settled(lambda: log_contents(bootstrap, topic, partition)[0], expected) == expected
        producers = log_contents(bootstrap, topic, partition)[1]
        assert len(producers) == 1 and all(transactional for _, transactional in producers)


def test_a_failed_send_makes_the_transaction_abortable(bootstrap):
    topic = unique("txn-abortable")
    with transactional(bootstrap) as producer:
        in_transaction(producer, topic, [b"first"], commit=True)
        producer.begin_transaction()
        written = producer.send(topic, b"written, then aborted", partition=0)
        producer.flush(TIMEOUT)
        failed = producer.send(topic, b"no such partition", partition=99)
        assert isinstance(failed.exception(timeout=TIMEOUT), UnknownTopicOrPartitionError)
        with pytest.raises(TransactionAbortableError, match="abort_transaction"):
            producer.send(topic, b"refused", partition=0)
        with pytest.raises(TransactionAbortableError, match="abort_transaction"):
            producer.commit_transaction(TIMEOUT)
        producer.abort_transaction(TIMEOUT)
        assert written.result(timeout=0).offset == 2
        in_transaction(producer, topic, [b"after"], commit=True)
    expected = [b"first", "COMMIT", b"written, then aborted", "ABORT", b"after", "COMMIT"]
    assert settled(lambda: log_contents(bootstrap, topic, 0)[0], expected) == expected


def test_abort_drops_records_not_yet_sent(bootstrap):
    topic = unique("txn-unsent")
    with transactional(bootstrap, linger_ms=60000) as producer:  # nothing is sent before abort
        in_transaction(producer, topic, [b"one", b"two"], commit=True)
        producer.begin_transaction()
        unsent = [producer.send(topic, b"never sent", partition=0) for _ in range(3)]
        producer.abort_transaction(TIMEOUT)
        assert all(isinstance(f.exception(timeout=0), TransactionAbortedError) for f in unsent)
        in_transaction(producer, topic, [b"three", b"four"], commit=True)
    expected = [b"one", "COMMIT", b"three", "COMMIT"]
    assert settled(lambda: log_contents(bootstrap, topic, 0)[0], expected) == expected


def test_calls_in_the_wrong_state_raise(bootstrap):
    with pytest.raises(ConfigError, match="enable_idempotence"):
        Producer(bootstrap, transactional_id="t", enable_idempotence=False)
    with pytest.raises(ConfigError, match="acks"):
        Producer(bootstrap, transactional_id="t", acks=1)
    with pytest.raises(ConfigError, match="transaction_timeout_ms"):
        Producer(bootstrap, transactional_id="t", transaction_timeout_ms=0)
    with Producer(bootstrap) as plain:
        with pytest.raises(TransactionStateError, match="not transactional"):
            plain.begin_transaction()
    topic = unique("txn-states")
    with Producer(bootstrap, transactional_id=unique("states")) as producer:
        with pytest.raises(TransactionStateError, match="init_transactions first"):
            producer.begin_transaction()
        with pytest.raises(TransactionStateError, match="init_transactions first"):
            producer.send(topic, b"x")
        producer.init_transactions(TIMEOUT)
        with pytest.raises(TransactionStateError, match="init_transactions.*READY"):
            producer.init_transactions(TIMEOUT)
        with pytest.raises(TransactionStateError, match="begin_transaction first"):
            producer.send(topic, b"x")
        for call in (producer.commit_transaction, producer.abort_transaction):
            with pytest.raises(TransactionStateError, match="begin_transaction first"):
                call(TIMEOUT)
        with pytest.raises(TransactionStateError, match="begin_transaction first"):
            producer.send_offsets_to_transaction({TopicPartition(topic, 0): 1}, "g", TIMEOUT)
        producer.begin_transaction()
        with pytest.raises(TransactionStateError, match="commit or abort it first"):
            producer.begin_transaction()
        producer.commit_transaction(TIMEOUT)  # nothing was sent: no EndTxn needed
    with pytest.raises(Exception, match="closed"):
        producer.begin_transaction()


# -- on the pylog broker only ---------------------------------------------------------


def test_read_committed_consumers_see_committed_records_only(pylog_broker):
    bootstrap, topic = pylog_broker.bootstrap, unique("txn-visible")
    with transactional(bootstrap) as producer:
        in_transaction(producer, topic, values(b"c", 10), commit=True)
        in_transaction(producer, topic, values(b"a", 10), commit=False)
        producer.begin_transaction()
        open_futures = [producer.send(topic, v, partition=i % 2) for i, v in enumerate(values(b"o", 4))]
        producer.flush(TIMEOUT)
        open_starts = [min(f.result().offset for f in open_futures if f.result().partition == p) for p in (0, 1)]
        with SimpleConsumer(bootstrap, isolation_level="read_committed") as committed:
            # the last stable offset stops at the open transaction's first record
            assert settled(lambda: [committed.latest_offset(topic, p) for p in (0, 1)], open_starts) == open_starts
        producer.commit_transaction(TIMEOUT)
        in_transaction(producer, topic, values(b"a2-", 4), commit=False)
    expected = {p: values(b"c", 10)[p::2] + values(b"o", 4)[p::2] for p in (0, 1)}

    with SimpleConsumer(bootstrap, isolation_level="read_committed") as committed, \
            SimpleConsumer(bootstrap) as uncommitted:
        ends = [uncommitted.latest_offset(topic, p) for p in (0, 1)]
        assert settled(lambda: [committed.latest_offset(topic, p) for p in (0, 1)], ends) == ends
        for partition in (0, 1):
            assert read_all(committed, topic, partition) == expected[partition]

    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": unique("rc"),
                                         "isolation.level": "read_committed", "enable.auto.commit": False,
                                         "enable.partition.eof": True, "log_level": 3})
    consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in (0, 1)])
    seen: dict[int, list[bytes]] = {0: [], 1: []}
    at_end: set[int] = set()
    try:
        for _ in range(240):  # until both partitions report their end (at most a minute)
            for message in consumer.consume(num_messages=100, timeout=0.25):
                if message.error() is None:
                    seen[message.partition()].append(message.value())
                elif message.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
                else:
                    raise AssertionError(message.error())
            if at_end == {0, 1}:
                break
    finally:
        consumer.close()
    assert at_end == {0, 1}
    assert seen == expected


def test_offsets_sent_to_a_transaction_commit_with_it(pylog_broker):
    bootstrap, topic, group = pylog_broker.bootstrap, unique("txn-offsets"), unique("group")
    with transactional(bootstrap) as producer, SimpleConsumer(bootstrap) as reader:
        in_transaction(producer, topic, [b"x", b"y"], commit=True)  # the topic exists
        producer.begin_transaction()
        producer.send_offsets_to_transaction({TopicPartition(topic, 0): 5, (topic, 1): 6}, group, TIMEOUT)
        assert fetch_group_offsets(reader.network, group, topic, [0, 1]) == {0: -1, 1: -1}
        producer.abort_transaction(TIMEOUT)
        producer.begin_transaction()
        producer.send(topic, b"output", partition=0)
        producer.send_offsets_to_transaction({TopicPartition(topic, 0): 7}, ConsumerGroupMetadata(group),
                                             TIMEOUT)
        producer.commit_transaction(TIMEOUT)
        # the commit's marker applies 7; the aborted transaction's 6 for partition 1 never shows
        committed = {0: 7, 1: -1}
        assert settled(lambda: fetch_group_offsets(reader.network, group, topic, [0, 1]), committed) == committed


def test_a_second_producer_with_the_same_id_fences_the_first(pylog_broker):
    bootstrap, topic, transactional_id = pylog_broker.bootstrap, unique("txn-fence"), unique("fenced")
    first = transactional(bootstrap, transactional_id)
    in_transaction(first, topic, [b"before"], commit=True)
    first.begin_transaction()
    zombie = first.send(topic, b"zombie", partition=0)
    first.flush(TIMEOUT)
    with transactional(bootstrap, transactional_id) as second:  # aborts first's transaction
        with pytest.raises(ProducerFencedError, match="fenced"):
            first.send(topic, b"more", partition=0).result(TIMEOUT)
        with pytest.raises(ProducerFencedError, match="can only be closed"):
            first.commit_transaction(TIMEOUT)
        for call in (first.begin_transaction, lambda: first.send(topic, b"again"),
                     lambda: first.abort_transaction(TIMEOUT)):
            with pytest.raises(ProducerFencedError, match="can only be closed"):
                call()
        first.close()
        in_transaction(second, topic, [b"after"], commit=True)
    assert zombie.result(timeout=0).offset >= 0  # written, then aborted by the coordinator
    with SimpleConsumer(bootstrap, isolation_level="read_committed") as committed:
        expected = [b"before", b"after"]
        assert settled(lambda: read_all(committed, topic, 0), expected) == expected


def test_closing_a_producer_aborts_its_open_transaction(pylog_broker):
    bootstrap, topic = pylog_broker.bootstrap, unique("txn-close")
    producer = transactional(bootstrap)
    in_transaction(producer, topic, [b"kept"], commit=True)
    producer.begin_transaction()
    producer.send(topic, b"left open", partition=0).result(TIMEOUT)
    with SimpleConsumer(bootstrap, isolation_level="read_committed") as committed:
        # the open transaction (offset 2, after b"kept" and its marker) holds it back
        assert settled(lambda: committed.latest_offset(topic, 0), 2) == 2
        producer.close(TIMEOUT)
        expected = [b"kept", "COMMIT", b"left open", "ABORT"]
        assert settled(lambda: log_contents(bootstrap, topic, 0)[0], expected) == expected
        assert settled(lambda: committed.latest_offset(topic, 0), 4) == 4
        assert read_all(committed, topic, 0) == [b"kept"]


def test_a_transaction_commits_across_a_stopped_broker(pylog_broker, caplog):
    """The broker is SIGSTOPped for longer than the request timeout twice: while records
    are on their way, then while EndTxn is. The producer retries them on new connections,
    the broker handles the old ones too when it continues, and the transaction commits
    once, with every record once."""
    bootstrap, topic = pylog_broker.bootstrap, unique("txn-stopped")
    caplog.set_level(logging.DEBUG, logger="pylog.client")
    producer = transactional(bootstrap, request_timeout_ms=1000, retry_backoff_ms=50)
    try:
        producer.begin_transaction()
        first = [producer.send(topic, b"a%03d" % i, partition=0) for i in range(50)]
        producer.flush(TIMEOUT)
        with stopped(pylog_broker):
            second = [producer.send(topic, b"b%03d" % i, partition=0) for i in range(50)]
        producer.flush(TIMEOUT)
        with stopped(pylog_broker):
            committing = threading.Thread(target=producer.commit_transaction, args=(TIMEOUT,))
            committing.start()
        committing.join()
        assert [f.result(timeout=0).offset for f in first + second] == list(range(100))
    finally:
        producer.close()
    retried = {r.getMessage().split(":")[0] for r in caplog.records if "within 1s" in r.getMessage()}
    assert {"retrying " + topic + "-0 (attempt 1)", "commit_transaction"} <= retried
    expected = [b"a%03d" % i for i in range(50)] + [b"b%03d" % i for i in range(50)] + ["COMMIT"]
    assert settled(lambda: log_contents(bootstrap, topic, 0)[0], expected) == expected


@contextlib.contextmanager
def stopped(broker: BrokerProcess, seconds: float = 2.5):
    """SIGSTOP the broker, run the block, wait ``seconds`` in all, SIGCONT."""
    broker.pause()
    try:
        yield
        time.sleep(seconds)
    finally:
        broker.resume()
