"""Broker throughput, next to baselines run in the same process tree.

1. Produce: a confluent-kafka producer (200-byte values, acks=1, linger.ms=5) into a
   pylog broker, with one partition and with four, and the same producer into
   librdkafka's built-in mock cluster. Prints msgs/s, MB/s and pylog/mock.
2. Fetch: a confluent-kafka consumer reading a large partition (1 GB by default) from
   the beginning, next to raw loopback ``os.sendfile`` bandwidth of a file of the same
   size. Prints MB/s and the ratio.
3. The Kafka paper's producer test: 200-byte messages sent in batches of 1 and of 50
   (paper: about 50k and 400k msgs/s on its 2011 hardware).

    python benchmarks/broker_bench.py [--messages 300000] [--fetch-mb 1024]
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pylog.protocol import ApiKey, encode_request
from pylog.records import build_batch
from pylog.testing.broker import BrokerProcess

VALUE = b"v" * 200


def produce_rate(bootstrap: str, topic: str, count: int, partitions: int, **extra) -> float:
    """Messages per second for ``count`` 200-byte messages, spread over ``partitions``."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5,
                         "queue.buffering.max.messages": 2_000_000, **extra})
    failed = []

    def delivered(err, _msg):
        if err is not None:
            failed.append(err)

    producer.produce(topic, VALUE, partition=0)  # connect and fetch metadata first
    producer.flush(30)
    start = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, VALUE, partition=i % partitions, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - start
    if remaining or failed:
        raise RuntimeError(f"{remaining} undelivered, {len(failed)} failed: {failed[:1]}")
    return count / elapsed


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions)])[topic].result(30)


def mock_cluster_bootstrap() -> tuple[Producer, str]:
    """Start librdkafka's in-process mock cluster; keep the returned handle alive."""
    handle = Producer({"test.mock.num.brokers": 1})
    brokers = handle.list_topics(timeout=10).brokers
    broker = next(iter(brokers.values()))
    return handle, f"{broker.host}:{broker.port}"


def bench_produce(broker: BrokerProcess, count: int) -> None:
    print(f"\n-- produce: {count} x 200-byte values, acks=1, linger.ms=5")
    handle, mock = mock_cluster_bootstrap()
    for partitions in (1, 4):
        create_topic(broker.bootstrap, f"produce-{partitions}", partitions)
        # The mock cluster auto-creates topics with four partitions; we use the first N.
        ours = produce_rate(broker.bootstrap, f"produce-{partitions}", count, partitions)
        theirs = produce_rate(mock, f"produce-{partitions}", count, partitions)
        print(f"{partitions} partition(s): pylog {ours:>10,.0f} msgs/s {ours * 200 / 1e6:6.1f} MB/s"
              f" | mock cluster {theirs:>10,.0f} msgs/s {theirs * 200 / 1e6:6.1f} MB/s"
              f" | pylog/mock {ours / theirs:.2f}")
    del handle


def bench_paper(broker: BrokerProcess, count: int) -> None:
    print(f"\n-- the Kafka paper's producer test: {count} x 200-byte messages, acks=1")
    create_topic(broker.bootstrap, "paper", 1)
    for batch in (1, 50):
        rate = produce_rate(broker.bootstrap, "paper", count, 1, **{
            "batch.num.messages": batch, "linger.ms": 0 if batch == 1 else 5})
        paper = {1: 50_000, 50: 400_000}[batch]
        print(f"batch size {batch:>2}: {rate:>10,.0f} msgs/s (paper: about {paper:,})")


def fill_partition(bootstrap: str, topic: str, total_bytes: int) -> int:
    """Append ~total_bytes of 1000-byte records with raw 1 MB produce requests."""
    host, port = bootstrap.rsplit(":", 1)
    batch = build_batch([(None, b"r" * 1000, (), int(time.time() * 1000))] * 1000)
    records = 0
    with socket.create_connection((host, int(port))) as sock:
        reader = sock.makefile("rb")
        sent = 0
        while sent < total_bytes:
            body = {"transactional_id": None, "acks": 1, "timeout_ms": 30000, "topic_data": [
                {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}
            sock.sendall(encode_request(ApiKey.PRODUCE, 8, 1, "bench", body))
            size = int.from_bytes(reader.read(4), "big")
            reader.read(size)
            sent += len(batch)
            records += 1000
    return records


def consume_rate(bootstrap: str, topic: str, records: int) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench",
                         "enable.auto.commit": False, "fetch.max.bytes": 50 << 20,
                         "max.partition.fetch.bytes": 16 << 20})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = size = 0
    start = time.perf_counter()
    while got < records:
        for message in consumer.consume(num_messages=10000, timeout=10):
            if message.error() is None:
                got += 1
                size += len(message.value())
    elapsed = time.perf_counter() - start
    consumer.close()
    return size / elapsed / 1e6


def sendfile_rate(total_bytes: int) -> float:
    """Raw loopback bandwidth: os.sendfile of a file into a TCP socket, drained by a thread."""
    with tempfile.NamedTemporaryFile() as source:
        chunk = os.urandom(1 << 20)
        for _ in range(total_bytes >> 20):
            source.write(chunk)
        source.flush()
        server = socket.create_server(("127.0.0.1", 0))
        port = server.getsockname()[1]

        def drain():
            conn, _ = server.accept()
            buf = bytearray(1 << 20)
            while conn.recv_into(buf):
                pass
            conn.close()

        reader = threading.Thread(target=drain)
        reader.start()
        with socket.create_connection(("127.0.0.1", port)) as out:
            start = time.perf_counter()
            offset, size = 0, os.fstat(source.fileno()).st_size
            while offset < size:
                offset += os.sendfile(out.fileno(), source.fileno(), offset, size - offset)
        reader.join()
        elapsed = time.perf_counter() - start
        server.close()
        return size / elapsed / 1e6


def bench_fetch(broker: BrokerProcess, megabytes: int) -> None:
    print(f"\n-- fetch: a {megabytes} MB partition read from the beginning")
    create_topic(broker.bootstrap, "fetch", 1)
    records = fill_partition(broker.bootstrap, "fetch", megabytes << 20)
    ours = consume_rate(broker.bootstrap, "fetch", records)
    raw = sendfile_rate(megabytes << 20)
    print(f"pylog consumer {ours:8.1f} MB/s | raw loopback sendfile {raw:8.1f} MB/s"
          f" | ratio {ours / raw:.3f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--fetch-mb", type=int, default=1024)
    args, _ = parser.parse_known_args()
    with tempfile.TemporaryDirectory(prefix="pylog-bench-") as tmp:
        with BrokerProcess(Path(tmp), {"log.segment.bytes": 256 << 20,
                                       "log.retention.hours": 100000}) as broker:
            bench_produce(broker, args.messages)
            bench_paper(broker, args.messages)
            bench_fetch(broker, args.fetch_mb)
    return 0


if __name__ == "__main__":
    sys.exit(main())
