"""Producing and consuming with third-party clients (kcat, confluent-kafka, kafka-python)."""

from __future__ import annotations

import subprocess
import time

from confluent_kafka import Consumer, Producer, TopicPartition as CkPartition
from kafka import KafkaConsumer, KafkaProducer, TopicPartition as KpPartition


def kcat_produce(bootstrap: str, topic: str, partition: int, values: list[str]) -> None:
    result = subprocess.run(["kcat", "-b", bootstrap, "-P", "-t", topic, "-p", str(partition)],
                            input="\n".join(values) + "\n", capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr


def kcat_consume(bootstrap: str, topic: str, partitions: list[int]) -> set[tuple[int, str]]:
    """Every (partition, value) from the start to the end of each partition."""
    found = set()
    for partition in partitions:
        result = subprocess.run(["kcat", "-b", bootstrap, "-C", "-t", topic, "-p", str(partition),
                                 "-o", "beginning", "-e", "-f", "%p %s\\n"],
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        found |= {(int(p), value) for p, value in
                  (line.split(" ", 1) for line in result.stdout.splitlines() if line)}
    return found


def confluent_produce(bootstrap: str, topic: str, items: list[tuple[int, str]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 30000})
    errors = []
    for partition, value in items:
        producer.produce(topic, value=value.encode(), partition=partition,
                         on_delivery=lambda err, _msg: err and errors.append(err))
        producer.poll(0)
    assert producer.flush(60) == 0
    assert errors == []


def confluent_consume(bootstrap: str, topic: str, partitions: list[int],
                      expected: int) -> set[tuple[int, str]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "assign-only",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([CkPartition(topic, p, 0) for p in partitions])
    found, eof = set(), set()
    try:
        while len(eof) < len(partitions) or len(found) < expected:
            message = consumer.poll(15)
            assert message is not None, f"stalled after {len(found)} messages"
            if message.error():
                assert message.error().code() == -191, message.error()  # partition EOF
                eof.add(message.partition())
                continue
            found.add((message.partition(), message.value().decode()))
    finally:
        consumer.close()
    return found


def kafka_python_produce(bootstrap: str, topic: str, items: list[tuple[int, str]]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    futures = [producer.send(topic, value=value.encode(), partition=partition)
               for partition, value in items]
    producer.flush()
    for future in futures:
        future.get(timeout=30)
    producer.close()


def kafka_python_consume(bootstrap: str, topic: str, partitions: list[int]) -> set[tuple[int, str]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=5000,
                             enable_auto_commit=False)
    assigned = [KpPartition(topic, p) for p in partitions]
    consumer.assign(assigned)
    consumer.seek_to_beginning()
    ends = consumer.end_offsets(assigned)
    found = set()

    def done() -> bool:
        return all(consumer.position(tp) >= ends[tp] for tp in assigned)

    # Up to the end offsets. consumer_timeout_ms ends an iteration after a 5 s stall (a
    # failover on a loaded machine can take longer to reach the client): iterate again
    # until the end offsets or 60 s.
    deadline = time.monotonic() + 60
    while not done() and time.monotonic() < deadline:
        for record in consumer:
            found.add((record.partition, record.value.decode()))
            if done():
                break
    consumer.close()
    return found
