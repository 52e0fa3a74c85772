"""librdkafka's in-process mock cluster: a Kafka-protocol server nobody here wrote."""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator

import confluent_kafka


@contextlib.contextmanager
def mock_cluster(num_brokers: int = 3) -> Iterator[str]:
    """Start a mock cluster; yield its bootstrap string ``host:port,...``.

    The cluster lives as long as the handle that created it. Topics are created on first
    use with 4 partitions spread over the brokers.
    """
    handle = confluent_kafka.Producer({"bootstrap.servers": "unused:1",
                                       "test.mock.num.brokers": num_brokers,
                                       "log_level": 3})
    brokers = handle.list_topics(timeout=10).brokers
    try:
        yield ",".join(f"{b.host}:{b.port}" for b in sorted(brokers.values(), key=lambda b: b.id))
    finally:
        del handle
        gc.collect()


def confluent_read_all(bootstrap: str, topic: str, partitions: list[int], expected: int,
                       timeout_s: float = 20.0) -> list:
    """Read ``expected`` messages from the start of ``partitions`` with confluent-kafka."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{topic}",
                                         "enable.auto.commit": False, "log_level": 3})
    consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                     for p in partitions])
    messages = []
    try:
        import time
        deadline = time.monotonic() + timeout_s
        while len(messages) < expected and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=1000, timeout=0.5):
                if message.error() is None:
                    messages.append(message)
    finally:
        consumer.close()
    return messages
