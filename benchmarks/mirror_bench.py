"""``pylog mirror`` between two pylog brokers: throughput next to confluent-kafka's own
consume-then-produce loop, and end-to-end lag under a steady load.

This script starts a source broker and a target broker and preloads the source with
``--messages`` records (200-byte values, keys, headers) over 3 partitions. Then, in the same
run, against the same clusters:

1. the baseline: confluent-kafka's consume-then-produce loop in Python (a read_committed
   consumer, ``consume(1000)``, ``produce()`` of each record with its key, partition,
   timestamp and headers; acks=all, no transactions), records/s and MB/s;
2. the same loop made exactly-once as confluent-kafka's transactional example does it
   (``send_offsets_to_transaction`` to a group on the target, a commit every 100 ms);
3. ``pylog mirror`` as a child process (exactly once, a commit every 100 ms): records/s and
   MB/s from its first to its last commit, and the ratio to the baseline;
4. end-to-end lag under a steady ``--rate`` records/s for ``--seconds``: a record's
   timestamp (kept by the mirror) against the time a read_committed consumer on the target
   sees it; p50, p99 and max.

    python benchmarks/mirror_bench.py [--messages 400000] [--rate 20000] [--seconds 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pylog.testing.broker import BrokerProcess  # noqa: E402
from pylog.testing.process import ServerProcess  # noqa: E402

VALUE = b"v" * 200
TXN_MS = 100        # the mirror's transaction_interval_ms and the transactional loop's
PARTITIONS = 3
ALIAS = "src"
SETTINGS = {"num.partitions": 1, "group.initial.rebalance.delay.ms": 0,
            "group.min.session.timeout.ms": 1000, "offsets.topic.num.partitions": 3,
            "transaction.state.log.num.partitions": 3}
MIRROR_YAML = """
source:
  client:
    session.timeout.ms: 6000
transaction_interval_ms: {txn_ms}
progress_interval_ms: 5000
"""


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)


def preload(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "log_level": 3,
                         "queue.buffering.max.messages": 1_000_000})
    for i in range(count):
        while True:
            try:
                producer.produce(topic, VALUE, b"key-%d" % i, i % PARTITIONS,
                                 headers=[("trace", b"%d" % i)])
                break
            except BufferError:
                producer.poll(0.005)
    assert producer.flush(120) == 0


def copy_loop(source: str, target: str, topic: str, out_topic: str, count: int,
              transactional: bool) -> float:
    """confluent-kafka's consume-then-produce loop; records/s from its first record."""
    consumer = Consumer({"bootstrap.servers": source, "group.id": f"loop-{out_topic}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", "log_level": 3})
    settings = {"bootstrap.servers": target, "linger.ms": 5, "acks": "all", "log_level": 3}
    if transactional:
        settings["transactional.id"] = f"loop-{out_topic}"
    producer = Producer(settings)
    metadata = None
    if transactional:
        producer.init_transactions(60)
        producer.begin_transaction()
        # The offsets go to a group on the target (where the transaction is): the source
        # group's member is unknown there.
        metadata = Consumer({"bootstrap.servers": target, "group.id": f"loop-{out_topic}",
                             "log_level": 3}).consumer_group_metadata()
    consumer.subscribe([topic])
    copied, start, next_commit = 0, None, 0.0
    while copied < count:
        for message in consumer.consume(1000, 0.1):
            if message.error() is not None:
                continue
            if start is None:
                start = time.perf_counter()
                next_commit = start + TXN_MS / 1000
            while True:
                try:
                    producer.produce(out_topic, message.value(), message.key(),
                                     message.partition(), timestamp=message.timestamp()[1],
                                     headers=message.headers())
                    break
                except BufferError:
                    producer.poll(0.005)
            copied += 1
        if transactional and time.perf_counter() >= next_commit:
            positions = [TopicPartition(out_topic, tp.partition, tp.offset)
                         for tp in consumer.position(consumer.assignment()) if tp.offset >= 0]
            producer.send_offsets_to_transaction(positions, metadata, 60)
            producer.commit_transaction(60)
            producer.begin_transaction()
            next_commit = time.perf_counter() + TXN_MS / 1000
    if transactional:
        producer.commit_transaction(60)
    assert producer.flush(120) == 0
    elapsed = time.perf_counter() - start
    consumer.close()
    return copied / elapsed


class Mirror:
    def __init__(self, base: Path, source: str, target: str, topic: str) -> None:
        config = base / "mirror.yaml"
        config.write_text(MIRROR_YAML.format(txn_ms=TXN_MS))
        argv = [sys.executable, "-m", "pylog.cli.main", "mirror", "--source-bootstrap-server",
                source, "--target-bootstrap-server", target, "--topics", topic,
                "--source-alias", ALIAS, "--config", str(config)]
        self.process = ServerProcess(argv, base / "mirror.log",
                                     env=dict(os.environ, PYTHONUNBUFFERED="1")).start()

    def stop(self) -> None:
        self.process.stop(60)


def committed_total(consumer: Consumer, topic: str) -> int:
    found = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
    return sum(max(tp.offset, 0) for tp in found)


def mirror_rate(base: Path, source: str, target: str, topic: str, end_total: int) -> float:
    """Records/s of ``pylog mirror`` from its first commit to the commit of the last record."""
    watcher = Consumer({"bootstrap.servers": target, "group.id": f"pylog-mirror.{ALIAS}",
                        "log_level": 3})
    mirror = Mirror(base, source, target, topic)
    try:
        first = None
        while True:
            total = committed_total(watcher, f"{ALIAS}.{topic}")
            now = time.perf_counter()
            if first is None and total > 0:
                first = (now, total)
            if total >= end_total:
                return (total - first[1]) / (now - first[0])
            if not mirror.process.alive():
                raise RuntimeError("the mirror stopped: see " + str(base / "mirror.log"))
            time.sleep(0.05)
    finally:
        watcher.close()
        mirror.stop()


def steady_lag(base: Path, source: str, target: str, rate: int, seconds: float) -> list[float]:
    """Lag (ms) of each record produced at ``rate``/s, from its timestamp to its arrival."""
    topic = "steady"
    create_topic(source, topic)
    mirror = Mirror(base, source, target, topic)
    reader = Consumer({"bootstrap.servers": target, "group.id": "lag-reader",
                       "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                       "log_level": 3})
    reader.subscribe([f"{ALIAS}.{topic}"])
    total = int(rate * seconds)
    lags: list[float] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set() and len(lags) < total:
            for message in reader.consume(1000, 0.1):
                if message.error() is None:
                    lags.append(time.time() * 1000 - message.timestamp()[1])

    # Wait until the mirror has joined and created the target topic.
    deadline = time.monotonic() + 60
    while f"{ALIAS}.{topic}" not in AdminClient({"bootstrap.servers": target}).list_topics(
            timeout=10).topics:
        if time.monotonic() > deadline:
            raise RuntimeError("the mirror did not create its target topic")
        time.sleep(0.2)
    time.sleep(3)
    thread = threading.Thread(target=read)
    thread.start()
    producer = Producer({"bootstrap.servers": source, "linger.ms": 2, "log_level": 3})
    start = time.perf_counter()
    for i in range(total):
        if i % 200 == 0:
            ahead = start + i / rate - time.perf_counter()
            if ahead > 0:
                time.sleep(ahead)
        producer.produce(topic, VALUE, None, i % PARTITIONS)
        producer.poll(0)
    producer.flush(60)
    thread.join(timeout=seconds + 60)
    stop.set()
    thread.join()
    reader.close()
    mirror.stop()
    return lags


def main() -> int:
    global TXN_MS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=400_000)
    parser.add_argument("--rate", type=int, default=20_000)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--txn-ms", type=int, default=100,
                        help="transaction interval of the mirror and the transactional loop")
    args = parser.parse_args()
    TXN_MS = args.txn_ms
    record_bytes = len(VALUE) + len(b"key-00000") + len(b"trace") + 6
    with tempfile.TemporaryDirectory(prefix="mirror-bench-") as tmp:
        base = Path(tmp)
        source = BrokerProcess(base / "source", SETTINGS).start()
        target = BrokerProcess(base / "target", SETTINGS).start()
        try:
            create_topic(source.bootstrap, "bench")
            preload(source.bootstrap, "bench", args.messages)
            for out in ("loop", "eos-loop", f"{ALIAS}.bench"):
                create_topic(target.bootstrap, out)
            loop = copy_loop(source.bootstrap, target.bootstrap, "bench", "loop",
                             args.messages, transactional=False)
            eos = copy_loop(source.bootstrap, target.bootstrap, "bench", "eos-loop",
                            args.messages, transactional=True)
            mirror = mirror_rate(base, source.bootstrap, target.bootstrap, "bench",
                                 args.messages)
            lags = steady_lag(base, source.bootstrap, target.bootstrap, args.rate, args.seconds)
        finally:
            source.stop()
            target.stop()
    mb = record_bytes / 1e6
    print(f"-- {args.messages} records of ~{record_bytes} bytes, {PARTITIONS} partitions, "
          f"pylog broker to pylog broker, transactions of {TXN_MS} ms")
    print(f"consume-then-produce loop      {loop:>9,.0f} records/s {loop * mb:6.1f} MB/s")
    print(f"same loop with transactions    {eos:>9,.0f} records/s {eos * mb:6.1f} MB/s "
          f"| eos-loop/loop {eos / loop:.2f}")
    print(f"pylog mirror (exactly once)    {mirror:>9,.0f} records/s {mirror * mb:6.1f} MB/s "
          f"| mirror/loop {mirror / loop:.2f} | mirror/eos-loop {mirror / eos:.2f}")
    if lags:
        ordered = sorted(lags)
        print(f"end-to-end lag at {args.rate:,} records/s for {args.seconds:.0f} s: "
              f"p50 {statistics.median(ordered):.0f} ms, "
              f"p99 {ordered[int(len(ordered) * 0.99) - 1]:.0f} ms, max {ordered[-1]:.0f} ms "
              f"({len(lags):,} of {int(args.rate * args.seconds):,} records seen)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
