"""Cluster mode next to a single broker, in the same process tree.

1. Metadata: requests per second one broker answers, standalone and as a member of a
   three-broker cluster (its answers come from the watched in-memory view, so the ratio
   should stay near 1: no ZooKeeper round trip per request).
2. Produce: a confluent-kafka producer (200-byte values, acks=1, linger.ms=5) over six
   partitions, into the standalone broker and into the cluster (all brokers share this
   machine's cores, so this measures routing overhead, not scale-out).
3. Consume: the ZooKeeper-coordinated ZkConsumer reading the cluster's topic, next to a
   confluent-kafka consumer with assign() over the same partitions.
4. Failover: seconds from kill -9 of a broker until another broker reports its
   partitions offline, and from kill -9 of the controller until a new one is reported.

    python benchmarks/cluster_bench.py [--messages 100000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent))
from broker_bench import create_topic, produce_rate  # noqa: E402

from pylog.client.connection import BrokerConnection  # noqa: E402
from pylog.client.metadata import ClusterSnapshot  # noqa: E402
from pylog.client.zk_consumer import ZkConsumer  # noqa: E402
from pylog.protocol import ApiKey  # noqa: E402
from pylog.testing.broker import BrokerProcess  # noqa: E402
from pylog.testing.zookeeper import running_zookeeper  # noqa: E402

PARTITIONS = 6


def metadata_rate(port: int, seconds: float = 2.0) -> float:
    connection = BrokerConnection("127.0.0.1", port)
    body = {"topics": None, "allow_auto_topic_creation": False}
    connection.request(ApiKey.METADATA, body)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        connection.request(ApiKey.METADATA, body)
        count += 1
    elapsed = time.perf_counter() - start
    connection.close()
    return count / elapsed


def metadata(port: int) -> ClusterSnapshot:
    connection = BrokerConnection("127.0.0.1", port)
    try:
        return ClusterSnapshot.from_response(connection.request(
            ApiKey.METADATA, {"topics": None, "allow_auto_topic_creation": False}))
    finally:
        connection.close()


def confluent_consume_rate(bootstrap: str, topic: str, records: int) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got, start = 0, time.perf_counter()
    while got < records:
        got += sum(m.error() is None for m in consumer.consume(1000, timeout=0.2))
    elapsed = time.perf_counter() - start
    consumer.close()
    return records / elapsed


def zk_consume_rate(zk_connect: str, topic: str, records: int) -> float:
    with ZkConsumer(zk_connect, "bench-zk", topics=[topic], auto_commit_interval_ms=1000,
                    fetch_max_wait_ms=100) as consumer:
        consumer.wait_for_assignment(30)
        got, start = 0, time.perf_counter()
        while got < records:
            got += len(consumer.poll(1.0))
        return records / (time.perf_counter() - start)


def wait_for(condition, timeout: float = 60.0) -> float:
    """Seconds until ``condition()`` holds."""
    start = time.perf_counter()
    while not condition():
        if time.perf_counter() - start > timeout:
            raise RuntimeError("condition not reached")
        time.sleep(0.02)
    return time.perf_counter() - start


def bench(base: Path, messages: int) -> None:
    single = BrokerProcess(base / "single", {"num.partitions": PARTITIONS}).start()
    with running_zookeeper(base) as zookeeper:
        connect = f"{zookeeper.connect_string}/bench"
        brokers = {b: BrokerProcess(base / f"broker-{b}", {
            "broker.id": b, "zookeeper.connect": connect, "zookeeper.session.timeout.ms": 3000,
            "num.partitions": PARTITIONS}).start() for b in (1, 2, 3)}
        try:
            bootstrap = ",".join(b.bootstrap for b in brokers.values())
            wait_for(lambda: len(metadata(brokers[1].port).brokers) == 3)
            print("\n-- metadata requests/s answered by one broker")
            ours, alone = metadata_rate(brokers[1].port), metadata_rate(single.port)
            print(f"cluster member {ours:>8,.0f}/s | standalone {alone:>8,.0f}/s"
                  f" | cluster/standalone {ours / alone:.2f}")

            print(f"\n-- produce: {messages} x 200-byte values over {PARTITIONS} partitions")
            create_topic(single.bootstrap, "bench", PARTITIONS)
            create_topic(bootstrap, "bench", PARTITIONS)
            ours, alone = (produce_rate(bootstrap, "bench", messages, PARTITIONS),
                           produce_rate(single.bootstrap, "bench", messages, PARTITIONS))
            print(f"3-broker cluster {ours:>10,.0f} msgs/s | one broker {alone:>10,.0f} msgs/s"
                  f" | cluster/single {ours / alone:.2f}")

            print(f"\n-- consume {messages + 1} records from the cluster")
            total = messages + 1  # produce_rate sends one warm-up message first
            zk_rate = zk_consume_rate(connect, "bench", total)
            ck_rate = confluent_consume_rate(bootstrap, "bench", total)
            print(f"ZkConsumer {zk_rate:>10,.0f} msgs/s | confluent-kafka assign() "
                  f"{ck_rate:>10,.0f} msgs/s | ZkConsumer/confluent {zk_rate / ck_rate:.2f}")

            print("\n-- failover (session timeout 3 s)")
            victim = next(b for b in (1, 2, 3) if b != metadata(brokers[1].port).controller_id)
            brokers[victim].kill()
            watcher = next(b for b in (1, 2, 3) if b != victim)
            offline = wait_for(lambda: any(
                p.leader == -1 for p in metadata(brokers[watcher].port).topics["bench"]
                .partitions.values()))
            print(f"broker {victim} killed: partitions offline after {offline:.1f}s")
            controller = metadata(brokers[watcher].port).controller_id
            brokers[controller].kill()
            last = next(b for b in (1, 2, 3) if b not in (victim, controller))
            moved = wait_for(lambda: metadata(brokers[last].port).controller_id == last)
            print(f"controller {controller} killed: broker {last} controller after {moved:.1f}s")
        finally:
            for broker in brokers.values():
                broker.stop()
            single.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pylog-cluster-bench-") as base:
        bench(Path(base), args.messages)
    return 0


if __name__ == "__main__":
    sys.exit(main())
