"""pylog's idempotent Producer against a broker that stops answering: the broker process is
SIGSTOPped for longer than the request timeout while records are being sent, then
SIGCONTed. Requests written before the stop time out and are retried on new connections;
the stopped broker still reads and writes the old ones when it continues, so the
retries arrive as duplicates. Every record must be in the log once, in order."""

from __future__ import annotations

import logging
import threading
import time
import uuid

import confluent_kafka

from pylog.client.admin import Admin
from pylog.client.producer import Producer
from pylog.testing.broker import broker_fixture

broker = broker_fixture(scope="module")

PARTITIONS = 2
REQUEST_TIMEOUT_MS = 1000


def consumed_values(bootstrap: str, topic: str, expected: int, timeout_s: float = 60.0) -> dict[int, list[bytes]]:
    """Every value of ``topic`` read with confluent-kafka, per partition, in offset order."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}",
                                         "enable.auto.commit": False, "log_level": 3})
    consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                     for p in range(PARTITIONS)])
    found: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + timeout_s
    try:
        while sum(map(len, found.values())) < expected and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=1000, timeout=0.5):
                assert message.error() is None, message.error()
                found[message.partition()].append(message.value())
        for message in consumer.consume(num_messages=1000, timeout=1.0):  # nothing beyond them
            found[message.partition()].append(message.value())
    finally:
        consumer.close()
    return found


def test_every_record_once_and_in_order_across_a_stopped_broker(broker, caplog):
    topic = f"paused-{uuid.uuid4().hex[:8]}"
    with Admin(broker.bootstrap) as admin:
        admin.create_topic(topic, PARTITIONS, 1, {})
    caplog.set_level(logging.DEBUG, logger="pylog.client.sender")
    sent: list[int] = []
    futures = []
    stop_sending = threading.Event()

    with Producer(broker.bootstrap, linger_ms=2, batch_size=1000, retry_backoff_ms=50,
                  request_timeout_ms=REQUEST_TIMEOUT_MS) as producer:
        assert producer.enable_idempotence

        def keep_sending() -> None:
            i = 0
            while not stop_sending.is_set():
                futures.append(producer.send(topic, b"%06d" % i + b"." * 50, partition=i % PARTITIONS))
                sent.append(i)
                i += 1
                time.sleep(0.001)

        sender = threading.Thread(target=keep_sending)
        sender.start()
        try:
            while len(futures) < 300 or not futures[200].done():
                time.sleep(0.05)
            broker.pause()
            try:
                time.sleep(3 * REQUEST_TIMEOUT_MS / 1000)
            finally:
                broker.resume()
            marker = len(futures) + 300
            while len(futures) < marker:
                time.sleep(0.05)
        finally:
            stop_sending.set()
            sender.join()
        producer.flush(120)

    offsets = {p: [] for p in range(PARTITIONS)}
    for future in futures:
        metadata = future.result(timeout=0)
        offsets[metadata.partition].append(metadata.offset)
    assert all(o == list(range(len(o))) for o in offsets.values())
    timed_out = [r.getMessage() for r in caplog.records
                 if "retrying" in r.getMessage() and "no answer from" in r.getMessage()]
    assert timed_out, "no request timed out while the broker was stopped"

    values = consumed_values(broker.bootstrap, topic, len(sent))
    for partition in range(PARTITIONS):
        assert [v[:6] for v in values[partition]] == [b"%06d" % i for i in sent if i % PARTITIONS == partition]
