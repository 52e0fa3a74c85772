"""Exactly-once producing: what idempotence and transactions cost, next to plain produce.

confluent-kafka (librdkafka) producers write 200-byte values to one pylog broker started
by this script, all in the same run:

1. plain produce (acks=all, no idempotence), the baseline;
2. idempotent produce (``enable.idempotence=true``): the ratio to plain;
3. transactional produce, a transaction committed every 100 ms while producing as fast as
   the client goes: records/s and the ratio to plain; the same against librdkafka's mock
   cluster, for reference;
4. the same transactional produce on a second broker started with
   ``transaction.partition.verification.enable=false``: what verifying each transaction's
   partitions with the coordinator (KIP-890) costs, as the ratio verified/unverified.

    python benchmarks/txn_bench.py [--messages 200000] [--txn-ms 100]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pylog.testing.broker import BrokerProcess  # noqa: E402

VALUE = b"v" * 200


def _produce_all(producer: Producer, topic: str, count: int, between=None) -> None:
    failed = []

    def delivered(err, _msg):
        if err is not None:
            failed.append(err)

    for i in range(count):
        while True:
            try:
                producer.produce(topic, VALUE, partition=i % 2, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.005)
        if between is not None and i % 256 == 0:
            between()
    if failed:
        raise RuntimeError(f"{len(failed)} deliveries failed: {failed[:1]}")


def plain_rate(bootstrap: str, topic: str, count: int, idempotent: bool) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "enable.idempotence": idempotent, "log_level": 3,
                         "queue.buffering.max.messages": 1_000_000})
    producer.produce(topic, VALUE, partition=0)
    producer.flush(30)
    start = time.perf_counter()
    _produce_all(producer, topic, count)
    assert producer.flush(120) == 0
    return count / (time.perf_counter() - start)


def transactional_rate(bootstrap: str, topic: str, count: int, txn_ms: int,
                       transactional_id: str) -> tuple[float, int]:
    """Records/s with a commit every ``txn_ms``; also returns the transactions committed."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3,
                         "transactional.id": transactional_id,
                         "queue.buffering.max.messages": 1_000_000})
    producer.init_transactions(60)
    committed = 0
    start = time.perf_counter()
    producer.begin_transaction()
    deadline = [time.perf_counter() + txn_ms / 1000]

    def maybe_commit() -> None:
        nonlocal committed
        if time.perf_counter() >= deadline[0]:
            producer.commit_transaction(60)
            committed += 1
            producer.begin_transaction()
            deadline[0] = time.perf_counter() + txn_ms / 1000

    _produce_all(producer, topic, count, maybe_commit)
    producer.commit_transaction(60)
    committed += 1
    rate = count / (time.perf_counter() - start)
    return rate, committed


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=2)])[topic].result(30)


def mock_bootstrap() -> tuple[Producer, str]:
    handle = Producer({"test.mock.num.brokers": 1, "log_level": 3})
    broker = next(iter(handle.list_topics(timeout=10).brokers.values()))
    return handle, f"{broker.host}:{broker.port}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--txn-ms", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="txn-bench-") as tmp:
        broker = BrokerProcess(Path(tmp), {"num.partitions": 2}).start()
        try:
            bootstrap = broker.bootstrap
            for topic in ("plain", "idempotent", "transactional"):
                create_topic(bootstrap, topic)
            plain = plain_rate(bootstrap, "plain", args.messages, idempotent=False)
            idempotent = plain_rate(bootstrap, "idempotent", args.messages, idempotent=True)
            txn, commits = transactional_rate(bootstrap, "transactional", args.messages,
                                              args.txn_ms, "txn-bench")
        finally:
            broker.stop()
        unverifying = BrokerProcess(Path(tmp) / "unverified", {
            "num.partitions": 2, "transaction.partition.verification.enable": "false"}).start()
        try:
            create_topic(unverifying.bootstrap, "transactional")
            unverified, _ = transactional_rate(unverifying.bootstrap, "transactional",
                                               args.messages, args.txn_ms, "txn-bench")
        finally:
            unverifying.stop()
    handle, mock = mock_bootstrap()
    mock_plain = plain_rate(mock, "plain", args.messages, idempotent=False)
    mock_txn, mock_commits = transactional_rate(mock, "transactional", args.messages,
                                                args.txn_ms, "txn-bench")
    del handle
    print(f"-- {args.messages} x 200-byte values, 2 partitions, confluent-kafka, acks=all")
    print(f"plain produce          {plain:>10,.0f} msgs/s")
    print(f"idempotent produce     {idempotent:>10,.0f} msgs/s | idempotent/plain "
          f"{idempotent / plain:.2f}")
    print(f"transactional produce  {txn:>10,.0f} msgs/s | transactional/plain {txn / plain:.2f}"
          f" | {commits} transactions of ~{args.txn_ms} ms")
    print(f"transactional, no verification {unverified:>10,.0f} msgs/s | verified/unverified "
          f"{txn / unverified:.2f}")
    print(f"mock cluster: plain {mock_plain:>10,.0f} msgs/s, transactional {mock_txn:>10,.0f}"
          f" msgs/s ({mock_commits} transactions) | pylog/mock transactional "
          f"{txn / mock_txn:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
