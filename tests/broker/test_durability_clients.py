"""After a SIGKILL and a restart, kcat and kafka-python read back everything acknowledged.

Records are produced by kcat (zstd) and kafka-python (gzip), the broker is killed with
SIGKILL (no clean shutdown, so recovery runs) and started again on the same log dir;
each client then consumes every partition from the beginning and sees every record once,
in order, and produces more that read back after them.
"""

from __future__ import annotations

import subprocess

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from pylog.testing.broker import BrokerProcess

PARTITIONS = 2


@pytest.fixture
def killed_broker(tmp_path):
    broker = BrokerProcess(tmp_path / "broker", {"num.partitions": PARTITIONS,
                                                 "log.segment.bytes": 20000})
    broker.start()
    yield broker
    broker.stop()


def kcat(broker, *args: str, stdin: str | None = None) -> str:
    result = subprocess.run(["kcat", "-b", broker.bootstrap, *args], input=stdin, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def kcat_produce(broker, topic: str, start: int, count: int) -> None:
    for p in range(PARTITIONS):
        lines = "".join(f"k{i}:kcat {i} {'x' * 100}\n" for i in range(start, start + count)
                        if i % PARTITIONS == p)
        kcat(broker, "-P", "-t", topic, "-p", str(p), "-K:", "-z", "zstd", "-X", "acks=all", stdin=lines)


def kcat_consume(broker, topic: str) -> dict[int, list[tuple[int, str, str]]]:
    rows: dict[int, list[tuple[int, str, str]]] = {p: [] for p in range(PARTITIONS)}
    out = kcat(broker, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%p|%o|%k|%s\n")
    for line in out.splitlines():
        partition, offset, key, value = line.split("|", 3)
        rows[int(partition)].append((int(offset), key, value))
    return rows


def kafka_python_produce(broker, topic: str, start: int, count: int) -> None:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", compression_type="gzip",
                             linger_ms=5)
    futures = [producer.send(topic, key=b"k%d" % i, value=b"kafka-python %d " % i + b"y" * 100,
                             partition=i % PARTITIONS) for i in range(start, start + count)]
    producer.flush()
    for future in futures:
        future.get(timeout=10)
    producer.close()


def kafka_python_consume(broker, topic: str) -> dict[int, list[tuple[int, bytes, bytes]]]:
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=5000)
    partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(partitions)
    consumer.seek_to_beginning()
    ends = consumer.end_offsets(partitions)
    rows: dict[int, list[tuple[int, bytes, bytes]]] = {p: [] for p in range(PARTITIONS)}
    for record in consumer:
        rows[record.partition].append((record.offset, record.key, record.value))
        if all(consumer.position(tp) >= ends[tp] for tp in partitions):
            break
    consumer.close()
    return rows


def test_kcat_reads_everything_after_a_sigkill_restart(killed_broker):
    topic = "kcat-durable"
    kcat_produce(killed_broker, topic, 0, 600)
    killed_broker.kill()
    killed_broker.start()
    kcat_produce(killed_broker, topic, 600, 100)

    rows = kcat_consume(killed_broker, topic)
    for p in range(PARTITIONS):
        sent = [i for i in range(700) if i % PARTITIONS == p]
        assert [offset for offset, _, _ in rows[p]] == list(range(len(sent)))
        assert [(key, value) for _, key, value in rows[p]] == [
            (f"k{i}", f"kcat {i} {'x' * 100}") for i in sent]


def test_kafka_python_reads_everything_after_a_sigkill_restart(killed_broker):
    topic = "kp-durable"
    kafka_python_produce(killed_broker, topic, 0, 600)
    killed_broker.kill()
    killed_broker.start()
    kafka_python_produce(killed_broker, topic, 600, 100)

    rows = kafka_python_consume(killed_broker, topic)
    for p in range(PARTITIONS):
        sent = [i for i in range(700) if i % PARTITIONS == p]
        assert [offset for offset, _, _ in rows[p]] == list(range(len(sent)))
        assert [(key, value) for _, key, value in rows[p]] == [
            (b"k%d" % i, b"kafka-python %d " % i + b"y" * 100) for i in sent]
