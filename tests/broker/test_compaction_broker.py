"""Compacted topics on a real broker: librdkafka and kcat read the model after cleaning,
keyless records are refused, and SIGKILLs while the cleaner runs lose nothing it must keep.

The model is what the producer had acknowledged, by offset. A read from the beginning must
give only acknowledged records at their own offsets, in order, and for every key its newest
acknowledged record (a tombstone may be gone once ``delete.retention.ms`` has passed).
"""

from __future__ import annotations

import random
import subprocess
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pylog.log import layout
from pylog.testing.broker import BrokerProcess

BROKER = {"num.partitions": 1, "log.cleaner.backoff.ms": 50, "auto.create.topics.enable": "false"}
TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": "4096",
                "min.cleanable.dirty.ratio": "0.01"}
INVALID_RECORD = 87


@pytest.fixture
def broker(tmp_path):
    process = BrokerProcess(tmp_path / "broker", BROKER).start()
    yield process
    process.stop()


def create_topic(broker, topic, **configs):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1,
                                            config={**TOPIC_CONFIG, **configs})])
    futures[topic].result(30)


def produce(broker, topic, updates) -> dict[int, tuple]:
    """Send ``(key, value)`` updates with acks=all; returns the acknowledged ones by offset."""
    # Small batches: a produce may not exceed the tiny segment.bytes of these topics.
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5,
                         "batch.num.messages": 10})
    acked, errors = {}, []

    def delivered(err, msg):
        if err is None:
            acked[msg.offset()] = (msg.key(), msg.value())
        else:
            errors.append(err)

    for key, value in updates:
        producer.produce(topic, key=key, value=value, partition=0, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert errors == []
    return acked


def updates(count, keys=40, seed=0, tombstones=0.1):
    rng = random.Random(seed)
    return [(b"key-%d" % rng.randrange(keys),
             None if rng.random() < tombstones else b"value-%d-" % i + b"x" * rng.randrange(60))
            for i in range(count)]


def consume_all(broker, topic) -> list[tuple[int, bytes | None, bytes | None]]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "check",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    records = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        message = consumer.poll(5)
        assert message is not None, f"stalled after {len(records)} records"
        if message.error():
            assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
            break
        records.append((message.offset(), message.key(), message.value()))
    consumer.close()
    return records


def check_model(records, acked, tombstones_may_go: bool) -> None:
    offsets = [offset for offset, _, _ in records]
    assert offsets == sorted(set(offsets))
    for offset, key, value in records:
        assert acked[offset] == (key, value), f"offset {offset} was not written like this"
    newest = {}
    for offset in sorted(acked):
        newest[acked[offset][0]] = offset
    read = {}
    for offset, key, _ in records:
        read[key] = offset
    for key, offset in newest.items():
        if key in read:
            assert read[key] == offset, f"{key!r}: read offset {read[key]}, newest is {offset}"
        else:
            assert tombstones_may_go and acked[offset][1] is None, f"{key!r} lost"


def cleaned_up_to(broker, topic) -> int:
    path = broker.log_dir / layout.CLEANER_OFFSET_CHECKPOINT
    try:
        lines = path.read_text().splitlines()[2:]
    except FileNotFoundError:
        return 0
    return max([int(line.split()[2]) for line in lines if line.split()[0] == topic] or [0])


def wait_cleaned(broker, topic, offset, timeout=30.0):
    deadline = time.monotonic() + timeout
    while cleaned_up_to(broker, topic) < offset:
        assert time.monotonic() < deadline, f"not cleaned up to {offset}:\n{broker.log_text()[-3000:]}"
        time.sleep(0.1)


def test_consumers_read_the_compacted_model(broker):
    topic = "compacted"
    create_topic(broker, topic, **{"delete.retention.ms": "0"})
    acked = produce(broker, topic, updates(3000))
    wait_cleaned(broker, topic, 2000)
    records = consume_all(broker, topic)
    assert len(records) < len(acked) / 2
    check_model(records, acked, tombstones_may_go=True)
    # kcat (librdkafka's CLI) steps over the same gaps. (The cleaner may have run again
    # meanwhile, so it is checked against the model, not against the read above.)
    out = subprocess.run(["kcat", "-b", broker.bootstrap, "-C", "-t", topic, "-p", "0", "-o",
                          "beginning", "-e", "-q", "-Z", "-f", "%o\t%k\t%s\n"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    rows = [line.split("\t") for line in out.stdout.splitlines()]
    check_model([(int(o), k.encode(), None if v == "NULL" else v.encode()) for o, k, v in rows],
                acked, tombstones_may_go=True)


def test_a_keyless_record_is_refused_with_invalid_record(broker):
    topic = "compacted-keys"
    create_topic(broker, topic)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    errors = []
    producer.produce(topic, value=b"no key", partition=0,
                     on_delivery=lambda err, msg: errors.append(err))
    producer.flush(30)
    assert [e.code() for e in errors] == [INVALID_RECORD]
    acked = produce(broker, topic, [(b"k", b"v")])
    assert list(acked) == [0]  # nothing was written by the refused produce


def test_sigkill_while_cleaning_loses_nothing(broker):
    topic = "compacted-crash"
    create_topic(broker, topic)
    acked: dict[int, tuple] = {}
    rng = random.Random(7)
    for round_number in range(5):
        acked.update(produce(broker, topic, updates(1500, keys=30, seed=round_number)))
        time.sleep(rng.uniform(0.0, 0.4))  # the cleaner is at some point of its pass
        broker.kill()
        broker.start()
        check_model(consume_all(broker, topic), acked, tombstones_may_go=False)
    wait_cleaned(broker, topic, max(acked) - 1500)
    records = consume_all(broker, topic)
    check_model(records, acked, tombstones_may_go=False)
    assert len(records) < len(acked) / 2


def test_a_restart_keeps_old_segments_of_a_compacted_topic(broker):
    """Retention starts only once the loaded logs have their topics' configs: with the
    defaults (cleanup.policy=delete, 7 days) a compacted topic's segments of records
    written long ago would be deleted at the first retention check after a restart."""
    create_topic(broker, "old-keys", **{"min.cleanable.dirty.ratio": "0.99"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5,
                         "batch.num.messages": 10})
    long_ago = int(time.time() * 1000) - 365 * 24 * 3600 * 1000
    for n in range(200):
        producer.produce("old-keys", key=f"k{n}".encode(), value=b"x" * 50, timestamp=long_ago)
    assert producer.flush(30) == 0
    directory = broker.log_dir / "old-keys-0"
    assert len(list(directory.glob("*.log"))) > 1, "the records should span several segments"
    broker.stop()
    broker.start()
    time.sleep(1)  # the first retention check runs right after start
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "old-keys",
                         "enable.auto.commit": False})
    low, high = consumer.get_watermark_offsets(TopicPartition("old-keys", 0), timeout=10)
    consumer.close()
    assert (low, high) == (0, 200)
