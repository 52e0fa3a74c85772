"""Producer.produce, the fast path (no future per record), against a pylog broker subprocess
reached through a CuttingProxy: delivery callbacks once per record with the offsets the
log shows, send order kept through cut connections (idempotence), transactions, errors
delivered to callbacks, and the pure-Python record encoder in the same places."""

from __future__ import annotations

import logging
import threading
import time
import uuid

import confluent_kafka
import pytest

from pylog.client.admin import Admin
from pylog.client.consumer import SimpleConsumer
from pylog.client.producer import Producer, TransactionAbortedError
from pylog.client.results import RecordMetadata
from pylog.errors import PylogError, MessageTooLargeError, UnknownTopicOrPartitionError
from pylog.records import batch as batch_module
from pylog.records.records_buffer import PyRecordsBuffer
from pylog.testing.broker import BrokerProcess
from pylog.testing.cutting_proxy import CuttingProxy
from pylog.testing.process import free_port

TIMEOUT = 30
MAX_BATCH = 50_000  # the broker's message.max.bytes: a larger batch is refused for good


@pytest.fixture(scope="module")
def proxied(tmp_path_factory):
    """(broker, proxy): clients reach the broker only through the proxy."""
    proxy_port = free_port("127.0.0.1")
    broker = BrokerProcess(tmp_path_factory.mktemp("fast-path"), {
        "num.partitions": 1, "advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy_port}",
        "message.max.bytes": MAX_BATCH, "transaction.state.log.num.partitions": 1,
        "offsets.topic.num.partitions": 1})
    broker.start()
    proxy = CuttingProxy(proxy_port, broker.port, cuts=0)
    try:
        yield broker, proxy
    finally:
        proxy.close()
        broker.stop()


class Deliveries:
    """An on_delivery callback that records every call, from whichever thread."""

    def __init__(self) -> None:
        self.calls: list[tuple[object, PylogError | None, RecordMetadata]] = []
        self._lock = threading.Lock()

    def callback(self, tag: object):
        def on_delivery(error, metadata):
            with self._lock:
                self.calls.append((tag, error, metadata))
        return on_delivery

    def tags(self) -> list:
        return [tag for tag, _, _ in self.calls]


def new_topic(broker: BrokerProcess, partitions: int = 1) -> str:
    topic = f"fast-{uuid.uuid4().hex[:8]}"
    with Admin(broker.bootstrap) as admin:
        admin.create_topic(topic, partitions, 1, {})
    return topic


def read_values(broker: BrokerProcess, topic: str, partition: int, **settings) -> list[tuple[int, bytes]]:
    found, offset = [], 0
    with SimpleConsumer(broker.bootstrap, **settings) as consumer:
        end = consumer.latest_offset(topic, partition)
        while offset < end:
            result = consumer.fetch(topic, partition, offset)
            found += [(r.offset, r.value) for r in result.records]
            offset = result.next_offset
    return found


@pytest.fixture(params=["c", "python"])
def encoder(request, monkeypatch):
    """Both record encoders: the C extension's RecordsBuffer and its pure-Python twin."""
    if request.param == "python":
        monkeypatch.setattr(batch_module, "RecordsBuffer", PyRecordsBuffer)
    return request.param


def test_callbacks_once_per_record_with_the_offsets_in_the_log(proxied, encoder):
    broker, proxy = proxied
    proxy.rearm(cuts=0)
    topic = new_topic(broker, partitions=3)
    deliveries = Deliveries()
    futures = {}
    with Producer(broker.bootstrap, linger_ms=2, batch_size=3000, compression="zstd") as producer:
        for i in range(900):
            value = b"%05d" % i + b"." * 50
            if i % 10 == 0:  # futures and callbacks in the same batches
                futures[i] = producer.send(topic, value, key=b"k%d" % (i % 7))
            elif i % 10 == 1:  # nobody waits for these
                producer.produce(topic, value, key=b"k%d" % (i % 7))
            else:
                producer.produce(topic, value, key=b"k%d" % (i % 7), on_delivery=deliveries.callback(i),
                                 headers={"n": b"%d" % i} if i % 10 == 2 else None, timestamp=1_000_000 + i)
        producer.flush(TIMEOUT)
    assert sorted(deliveries.tags()) == [i for i in range(900) if i % 10 > 1]  # each once
    assert all(error is None for _, error, _ in deliveries.calls)
    written = {(p, offset): value for p in range(3) for offset, value in read_values(broker, topic, p)}
    assert len(written) == 900
    for i, error, metadata in deliveries.calls:
        assert written[(metadata.partition, metadata.offset)][:5] == b"%05d" % i
        assert metadata.topic == topic and metadata.timestamp == 1_000_000 + i
    for i, future in futures.items():
        metadata = future.result(timeout=0)
        assert written[(metadata.partition, metadata.offset)][:5] == b"%05d" % i
    for partition in range(3):  # per partition, callbacks come in send order with rising offsets
        calls = [(i, m.offset) for i, _, m in deliveries.calls if m.partition == partition]
        assert calls == sorted(calls) and [o for _, o in calls] == sorted(o for _, o in calls)
    with SimpleConsumer(broker.bootstrap) as consumer:
        with_header = [r for r in consumer.fetch(topic, 0, 0).records if r.headers]
    assert with_header and all(r.headers == (("n", b"%d" % int(r.value[:5])),) for r in with_header)


def test_idempotent_produce_keeps_every_record_once_in_order_through_cut_connections(proxied, encoder):
    broker, proxy = proxied
    topic = new_topic(broker)
    deliveries = Deliveries()
    proxy.rearm(cuts=3)
    with Producer(broker.bootstrap, linger_ms=2, batch_size=2000, retry_backoff_ms=10) as producer:
        assert producer.enable_idempotence
        for i in range(1500):
            producer.produce(topic, b"%06d" % i + b"." * 80, partition=0, on_delivery=deliveries.callback(i))
        producer.flush(TIMEOUT)
    assert proxy.cuts_done == 3  # batches the broker wrote were sent again
    assert [(i, error, m.offset) for i, error, m in deliveries.calls] == [(i, None, i) for i in range(1500)]
    assert [value[:6] for _, value in read_values(broker, topic, 0)] == [b"%06d" % i for i in range(1500)]


def test_transactions_through_the_fast_path(proxied):
    broker, proxy = proxied
    proxy.rearm(cuts=0)
    topic = new_topic(broker)
    committed, aborted = Deliveries(), Deliveries()
    with Producer(broker.bootstrap, transactional_id=f"fast-{uuid.uuid4().hex[:8]}", linger_ms=5,
                  transaction_timeout_ms=20000) as producer:
        producer.init_transactions(TIMEOUT)
        producer.begin_transaction()
        for i in range(200):
            producer.produce(topic, b"c%d" % i, partition=0, on_delivery=committed.callback(i))
        producer.commit_transaction(TIMEOUT)
        producer.begin_transaction()
        for i in range(100):
            producer.produce(topic, b"a%d" % i, partition=0, on_delivery=aborted.callback(i))
        producer.abort_transaction(TIMEOUT)
        producer.begin_transaction()
        producer.produce(topic, b"last", partition=0)
        producer.commit_transaction(TIMEOUT)
    assert [(i, e, m.offset) for i, e, m in committed.calls] == [(i, None, i) for i in range(200)]
    # Aborted: written and then hidden, or failed before it was sent; each record told once.
    assert aborted.tags() == list(range(100))
    assert all(e is None or isinstance(e, TransactionAbortedError) for _, e, _ in aborted.calls)
    expected = [b"c%d" % i for i in range(200)] + [b"last"]
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "fast-path",
                                         "isolation.level": "read_committed", "enable.auto.commit": False,
                                         "log_level": 3})
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    seen = []
    deadline = time.monotonic() + TIMEOUT  # the broker writes the last marker after it answers EndTxn
    try:
        while len(seen) < len(expected) and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=500, timeout=0.5):
                if message.error():
                    raise AssertionError(message.error())
                seen.append(message.value())
    finally:
        consumer.close()
    assert seen == expected


def test_errors_are_delivered_to_callbacks(proxied, encoder, caplog):
    broker, proxy = proxied
    proxy.rearm(cuts=0)
    topic = new_topic(broker, partitions=2)
    deliveries = Deliveries()
    with Producer(broker.bootstrap, linger_ms=2, batch_size=2 * MAX_BATCH, acks=1) as producer:
        # Not queued: told before produce returns, or raised without a callback.
        producer.produce(topic, b"nowhere", partition=5, on_delivery=deliveries.callback("nowhere"))
        assert [(tag, type(e), m.offset) for tag, e, m in deliveries.calls] == [
            ("nowhere", UnknownTopicOrPartitionError, -1)]
        with pytest.raises(UnknownTopicOrPartitionError):
            producer.produce(topic, b"nowhere", partition=5)
        # Refused by the broker for good: every record of the batch fails, once.
        for i in range(3):
            producer.produce(topic, b"x" * (MAX_BATCH // 3), partition=0, on_delivery=deliveries.callback(i))
        producer.produce(topic, b"y" * (MAX_BATCH // 3), partition=0)  # nobody waits: logged
        producer.produce(topic, b"fine", partition=1, on_delivery=deliveries.callback("fine"))

        def raising(error, metadata):
            raise RuntimeError("a bug in the callback")
        producer.produce(topic, b"fine too", partition=1, on_delivery=raising)
        producer.produce(topic, b"still told", partition=1, on_delivery=deliveries.callback("after"))
        with caplog.at_level(logging.WARNING, logger="pylog.client"):
            producer.flush(TIMEOUT)
    failed = [(tag, type(e), m.offset) for tag, e, m in deliveries.calls[1:] if e is not None]
    assert failed == [(i, MessageTooLargeError, -1) for i in range(3)]
    delivered = {tag: m.offset for tag, e, m in deliveries.calls if e is None}
    assert delivered == {"fine": 0, "after": 2}
    assert any("1 records" in r.getMessage() and "MESSAGE_TOO_LARGE" in r.getMessage() for r in caplog.records)
    assert any("a bug in the callback" in str(r.exc_info[1]) for r in caplog.records if r.exc_info)
    assert read_values(broker, topic, 0) == []
    with pytest.raises(PylogError, match="closed"):
        producer.produce(topic, b"late", partition=1, on_delivery=deliveries.callback("late"))
    assert "late" not in deliveries.tags()
