"""Keyed placement against a real pylog broker: pylog's Producer puts every key on the
partition confluent-kafka's ``murmur2_random`` (the Java client's choice) puts it on."""

from __future__ import annotations

import random

import confluent_kafka

from pylog.client import Admin, Producer, SimpleConsumer
from pylog.testing.broker import broker_fixture

broker = broker_fixture(scope="module", overrides={"num.partitions": 1})

PARTITIONS = 6


def test_same_keys_same_partitions_as_confluent_on_a_pylog_broker(broker):
    topic = "placement"
    with Admin(broker.bootstrap) as admin:
        admin.create_topic(topic, num_partitions=PARTITIONS)
    rng = random.Random(7)
    keys = list({rng.randbytes(rng.randrange(1, 40)) for _ in range(300)} | {b"user-1", b"a", b"\x00"})

    confluent_partitions: dict[bytes, int] = {}
    errors = []
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap,
                                        "partitioner": "murmur2_random", "linger.ms": 5, "log_level": 3})
    for key in keys:
        producer.produce(topic, b"confluent", key, on_delivery=lambda err, msg: (
            errors.append(err) if err else confluent_partitions.__setitem__(msg.key(), msg.partition())))
    assert producer.flush(30) == 0 and errors == []

    with Producer(broker.bootstrap, linger_ms=5) as ours:
        futures = {key: ours.send(topic, b"pylog", key=key) for key in keys}
        ours.flush()
        pylog_partitions = {key: future.result().partition for key, future in futures.items()}
    assert pylog_partitions == confluent_partitions
    assert len(set(pylog_partitions.values())) == PARTITIONS  # the keys reach every partition

    # what the broker holds agrees: each key's two records sit in that one partition
    held: dict[bytes, list[tuple[int, bytes]]] = {}
    with SimpleConsumer(broker.bootstrap) as consumer:
        for partition in range(PARTITIONS):
            offset, end = 0, consumer.latest_offset(topic, partition)
            while offset < end:
                result = consumer.fetch(topic, partition, offset)
                for record in result.records:
                    held.setdefault(record.key, []).append((partition, record.value))
                offset = result.next_offset
    assert {key: sorted(found) for key, found in held.items()} == {
        key: [(p, b"confluent"), (p, b"pylog")] for key, p in confluent_partitions.items()}
