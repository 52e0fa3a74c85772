"""pylog's client next to confluent-kafka (librdkafka, C), both against the same pylog broker.

1. Produce: N 200-byte values (acks=1, linger 5 ms, batch 64 KB, no compression) with
   pylog's Producer -- ``send`` (a future per record), ``produce`` with an
   ``on_delivery`` callback, ``produce`` alone -- and with confluent-kafka's Producer
   (a delivery callback per record), into one partition each, taking turns for
   ``--rounds`` rounds (the machine's load changes during a run). Prints the median
   msgs/s and each pylog figure as a fraction of confluent-kafka's in the same run.
2. Consume: one partition of N records read from the beginning with
   ``SimpleConsumer.fetch`` (Record objects), with ``fetch_raw`` + ``decode_columns``
   (the loader's column path), and with a confluent-kafka consumer (assign + consume).
   Prints records/s and the ratios.
3. Decode only (no network): the same batches through ``decode_columns``,
   ``iter_records`` and kafka-python's pure-Python ``MemoryRecords`` reader.

With ``--keyed`` only a keyed produce runs instead: N records with distinct keys
(``b"key-%d" % i``, made before the clock starts) into a 4-partition topic, the partition
chosen from the key (pylog's DefaultPartitioner, confluent-kafka's ``murmur2_random``:
the same placement), with pylog's ``produce`` and confluent-kafka's ``produce`` (a
delivery callback each), taking turns; pylog's keyless ``produce`` into the same topic
runs too, for the cost of the keys. Prints the medians and the ratios.

    python benchmarks/client_bench.py [--messages 200000] [--rounds 3] [--keyed]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import time
from pathlib import Path

import confluent_kafka

from pylog.client import Admin, Producer, SimpleConsumer
from pylog.records import build_batch, decode_columns, iter_records
from pylog.testing.broker import BrokerProcess

VALUE = b"v" * 200
BATCH_SIZE = 65536
FETCH_BYTES = 4 * 1024 * 1024


def pylog_produce(bootstrap: str, topic: str, count: int, how: str = "send") -> float:
    """msgs/s of ``count`` sends: ``send`` (a future per record), ``produce`` with an
    ``on_delivery`` callback (as the confluent-kafka run), or ``produce`` alone."""
    failed = []

    def report(err, metadata):
        if err is not None:
            failed.append(err)

    with Producer(bootstrap, acks=1, linger_ms=5, batch_size=BATCH_SIZE) as producer:
        producer.send(topic, VALUE, partition=0).result()  # metadata and connection up
        start = time.perf_counter()
        if how == "send":
            futures = [producer.send(topic, VALUE, partition=0) for _ in range(count)]
        elif how == "produce+callback":
            produce = producer.produce
            for _ in range(count):
                produce(topic, VALUE, partition=0, on_delivery=report)
        else:
            produce = producer.produce
            for _ in range(count):
                produce(topic, VALUE, partition=0)
        producer.flush()
        elapsed = time.perf_counter() - start
    if how == "send":
        failed = [f for f in futures if f.exception() is not None]
    if failed:
        raise SystemExit(f"pylog producer ({how}): {len(failed)} sends failed")
    return count / elapsed


def confluent_produce(bootstrap: str, topic: str, count: int,
                      keys: list[bytes] | None = None) -> float:
    """msgs/s of confluent-kafka: ``count`` values to partition 0, or with ``keys`` one
    value per key, placed by ``murmur2_random`` (as the Java client places them)."""
    settings = {"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5,
                "batch.size": BATCH_SIZE, "queue.buffering.max.messages": 2_000_000,
                "log_level": 3}
    if keys is not None:
        settings["partitioner"] = "murmur2_random"
    producer = confluent_kafka.Producer(settings)
    failed = []

    def report(err, msg):
        if err is not None:
            failed.append(err)

    producer.produce(topic, VALUE, partition=0)
    producer.flush(30)
    produce, poll = producer.produce, producer.poll
    start = time.perf_counter()
    for key in keys if keys is not None else itertools.repeat(None, count):
        while True:
            try:
                if key is None:
                    produce(topic, VALUE, partition=0, on_delivery=report)
                else:
                    produce(topic, VALUE, key, on_delivery=report)
                break
            except BufferError:
                poll(0.01)
        poll(0)
    producer.flush(120)
    elapsed = time.perf_counter() - start
    if failed:
        raise SystemExit(f"confluent producer: {len(failed)} sends failed: {failed[0]}")
    return (count if keys is None else len(keys)) / elapsed

KEYED_PARTITIONS = 4


def pylog_produce_keyed(bootstrap: str, topic: str, keys: list[bytes], use_keys: bool = True) -> float:
    """msgs/s of ``produce`` with an ``on_delivery`` callback, the partition chosen by the
    default partitioner: from each key, or sticky without keys (``use_keys`` false; as many
    records)."""
    failed = []

    def report(err, metadata):
        if err is not None:
            failed.append(err)

    count = len(keys)
    with Producer(bootstrap, acks=1, linger_ms=5, batch_size=BATCH_SIZE) as producer:
        producer.send(topic, VALUE, partition=0).result()  # metadata and connection up
        produce = producer.produce
        start = time.perf_counter()
        if not use_keys:
            for _ in range(count):
                produce(topic, VALUE, on_delivery=report)
        else:
            for key in keys:
                produce(topic, VALUE, key, on_delivery=report)
        producer.flush()
        elapsed = time.perf_counter() - start
    if failed:
        raise SystemExit(f"pylog producer (keyed): {len(failed)} sends failed")
    return count / elapsed


def keyed(bootstrap: str, n: int, rounds: int) -> None:
    keys = [b"key-%d" % i for i in range(n)]
    with Admin(bootstrap) as admin:
        admin.create_topic("keyed", num_partitions=KEYED_PARTITIONS)
    print(f"keyed produce: {n} x 200-byte values with distinct keys (b'key-%d'), acks=1, linger 5 ms, "
          f"batch 64 KB, {KEYED_PARTITIONS} partitions; median of {rounds} rounds, the clients taking turns")
    rates: dict[str, list[float]] = {}
    for _ in range(rounds):
        rates.setdefault("confluent", []).append(confluent_produce(bootstrap, "keyed", len(keys), keys))
        rates.setdefault("keyed", []).append(pylog_produce_keyed(bootstrap, "keyed", keys))
        rates.setdefault("keyless", []).append(pylog_produce_keyed(bootstrap, "keyed", keys, use_keys=False))
    medians = {name: statistics.median(values) for name, values in rates.items()}
    theirs = medians["confluent"]
    print(f"  pylog produce keyed         {medians['keyed']:>12,.0f} msgs/s  "
          f"({medians['keyed'] / theirs:.2f} of confluent-kafka keyed)")
    print(f"  pylog produce keyless       {medians['keyless']:>12,.0f} msgs/s  "
          f"(keyed is {medians['keyed'] / medians['keyless']:.2f} of it)")
    print(f"  confluent-kafka keyed       {theirs:>12,.0f} msgs/s")


def pylog_fetch(bootstrap: str, topic: str, end: int) -> float:
    with SimpleConsumer(bootstrap) as consumer:
        start, offset, seen = time.perf_counter(), 0, 0
        while offset < end:
            result = consumer.fetch(topic, 0, offset, max_bytes=FETCH_BYTES)
            seen += len(result.records)
            offset = result.next_offset
        return seen / (time.perf_counter() - start)


def pylog_columns(bootstrap: str, topic: str, end: int) -> float:
    with SimpleConsumer(bootstrap) as consumer:
        start, offset, seen = time.perf_counter(), 0, 0
        while offset < end:
            raw = consumer.fetch_raw(topic, 0, offset, max_bytes=FETCH_BYTES)
            columns = decode_columns(raw.records, start_offset=offset)
            seen += len(columns)
            offset = columns.next_offset
        return seen / (time.perf_counter() - start)


def confluent_consume(bootstrap: str, topic: str, end: int) -> float:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "client-bench",
                                         "enable.auto.commit": False, "log_level": 3,
                                         "fetch.max.bytes": FETCH_BYTES})
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    start, seen = time.perf_counter(), 0
    while seen < end:
        seen += sum(1 for m in consumer.consume(num_messages=10000, timeout=1.0) if m.error() is None)
    elapsed = time.perf_counter() - start
    consumer.close()
    return seen / elapsed


def decode_only(count: int) -> dict[str, float]:
    """records/s of three decoders over 16 KB batches of 200-byte values."""
    from kafka.record.memory_records import MemoryRecords

    per_batch = 75
    batches = max(1, count // per_batch)
    buf = b"".join(build_batch([(None, VALUE, (), 1_700_000_000_000 + i) for i in range(per_batch)],
                               base_offset=b * per_batch) for b in range(batches))
    total = batches * per_batch

    def kafka_python() -> int:
        records, seen = MemoryRecords(buf), 0
        while records.has_next():
            seen += sum(1 for _ in records.next_batch())
        return seen

    rates = {}
    for name, decode in (("decode_columns", lambda: len(decode_columns(buf))),
                         ("iter_records", lambda: sum(1 for _ in iter_records(buf))),
                         ("kafka-python MemoryRecords", kafka_python)):
        start = time.perf_counter()
        assert decode() == total
        rates[name] = total / (time.perf_counter() - start)
    return rates


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3, help="produce rounds per client (the median counts)")
    parser.add_argument("--keyed", action="store_true", help="only the keyed produce comparison")
    args = parser.parse_args()
    n = args.messages
    if args.keyed:
        with tempfile.TemporaryDirectory(prefix="pylog-client-bench-") as tmp, \
                BrokerProcess(Path(tmp) / "broker", {"num.partitions": 1}) as broker:
            keyed(broker.bootstrap, n, args.rounds)
        return 0
    with tempfile.TemporaryDirectory(prefix="pylog-client-bench-") as tmp, \
            BrokerProcess(Path(tmp) / "broker", {"num.partitions": 1}) as broker:
        with Admin(broker.bootstrap) as admin:
            for topic in ("by-pylog", "by-confluent", "by-confluent-again"):
                admin.create_topic(topic)
        print(f"produce: {n} x 200-byte values, acks=1, linger 5 ms, batch 64 KB, one partition; "
              f"median of {args.rounds} rounds, the clients taking turns")
        rates: dict[str, list[float]] = {}
        for round_ in range(args.rounds):
            # confluent-kafka's first round fills the topic the consume part reads.
            rates.setdefault("confluent", []).append(
                confluent_produce(broker.bootstrap, "by-confluent" if round_ == 0 else "by-confluent-again", n))
            for how in ("send", "produce+callback", "produce"):
                rates.setdefault(how, []).append(pylog_produce(broker.bootstrap, "by-pylog", n, how))
        medians = {how: statistics.median(values) for how, values in rates.items()}
        theirs = medians.pop("confluent")
        for how, rate in medians.items():
            print(f"  pylog {how:<22}{rate:>12,.0f} msgs/s  ({rate / theirs:.2f} of confluent-kafka)")
        print(f"  confluent-kafka (callback)  {theirs:>12,.0f} msgs/s")
        end = n + 1
        print(f"consume: {end} records of one partition from the beginning")
        fetched = pylog_fetch(broker.bootstrap, "by-confluent", end)
        columns = pylog_columns(broker.bootstrap, "by-confluent", end)
        consumed = confluent_consume(broker.bootstrap, "by-confluent", end)
        print(f"  SimpleConsumer.fetch      {fetched:>12,.0f} records/s")
        print(f"  fetch_raw+decode_columns  {columns:>12,.0f} records/s")
        print(f"  confluent-kafka consumer  {consumed:>12,.0f} records/s")
        print(f"  fetch / confluent         {fetched / consumed:>12.2f}")
        print(f"  columns / confluent       {columns / consumed:>12.2f}")
    print(f"decode only: {n} records of 200 bytes in 75-record batches")
    rates = decode_only(n)
    for name, rate in rates.items():
        print(f"  {name:<27}{rate:>12,.0f} records/s")
    print(f"  decode_columns / kafka-python {rates['decode_columns'] / rates['kafka-python MemoryRecords']:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
