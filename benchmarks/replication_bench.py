"""Replication next to the baselines it should approach, in the same process tree.

1. Produce: the same confluent-kafka producer (200-byte values, default linger.ms=5) into
   one three-broker cluster, acks=all into RF-3 partitions (min.insync.replicas=2) and
   acks=1 into RF-1 partitions. Prints msgs/s, MB/s and their ratio (goal: at least 0.6).
2. Catch-up: a follower of an RF-2 partition is stopped, its leader takes --size-mb with
   acks=1, the follower starts again; MB/s until its log end equals the leader's, next to
   raw loopback ``os.sendfile`` bandwidth of a file of the same size.
3. Failover: a producer sends acks=all to an RF-3 partition while its leader gets SIGKILL
   (found dead when its ZooKeeper session expires) or SIGTERM (a controlled shutdown hands
   leadership over first). Seconds from the signal to the first acknowledgement of a
   record the new leader appended; each run and the median. After a SIGKILL most of it
   is the session timeout, plus up to a second of librdkafka's: it asks again for the
   leader of a partition whose broker is down once a second.

    python benchmarks/replication_bench.py [--messages 200000] [--size-mb 1024]
        [--partitions 3] [--runs 3]
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import shlex
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import confluent_kafka
from confluent_kafka import Producer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from broker_bench import produce_rate, sendfile_rate  # noqa: E402

from pylog.client.admin import Admin  # noqa: E402
from pylog.client.connection import BrokerConnection  # noqa: E402
from pylog.client.metadata import ClusterSnapshot, PartitionMetadata  # noqa: E402
from pylog.errors import PylogError  # noqa: E402
from pylog.log.leader_epoch import EpochEntry, LeaderEpochCache  # noqa: E402
from pylog.protocol import ApiKey  # noqa: E402
from pylog.testing.broker import BrokerProcess, broker_metadata  # noqa: E402
from pylog.testing.zookeeper import running_zookeeper  # noqa: E402

SESSION_TIMEOUT_MS = 6000
# Preferred-leader rebalancing off, so a restarted broker does not take leadership back in
# the middle of a later measurement; every other setting is the broker's default.
BROKER_SETTINGS = {"zookeeper.session.timeout.ms": SESSION_TIMEOUT_MS,
                   "auto.leader.rebalance.enable": "false"}
DEBUGGING_REPLICA_ID = -2  # ListOffsets from any replica; LATEST is that replica's log end
LATEST = -1
FILL_VALUE = os.urandom(1024)


class Cluster:
    """Brokers ``ids`` registered under ``zk_connect`` (as tests/cluster's LocalCluster).

    A broker keeps its port and log dir across restarts.
    """

    def __init__(self, base_dir: Path, zk_connect: str, ids: tuple[int, ...]) -> None:
        self.brokers = {b: BrokerProcess(base_dir / f"broker-{b}", {
            "broker.id": b, "zookeeper.connect": zk_connect, **BROKER_SETTINGS}) for b in ids}

    def start(self) -> "Cluster":
        for broker in self.brokers.values():
            broker.start()
        for broker_id in self.brokers:
            wait_for(lambda: sorted(self.metadata(broker_id).brokers) == sorted(self.brokers),
                     60, f"broker {broker_id} to list every broker")
        return self

    def bootstrap(self, *ids: int) -> str:
        return ",".join(self.brokers[b].bootstrap for b in ids or self.brokers)

    def metadata(self, broker_id: int, topics: list[str] | None = None) -> ClusterSnapshot:
        """Metadata as broker ``broker_id`` answers it."""
        return broker_metadata(self.brokers[broker_id].port, topics)

    def partitions(self, topic: str, via: int | None = None) -> dict[int, PartitionMetadata]:
        via = via if via is not None else next(b for b, p in self.brokers.items() if p.alive())
        found = self.metadata(via, [topic]).topics.get(topic)
        return {} if found is None else found.partitions

    def create_topic(self, topic: str, partitions: int, replication: int,
                     configs: dict[str, str] | None = None) -> None:
        """Create ``topic`` and wait until every replica is in the ISR."""
        with Admin(self.bootstrap()) as admin:
            admin.create_topic(topic, partitions, replication, configs or {})
        self.wait_in_sync(topic, replication)

    def wait_in_sync(self, topic: str, replication: int, timeout: float = 60) -> None:
        wait_for(lambda: (found := self.partitions(topic)) and all(
            len(p.isr) == replication and p.leader >= 0 for p in found.values()),
            timeout, f"every replica of {topic} in the ISR")

    def close(self) -> None:
        for broker in self.brokers.values():
            broker.resume()
            broker.stop()


@contextmanager
def running_cluster(base_dir: Path, zk_connect: str, ids: tuple[int, ...]) -> Iterator[Cluster]:
    cluster = Cluster(base_dir, zk_connect, ids)
    try:
        yield cluster.start()
    finally:
        cluster.close()


def wait_for(condition: Callable[[], object], timeout: float, what: str,
             interval: float = 0.05) -> float:
    """The monotonic time at which ``condition()`` first held; RuntimeError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
    return time.monotonic()


def log_end_offset(connection: BrokerConnection, topic: str, partition: int = 0) -> int:
    """The log end of the replica at the other end of ``connection`` (ListOffsets as the
    debugging replica); -1 while it has none or does not answer."""
    try:
        response = connection.request(ApiKey.LIST_OFFSETS, {
            "replica_id": DEBUGGING_REPLICA_ID, "isolation_level": 0, "topics": [
                {"name": topic, "partitions": [{"partition_index": partition, "timestamp": LATEST,
                                                "current_leader_epoch": -1}]}]})
    except PylogError:  # the connection drops (and reconnects next time) while it starts
        return -1
    found = response["topics"][0]["partitions"][0]
    return -1 if found["error_code"] else found["offset"]


def connect(broker: BrokerProcess) -> closing[BrokerConnection]:
    """One connection for polling ``broker`` (a new one per poll would load it too)."""
    return closing(BrokerConnection("127.0.0.1", broker.port, timeout_s=10))


def segment_bytes(broker: BrokerProcess, topic: str, partition: int = 0) -> int:
    return sum(p.stat().st_size for p in (broker.log_dir / f"{topic}-{partition}").glob("*.log"))


def median_line(values: list[float]) -> str:
    return " ".join(f"{v:6.2f}" for v in values) + f" | median {statistics.median(values):6.2f}"


# -- 1. acks=all on RF 3 next to acks=1 on RF 1 -------------------------------------------


def bench_produce(base: Path, zk_connect: str, messages: int, partitions: int) -> None:
    print(f"\n-- produce: {messages:,} x 200-byte values over {partitions} partition(s), "
          f"confluent-kafka, linger.ms=5 (default); 3 brokers; best of 2 alternating runs")
    with running_cluster(base / "produce", zk_connect, (1, 2, 3)) as cluster:
        cluster.create_topic("rf3", partitions, 3, {"min.insync.replicas": "2"})
        cluster.create_topic("rf1", partitions, 1)
        sides = {"rf3": "all", "rf1": "1"}
        rates: dict[str, list[float]] = {topic: [] for topic in sides}
        for _ in range(2):
            for topic, acks in sides.items():
                rates[topic].append(produce_rate(cluster.bootstrap(), topic, messages, partitions,
                                                 acks=acks))
    for topic, label in (("rf3", "acks=all RF 3 (min.insync.replicas=2)"),
                         ("rf1", "acks=1   RF 1                        ")):
        runs = " / ".join(f"{r:,.0f}" for r in rates[topic])
        best = max(rates[topic])
        print(f"{label} runs {runs} msgs/s | best {best:>8,.0f} msgs/s "
              f"{best * 200 / 1e6:5.1f} MB/s")
    ratio = max(rates["rf3"]) / max(rates["rf1"])
    print(f"acks=all RF 3 / acks=1 RF 1 (best of each): {ratio:.2f} (goal: at least 0.6)")


# -- 2. a restarted follower catching up ------------------------------------------------


def fill(bootstrap: str, topic: str, total_bytes: int) -> int:
    """Produce ``total_bytes`` of 1 KB values with acks=1; returns the record count."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 50,
                         "compression.type": "none", "batch.size": 1_000_000,
                         "queue.buffering.max.messages": 500_000})
    failed: list = []
    count = total_bytes // len(FILL_VALUE)
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, FILL_VALUE, partition=0,
                                 on_delivery=lambda err, _m: err and failed.append(err))
                break
            except BufferError:
                producer.poll(0.05)
    remaining = producer.flush(300)
    if remaining or failed:
        raise RuntimeError(f"fill: {remaining} undelivered, {len(failed)} failed: {failed[:1]}")
    return count


def bench_catch_up(base: Path, zk_connect: str, size_mb: int) -> None:
    print(f"\n-- catch-up: a restarted follower copies a {size_mb} MB partition (1 KB values, "
          "no compression) from its leader; replica.fetch.max.bytes 1 MB (default)")
    topic = "catch-up"
    with running_cluster(base / "catch-up", zk_connect, (1, 2)) as cluster:
        cluster.create_topic(topic, 1, 2)
        leader_id = cluster.partitions(topic)[0].leader
        follower_id = next(b for b in cluster.brokers if b != leader_id)
        leader, follower = cluster.brokers[leader_id], cluster.brokers[follower_id]
        status = follower.stop()
        if status != 0:
            print(f"note: follower {follower_id} exited with status {status} on SIGTERM")
        fill(leader.bootstrap, topic, size_mb << 20)
        with connect(leader) as probe:
            target = log_end_offset(probe, topic)
        copied = segment_bytes(leader, topic) - segment_bytes(follower, topic)
        start = time.monotonic()
        follower.start()
        listening = time.monotonic()
        with connect(follower) as probe:
            first = wait_for(lambda: log_end_offset(probe, topic) > 0, 120, "the first records")
            done = wait_for(lambda: log_end_offset(probe, topic) >= target, 600,
                            f"follower {follower_id} to reach offset {target}")
        in_sync = wait_for(lambda: len(cluster.partitions(topic, leader_id)[0].isr) == 2, 60,
                           "the follower back in the ISR")
        mismatch = segment_bytes(follower, topic) - segment_bytes(leader, topic)
    raw = sendfile_rate(size_mb << 20)
    overall, transfer = copied / (done - start) / 1e6, copied / (done - first) / 1e6
    print(f"leader {leader_id}: log end {target:,}, {copied / 1e6:,.1f} MB to copy; follower "
          f"{follower_id} listening after {listening - start:.1f} s, first records after "
          f"{first - start:.1f} s, log end equal after {done - start:.1f} s, in the ISR after "
          f"{in_sync - start:.1f} s")
    if mismatch:
        print(f"WARNING: follower's segments differ in size from the leader's by {mismatch} bytes")
    print(f"catch-up from process start   {overall:8.1f} MB/s | raw loopback sendfile "
          f"{raw:8.1f} MB/s | ratio {overall / raw:.3f}")
    print(f"catch-up from first records   {transfer:8.1f} MB/s | raw loopback sendfile "
          f"{raw:8.1f} MB/s | ratio {transfer / raw:.3f}")


# -- 3. failover under acks=all ------------------------------------------------------------


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


class AckClock:
    """An acks=all confluent-kafka producer sending one record every ``interval`` seconds
    from its own thread, keeping (monotonic time, offset) of every acknowledgement.

    librdkafka's warnings (connection refused by the dead broker, and so on) are kept in
    ``logged`` instead of going to stderr; delivery errors are counted by name.
    """

    def __init__(self, bootstrap: str, topic: str, interval: float = 0.005) -> None:
        self.handler = _Collect()
        logger = logging.getLogger(f"replication_bench.rdkafka.{id(self)}")
        logger.propagate = False
        logger.setLevel(logging.WARNING)
        logger.addHandler(self.handler)
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                  "logger": logger})
        self.topic, self.interval = topic, interval
        self.acks: list[tuple[float, int]] = []
        self.errors: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.errors[err.name()] += 1
        else:
            self.acks.append((time.monotonic(), msg.offset()))

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.producer.produce(self.topic, b"f" * 200, partition=0,
                                      on_delivery=self._delivered)
            except BufferError:
                pass
            self.producer.poll(self.interval)

    def first_ack_from(self, offset: int) -> float | None:
        """When the first record at ``offset`` or later was acknowledged."""
        return next((at for at, o in list(self.acks) if o >= offset), None)

    def close(self) -> int:
        """Stop sending, wait for what is in flight; returns the records left undelivered."""
        self._stop.set()
        self._thread.join()
        return self.producer.flush(60)

    @property
    def logged(self) -> list[str]:
        return self.handler.lines


def epoch_entries(broker: BrokerProcess, topic: str) -> list[EpochEntry]:
    return LeaderEpochCache.load(broker.log_dir / f"{topic}-0" / "leader-epoch-checkpoint").entries


@dataclass(frozen=True)
class FailoverRun:
    """What one failover looked like; times in seconds from the signal."""

    old_leader: int
    was_controller: bool
    new_leader: int
    in_metadata: float  # a survivor's Metadata names the new leader
    first_ack: float  # first acknowledgement of a record the new leader appended
    exited: float
    exit_status: int | None
    delivery_errors: Counter[str]
    librdkafka_warnings: int
    undelivered: int

    def describe(self, how: str) -> str:
        errors = ", ".join(f"{n} {name}" for name, n in self.delivery_errors.items()) or "none"
        line = (f"leader {self.old_leader}{' (also controller)' if self.was_controller else ''}"
                f" -> {self.new_leader}: new leader in metadata {self.in_metadata:5.2f} s, "
                f"first ack from it {self.first_ack:5.2f} s")
        if how == "SIGTERM":
            line += f", exited {self.exited:5.2f} s (status {self.exit_status})"
        line += f"; delivery errors: {errors}; librdkafka warnings: {self.librdkafka_warnings}"
        return line + (f"; {self.undelivered} UNDELIVERED" if self.undelivered else "")


def failover_once(cluster: Cluster, topic: str, how: str) -> FailoverRun:
    """Signal (SIGKILL or SIGTERM) the leader of ``topic``-0 under acks=all load, then
    start it again."""
    cluster.wait_in_sync(topic, 3)
    victim_id = cluster.partitions(topic)[0].leader
    was_controller = cluster.metadata(victim_id).controller_id == victim_id
    survivor = next(b for b in cluster.brokers if b != victim_id)
    old_epoch = max((e.epoch for b in cluster.brokers.values()
                     for e in epoch_entries(b, topic)), default=-1)
    victim = cluster.brokers[victim_id]
    clock = AckClock(cluster.bootstrap(), topic)
    try:
        wait_for(lambda: len(clock.acks) >= 100, 30, "acknowledgements before the failover")
        start = time.monotonic()
        if how == "SIGKILL":
            victim.kill()
        else:
            victim.process.signal(signal.SIGTERM)  # stop() would also wait for the exit
        moved = wait_for(lambda: cluster.partitions(topic, survivor)[0].leader
                         not in (-1, victim_id), 60, "a new leader in the metadata")
        new_id = cluster.partitions(topic, survivor)[0].leader
        new_leader = cluster.brokers[new_id]
        # Acknowledged records below the new leader's first offset may be the old leader's.
        wait_for(lambda: any(e.epoch > old_epoch for e in epoch_entries(new_leader, topic)),
                 30, f"broker {new_id} to start a new leader epoch")
        first_offset = next(e.start_offset for e in epoch_entries(new_leader, topic)
                            if e.epoch > old_epoch)
        wait_for(lambda: clock.first_ack_from(first_offset) is not None, 60,
                 f"an acknowledgement from broker {new_id}")
        exited = wait_for(lambda: not victim.alive(), 60, f"broker {victim_id} to exit")
        status = victim.stop()
    finally:
        undelivered = clock.close()
    victim.start()
    return FailoverRun(victim_id, was_controller, new_id, moved - start,
                       clock.first_ack_from(first_offset) - start, exited - start, status,
                       clock.errors, len(clock.logged), undelivered)


def bench_failover(base: Path, zk_connect: str, runs: int) -> None:
    print(f"\n-- failover: acks=all producer (confluent-kafka defaults, a record every 5 ms) "
          f"on an RF-3 partition, min.insync.replicas=2, zookeeper.session.timeout.ms="
          f"{SESSION_TIMEOUT_MS}; seconds from the signal to the first acknowledgement of a "
          f"record the new leader appended (librdkafka asks again for the leader of a "
          f"partition whose broker is down once a second)")
    topic = "failover"
    with running_cluster(base / "failover", zk_connect, (1, 2, 3)) as cluster:
        cluster.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})
        for how, what in (("SIGKILL", "leader killed (SIGKILL)"),
                          ("SIGTERM", "controlled shutdown (SIGTERM)")):
            seconds = []
            for run in range(1, runs + 1):
                result = failover_once(cluster, topic, how)
                seconds.append(result.first_ack)
                print(f"{how} run {run}: {result.describe(how)}", flush=True)
            print(f"{what:<30} {median_line(seconds)} s")


# -- header and main -------------------------------------------------------------------


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def print_header(args: argparse.Namespace) -> None:
    print(f"replication_bench: {os.cpu_count()} cores ({cpu_model()}), {platform.system()} "
          f"{platform.release()}, Python {platform.python_version()}, confluent-kafka "
          f"{confluent_kafka.__version__} (librdkafka {confluent_kafka.libversion()[0]})")
    print(f"command: {shlex.join([sys.executable, *sys.argv])}")
    print("load average at start: " + " ".join(f"{x:.2f}" for x in os.getloadavg())
          + " (1, 5, 15 min; other work on the machine moves every figure below)")
    print(f"settings: --messages {args.messages} --size-mb {args.size_mb} --partitions "
          f"{args.partitions} --runs {args.runs}; brokers: "
          + ", ".join(f"{k}={v}" for k, v in BROKER_SETTINGS.items())
          + ", everything else at its default; one ZooKeeper (pylog.testing), every broker a "
          "child process on loopback")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000,
                        help="records per produce run (part 1)")
    parser.add_argument("--size-mb", type=int, default=1024,
                        help="partition size the follower catches up (part 2)")
    parser.add_argument("--partitions", type=int, default=3,
                        help="partitions per topic in part 1 (3: one led by each broker)")
    parser.add_argument("--runs", type=int, default=3, help="failovers of each kind (part 3)")
    parser.add_argument("--only", choices=["produce", "catch-up", "failover"],
                        help="run one part only")
    args = parser.parse_args()
    print_header(args)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pylog-replication-bench-") as tmp:
        base = Path(tmp)
        with running_zookeeper(base) as zookeeper:
            zk = zookeeper.connect_string
            if args.only in (None, "produce"):
                bench_produce(base, f"{zk}/produce", args.messages, args.partitions)
            if args.only in (None, "catch-up"):
                bench_catch_up(base, f"{zk}/catch-up", args.size_mb)
            if args.only in (None, "failover"):
                bench_failover(base, f"{zk}/failover", args.runs)
    print(f"\ntotal {time.monotonic() - started:.0f} s; load average at the end: "
          + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
