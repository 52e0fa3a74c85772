"""Randomized broker faults under an acks=all producer: nothing acknowledged is lost.

Three brokers, one topic of 3 partitions with replication factor 3 and
``min.insync.replicas=2``, 3 s ZooKeeper sessions and ``replica.lag.time.max.ms=2000``.
A confluent-kafka producer (acks=all, no idempotence) writes unique values from a thread
while a fault loop, driven by ``random.Random(seed)``, hits one broker at a time with
SIGKILL and a restart, SIGSTOP and SIGCONT (sometimes past the session timeout), or
SIGTERM (controlled shutdown) and a restart. At most one broker is down at a time, so two
stay up and acks=all can proceed. Afterwards, with every replica back in the ISR:

- every value was acknowledged, and is in the log at the offset it was acknowledged with;
- offsets are unique, and a value is in no partition but its own;
- a value appears at more than one offset only if a send to its partition failed while
  it was in flight (a retry without idempotence can write it twice);
- the three replicas of each partition hold byte-identical segment files.

Environment:

``PYLOG_FAULT_SEED``
    seed of the fault schedule (default: a random one). The seed is printed at the start
    and is in every assertion message; set it to replay a failing schedule.
``PYLOG_FAULT_SECONDS``
    how long the fault loop runs (default 15, so ``make test`` stays short), e.g.
    ``PYLOG_FAULT_SECONDS=600 pytest tests/cluster/test_replication_faults.py``.

Timings (pauses, when the producer's requests land) are not replayed exactly, only the
sequence of brokers, actions and pause lengths.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import threading
import time
from collections import Counter, defaultdict

import pytest
from confluent_kafka import KafkaError, Producer

from pylog.client.admin import Admin
from tests.cluster.cluster_helpers import LocalCluster
from tests.cluster.conftest import wait_until

TOPIC = "faults"
PARTITIONS = 3
SESSION_TIMEOUT_S = 3.0
FAULT_SECONDS = float(os.environ.get("PYLOG_FAULT_SECONDS") or 15)


@pytest.fixture
def seed() -> int:
    chosen = os.environ.get("PYLOG_FAULT_SEED")
    value = int(chosen) if chosen else random.randrange(1 << 32)
    print(f"PYLOG_FAULT_SEED={value} PYLOG_FAULT_SECONDS={FAULT_SECONDS:g}", flush=True)
    return value


@pytest.fixture
def cluster(tmp_path, zk_connect):
    cluster = LocalCluster(tmp_path, zk_connect, session_timeout_ms=int(SESSION_TIMEOUT_S * 1000),
                           extra={"replica.lag.time.max.ms": 2000,
                                  "replica.fetch.wait.max.ms": 200,
                                  "default.replication.factor": 3, "min.insync.replicas": 2,
                                  "auto.leader.rebalance.enable": "false",
                                  "controlled.shutdown.timeout.ms": 15000}).start()
    try:
        yield cluster
    finally:
        cluster.close()


# librdkafka's debug line for a failed produce request (rdkafka_request.c).
_FAILED_MESSAGE_SET = re.compile(
    r"(?P<topic>\S+) \[(?P<partition>\d+)\]: MessageSet with \d+ message\(s\) "
    r"\(MsgId \d+, BaseSeq -?\d+\) encountered error: (?P<error>.*) \(actions")


class WatchedProducer:
    """confluent-kafka with acks=all, no idempotence and librdkafka's own retries; notes
    which values were in flight while a send to their partition failed.

    Without idempotence a retry after a lost acknowledgement (the leader appended, but the
    answer was a timeout, a dropped connection, or NOT_LEADER_OR_FOLLOWER because it
    stopped leading while waiting for the ISR) writes the value twice. librdkafka retries
    such errors without telling the application, so they are read from its ``msg`` debug
    lines. Those do not say which values a failed request held (without idempotence there
    are no message ids), so a value counts as having seen an error when one was logged
    for its partition between its produce() and its acknowledgement: log lines and
    delivery reports come through the same queue, in order.
    """

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": False,
            "message.timeout.ms": 120000, "request.timeout.ms": 10000,
            "retry.backoff.ms": 100, "topic.metadata.refresh.interval.ms": 1000,
            "linger.ms": 5, "debug": "msg", "logger": self})
        self.sent = 0
        self.partition_of: dict[str, int] = {}
        self.acked: list[tuple[int, int, str]] = []  # (partition, offset, value)
        self.failed: list[tuple[str, KafkaError]] = []  # delivery reports with an error
        self.send_errors: Counter = Counter()  # librdkafka's failed sends by error
        self._errors_so_far = [0] * PARTITIONS  # failed sends logged per partition
        self._errors_at_produce: dict[str, int] = {}
        self.saw_an_error: set[str] = set()

    def log(self, level: int, fmt: str, *args) -> None:
        """A librdkafka log line (served by poll, on the polling thread)."""
        found = _FAILED_MESSAGE_SET.search(fmt % args)
        if found and found["topic"] == TOPIC:
            self._errors_so_far[int(found["partition"])] += 1
            self.send_errors[found["error"]] += 1

    def _delivered(self, err, msg) -> None:
        value = msg.value().decode()
        if self._errors_so_far[msg.partition()] > self._errors_at_produce[value]:
            self.saw_an_error.add(value)
        if err is None:
            self.acked.append((msg.partition(), msg.offset(), value))
        else:
            self.failed.append((value, err))

    def send(self, value: str, partition: int) -> None:
        self.partition_of[value] = partition
        self._errors_at_produce[value] = self._errors_so_far[partition]
        while True:
            try:
                self.producer.produce(TOPIC, value=value.encode(), partition=partition,
                                      on_delivery=self._delivered)
                return
            except BufferError:  # local queue full while no leader takes writes
                self.producer.poll(0.1)

    def run(self, stop: threading.Event) -> None:
        """Produce ``v-0``, ``v-1``, ... (value n to partition n % 3) until ``stop``."""
        while not stop.is_set():
            self.send(f"v-{self.sent}", self.sent % PARTITIONS)
            self.sent += 1
            self.producer.poll(0)
            time.sleep(0.003)


def metadata_ok(cluster: LocalCluster, via: list[int], condition) -> bool:
    """``condition`` holds for every partition as each broker in ``via`` reports it."""
    for broker_id in via:
        try:
            topic = cluster.metadata(broker_id, [TOPIC]).topics.get(TOPIC)
        except Exception:  # noqa: BLE001 -- a broker still starting; the caller polls again
            return False
        if topic is None or len(topic.partitions) != PARTITIONS:
            return False
        if not all(condition(p) for p in topic.partitions.values()):
            return False
    return True


def fully_in_sync(cluster: LocalCluster, via: list[int]) -> bool:
    return metadata_ok(cluster, via, lambda p: p.leader >= 0 and len(p.isr) == 3)


def registered(cluster: LocalCluster, via: list[int]) -> bool:
    try:
        return all(sorted(cluster.metadata(b).brokers) == sorted(cluster.brokers) for b in via)
    except Exception:  # noqa: BLE001 -- see metadata_ok
        return False


class FaultLoop:
    """One fault at a time on a random broker, as ``random.Random(seed)`` decides."""

    def __init__(self, cluster: LocalCluster, seed: int, context: str) -> None:
        self.cluster = cluster
        self.rng = random.Random(seed)
        self.context = context
        self.history: list[str] = []
        self.terminate_status: list[tuple[int, int | None]] = []

    def note(self, text: str) -> None:
        self.history.append(f"{time.strftime('%H:%M:%S')} {text}")
        print(self.history[-1], flush=True)

    def run(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            broker_id = self.rng.choice(sorted(self.cluster.brokers))
            action = self.rng.choice(["kill", "pause", "terminate"])
            getattr(self, action)(broker_id, self.cluster.brokers[broker_id])
            self.settle(broker_id)
            time.sleep(self.rng.uniform(0.2, 2.0))

    def kill(self, broker_id: int, broker) -> None:
        down = self.rng.uniform(0.2, 4.0)
        self.note(f"SIGKILL broker {broker_id}, restart after {down:.1f}s")
        broker.kill()
        time.sleep(down)
        broker.start()

    def pause(self, broker_id: int, broker) -> None:
        # Up to twice the session timeout: past it the controller moves its leaderships
        # and the broker wakes as a zombie leader that must not acknowledge anything.
        down = self.rng.uniform(0.5, 2 * SESSION_TIMEOUT_S)
        self.note(f"SIGSTOP broker {broker_id} for {down:.1f}s")
        broker.pause()
        time.sleep(down)
        broker.resume()

    def terminate(self, broker_id: int, broker) -> None:
        down = self.rng.uniform(0.2, 3.0)
        self.note(f"SIGTERM broker {broker_id}, restart after {down:.1f}s")
        started = time.monotonic()
        status = broker.stop()
        self.note(f"broker {broker_id} exited {status} after {time.monotonic() - started:.1f}s")
        self.terminate_status.append((broker_id, status))
        time.sleep(down)
        broker.start()

    def settle(self, broker_id: int) -> None:
        """Wait until the broker is registered again; sometimes also for a full ISR, so
        that some faults hit a cluster still catching up and others a healthy one."""
        via = sorted(self.cluster.brokers)
        wait_until(lambda: registered(self.cluster, via), timeout=60,
                   message=f"broker {broker_id} registered again ({self.context})")
        if self.rng.random() < 0.5:
            wait_until(lambda: fully_in_sync(self.cluster, via), timeout=60,
                       message=f"every replica back in the ISR ({self.context})")
            self.note("every replica in sync")


def read_partition(cluster: LocalCluster, partition: int, context: str) -> dict[int, str]:
    """{offset: value} of one partition through kcat, offsets checked unique."""
    result = subprocess.run(
        ["kcat", "-b", cluster.bootstrap(), "-C", "-t", TOPIC, "-p", str(partition),
         "-o", "beginning", "-e", "-q", "-f", "%o %s\\n"],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{context}: kcat failed: {result.stderr}"
    records = [(int(offset), value) for offset, value in
               (line.split(" ", 1) for line in result.stdout.splitlines() if line)]
    log = dict(records)
    assert len(log) == len(records), (
        f"{context}: partition {partition}: an offset was delivered twice")
    return log


def replica_bytes(cluster: LocalCluster, partition: int) -> dict[int, bytes]:
    """Each broker's segment files of ``partition`` concatenated in name order."""
    found = {}
    for broker_id, broker in cluster.brokers.items():
        directory = broker.log_dir / f"{TOPIC}-{partition}"
        found[broker_id] = b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))
    return found


def test_acknowledged_writes_survive_random_broker_faults(seed, cluster, tmp_path):
    context = f"seed {seed} (replay with PYLOG_FAULT_SEED={seed}; broker logs under {tmp_path})"
    with Admin(cluster.bootstrap()) as admin:
        admin.create_topic(TOPIC, PARTITIONS, 3)
    via = sorted(cluster.brokers)
    wait_until(lambda: fully_in_sync(cluster, via), message=f"a replicated topic ({context})")

    producer = WatchedProducer(cluster.bootstrap())
    stop = threading.Event()
    thread = threading.Thread(target=producer.run, args=(stop,), name="producer")
    thread.start()
    faults = FaultLoop(cluster, seed, context)
    try:
        wait_until(lambda: len(producer.acked) > 100, message=f"first acknowledgements ({context})")
        faults.run(FAULT_SECONDS)
        for broker in cluster.brokers.values():
            broker.resume()
            broker.start()
        wait_until(lambda: registered(cluster, via), timeout=60,
                   message=f"every broker registered ({context})")
        wait_until(lambda: fully_in_sync(cluster, via), timeout=60,
                   message=f"every replica in the ISR after the faults ({context})")
    finally:
        stop.set()
        thread.join()
    in_flight = producer.producer.flush(120)
    print(f"sent {producer.sent} values, {len(producer.acked)} acknowledged, "
          f"{len(producer.saw_an_error)} in flight during a failed send; failed sends: "
          f"{dict(producer.send_errors)}", flush=True)
    assert in_flight == 0, f"{context}: {in_flight} values unacknowledged after the faults"
    assert not producer.failed, f"{context}: deliveries failed: {producer.failed[:5]}"
    assert [status for _, status in faults.terminate_status if status != 0] == [], (
        f"{context}: SIGTERM exit statuses {faults.terminate_status}")

    logs = {p: read_partition(cluster, p, context) for p in range(PARTITIONS)}
    moved = [(p, o, v, logs[p].get(o)) for p, o, v in producer.acked if logs[p].get(o) != v]
    assert not moved, (f"{context}: {len(moved)} acknowledged values not at their offset, "
                       f"(partition, offset, acknowledged, found) e.g. {moved[:5]}")
    assert sorted(v for _, _, v in producer.acked) == sorted(producer.partition_of), (
        f"{context}: not every value was acknowledged exactly once")

    where = defaultdict(list)
    for partition, log in logs.items():
        for offset, value in log.items():
            where[value].append((partition, offset))
    misplaced = [(v, places) for v, places in where.items()
                 if {p for p, _ in places} != {producer.partition_of.get(v)}]
    assert not misplaced, f"{context}: values nobody sent to that partition: {misplaced[:5]}"
    duplicated = {v: places for v, places in where.items() if len(places) > 1}
    unexplained = {v: places for v, places in duplicated.items() if v not in producer.saw_an_error}
    assert not unexplained, (f"{context}: values written twice though no send failed while "
                             f"they were in flight: {list(unexplained.items())[:5]}")
    print(f"{len(duplicated)} values written twice after a failed send, e.g. "
          f"{list(duplicated.items())[:5]}", flush=True)

    for partition in range(PARTITIONS):
        deadline = time.monotonic() + 30  # followers may still be fetching the last batches
        while len(set((replicas := replica_bytes(cluster, partition)).values())) != 1:
            assert time.monotonic() < deadline, (
                f"{context}: replicas of partition {partition} differ, bytes per broker "
                f"{ {b: len(d) for b, d in replicas.items()} }")
            time.sleep(0.2)
