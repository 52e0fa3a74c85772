"""Consumer groups: rebalance time and offset commits per second, pylog versus the C peer.

    python benchmarks/group_bench.py [--runs 3] [--commits 3000] [--partitions 4]

Both figures are taken against a pylog broker (a child process, default settings) and
against librdkafka's mock cluster (C, in memory, in this process), in the same run:

* **rebalance** -- three confluent-kafka members consume a topic that a background
  producer keeps writing to; a fourth member calls ``subscribe()``; the figure is the
  seconds until all four own a disjoint share of the partitions and each has received a
  record since. Median of ``--runs``, for the range and cooperative-sticky assignors.
* **commits/s** -- one member commits offsets one at a time: synchronously (each
  commit waits for its answer) and asynchronously (``--commits`` in flight, counted
  when their callbacks have all arrived).

Prints each figure and the ratio pylog/mock (for the rebalance, lower is better). The mock
cluster creates topics with 4 partitions on first use, hence the default.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import confluent_kafka  # noqa: E402
from confluent_kafka import TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from pylog.testing.broker import BrokerProcess  # noqa: E402

SESSION_MS = 6000


class Background:
    """A producer writing a record to every partition every few milliseconds."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap,
                                                  "linger.ms": 1, "log_level": 3})
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(topic, partitions), daemon=True)
        self.thread.start()

    def _run(self, topic: str, partitions: int) -> None:
        while not self.stop.is_set():
            for p in range(partitions):
                self.producer.produce(topic, b"x", partition=p)
            self.producer.poll(0)
            time.sleep(0.005)

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.producer.flush(10)


class Member:
    def __init__(self, bootstrap: str, group: str, topic: str, assignor: str) -> None:
        self.consumer = confluent_kafka.Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "latest",
            "enable.auto.commit": False, "session.timeout.ms": SESSION_MS,
            "heartbeat.interval.ms": 500, "partition.assignment.strategy": assignor,
            "log_level": 3})
        self.last_record = 0.0
        self.consumer.subscribe([topic])

    def poll(self) -> None:
        message = self.consumer.poll(0.01)
        if message is not None and not message.error():
            self.last_record = time.monotonic()

    def partitions(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}


def settled(members: list[Member], partitions: int, since: float) -> bool:
    owned = [m.partitions() for m in members]
    return (all(owned) and sum(len(o) for o in owned) == partitions
            and set().union(*owned) == set(range(partitions))
            and all(m.last_record > since for m in members))


def poll_until(members: list[Member], condition, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the group did not settle")
        for member in members:
            member.poll()


def rebalance_seconds(bootstrap: str, topic: str, partitions: int, assignor: str,
                      runs: int) -> float:
    group = f"bench-{assignor}-{time.monotonic_ns()}"
    members = [Member(bootstrap, group, topic, assignor) for _ in range(3)]
    start = time.monotonic()
    poll_until(members, lambda: settled(members, partitions, start))
    times = []
    for _ in range(runs):
        started = time.monotonic()
        members.append(Member(bootstrap, group, topic, assignor))
        poll_until(members, lambda: settled(members, partitions, started))
        times.append(time.monotonic() - started)
        members.pop().consumer.close()
        settle_from = time.monotonic()
        poll_until(members, lambda: settled(members, partitions, settle_from))
    for member in members:
        member.consumer.close()
    return statistics.median(times)


def commits_per_second(bootstrap: str, topic: str, count: int, asynchronous: bool) -> float:
    done = []
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"commits-{time.monotonic_ns()}",
        "enable.auto.commit": False, "log_level": 3,
        "on_commit": lambda error, partitions: done.append(error)})
    consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)  # find it
    consumer.poll(0.1)
    done.clear()
    started = time.monotonic()
    for i in range(1, count + 1):
        consumer.commit(offsets=[TopicPartition(topic, 0, i)], asynchronous=asynchronous)
        if asynchronous and i % 100 == 0:
            consumer.poll(0)
    while asynchronous and len(done) < count:
        consumer.poll(0.01)
    elapsed = time.monotonic() - started
    assert not any(done), f"a commit failed: {[e for e in done if e][:1]}"
    consumer.close()
    return count / elapsed


def measure(bootstrap: str, args: argparse.Namespace) -> dict[str, float]:
    topic = "bench-groups"
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    try:
        admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(10)
    except Exception:  # noqa: BLE001 -- the mock cluster creates topics on first use
        pass
    producer = Background(bootstrap, topic, args.partitions)
    try:
        figures = {f"rebalance s ({a})": rebalance_seconds(bootstrap, topic, args.partitions,
                                                           a, args.runs)
                   for a in ("range", "cooperative-sticky")}
    finally:
        producer.close()
    figures["sync commits/s"] = commits_per_second(bootstrap, topic, args.commits // 3, False)
    figures["async commits/s"] = commits_per_second(bootstrap, topic, args.commits, True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--commits", type=int, default=3000)
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, BrokerProcess(Path(tmp)) as broker:
        pylog_figures = measure(broker.bootstrap, args)
    handle = confluent_kafka.Producer({"bootstrap.servers": "unused:1",
                                       "test.mock.num.brokers": 3, "log_level": 3})
    brokers = handle.list_topics(timeout=10).brokers
    mock = ",".join(f"{b.host}:{b.port}" for b in brokers.values())
    mock_figures = measure(mock, args)
    print(f"{'figure':28} {'pylog':>10} {'mock':>10} {'pylog/mock':>11}")
    for name, value in pylog_figures.items():
        other = mock_figures[name]
        print(f"{name:28} {value:10.2f} {other:10.2f} {value / other:11.2f}")


if __name__ == "__main__":
    main()
