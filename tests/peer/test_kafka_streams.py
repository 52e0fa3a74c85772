"""Apache Kafka Streams 4.4.0 with ``exactly_once_v2`` against a three-broker pylog cluster.

A word-count application (``pylog/testing/java/wordcount/WordCount.java``) reads lines from
an input topic, groups the words by word -- a repartition topic -- and counts them in a
state store backed by a compacted changelog topic, both created by Streams with replication
factor 3; each new count goes to the output topic as ``word -> count``. The record cache is
off, so every count is written: read committed, the output holds for each word exactly
1, 2, ..., n, n being how often the word occurs in the input.

While lines keep arriving, the Streams JVM is SIGKILLed at a moment it has a transaction
open with counts in the output (found by freezing it with SIGSTOP and comparing the output
read uncommitted and committed), and started again. Its state store is lost (no checkpoint
under EOS), so it restores the counts from the changelog; it fences its old producers
(InitProducerId on the same transactional ids), which aborts the open transactions, and goes
on from the offsets committed in its last transaction. Exactly once means no count is
skipped or repeated: a duplicate (a word's count going 7, 8, 7, 8) is an input record
processed twice, a gap is one lost; the aborted counts must be in the output topic but never
read committed. With ``processing.guarantee=at_least_once`` the same run fails: words
counted twice. ``count_words_through_kills`` run by hand against a three-node Apache Kafka
4.4 (``pylog.testing.apache_kafka.running_kafka``) passes the same way: 48 counts aborted
with the killed transaction, 17.5 s (pylog: 9 to 120 aborted, about 20 s).

This uses what Streams needs of a broker: CreateTopics with configs (compacted changelog,
``cleanup.policy=delete`` repartition topic), transactions over several partitions and
topics (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit with the
group's generation and member id, EndTxn), read-committed fetches and ListOffsets, stable
OffsetFetch (``require_stable``), the consumer group with Streams' own assignor, and
DeleteRecords on the repartition topic.
"""

from __future__ import annotations

import random
import re
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from pylog.protocol import ApiKey
from pylog.testing.java import compiled
from pylog.testing import maven
from pylog.testing.maven import classpath
from pylog.testing.process import ServerProcess
from pylog.testing.waiting import wait_until
from pylog.testing.zookeeper import zookeeper_fixture
from tests.broker.wire import WireClient
from tests.cluster.cluster_helpers import LocalCluster
from tests.peer.java_tools import JVM_OPTIONS, replicated_cluster_fixture

pytestmark = pytest.mark.slow

zookeeper = zookeeper_fixture()

PARTITIONS = 3
VOCABULARY = ("apple banana cherry damson elder fig grape hazel iris juniper kiwi lemon "
              "mango nectarine olive peach quince rowan sloe tamarind").split()
# Lines a second produced while Streams runs, is killed and comes back.
RATE = 100
# Streams' threads and clients at INFO (rebalances, restores, task migrations), the rest WARN.
LOG4J2 = maven.log4j2_console("WARN", {"org.apache.kafka.streams": "INFO"},
                              pattern="[%d] %p [%t] %m (%c)%n")


cluster = replicated_cluster_fixture("kafka-streams", **{
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000})


class StreamsApp:
    """The word-count JVM (``java WordCount streams.properties input output``) in
    ``work_dir``, application id ``name``, counting ``<name>-lines`` into ``<name>-counts``;
    its state directory stays across restarts, as a real deployment's would."""

    def __init__(self, work_dir: Path, bootstrap: str, name: str) -> None:
        self.work_dir = work_dir
        self.name = name
        self.settings = {
            "bootstrap.servers": bootstrap,
            "application.id": name,
            "processing.guarantee": "exactly_once_v2",
            "replication.factor": 3,
            "num.stream.threads": 2,
            "commit.interval.ms": 100,
            # Every count written, none folded into a later one by the record cache.
            "statestore.cache.max.bytes": 0,
            "state.dir": work_dir / "state",
            # A killed instance's members leave the group in 6 s, not 45.
            "consumer.session.timeout.ms": 6000,
            "consumer.heartbeat.interval.ms": 1000,
            "producer.linger.ms": 5,
            # Consumed repartition records deleted (DeleteRecords) every second, not 30.
            "repartition.purge.interval.ms": 1000,
        }
        self.process: ServerProcess | None = None
        self._log_start = 0

    @property
    def log_path(self) -> Path:
        return self.work_dir / "streams.log"

    def start(self) -> "StreamsApp":
        self.work_dir.mkdir(parents=True, exist_ok=True)
        config = self.work_dir / "streams.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in self.settings.items()))
        log_config = self.work_dir / "log4j2.properties"
        log_config.write_text(LOG4J2)
        jars = classpath("kafka-streams")
        argv = ["java", *JVM_OPTIONS, f"-Dlog4j2.configurationFile={log_config}",
                "-cp", f"{compiled('wordcount', jars)}:{jars}", "WordCount", str(config),
                f"{self.name}-lines", f"{self.name}-counts"]
        self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        self.process = ServerProcess(argv, self.log_path, cwd=self.work_dir).start()
        return self

    def alive(self) -> bool:
        return self.process is not None and self.process.alive()

    def kill(self) -> None:
        """SIGKILL: no commit, no LeaveGroup, open transactions left behind."""
        if self.process is not None:
            self.process.kill()

    def running(self) -> bool:
        """Whether this start of the application has reached RUNNING: joined the group, its
        tasks assigned and their stores restored."""
        self.check_alive()
        with open(self.log_path, "rb") as log:
            log.seek(self._log_start)
            return b"-> RUNNING" in log.read()

    def process_id(self) -> str:
        """``<application.id>-<process id>``, which the transactional ids of its stream
        threads extend with ``-<thread index>`` (EOS v2). The process id is kept in the
        state directory, so it is the same after a restart."""
        pattern = rb"stream-client \[(" + re.escape(self.name.encode()) + rb"-[0-9a-f-]{36})\]"
        found = re.search(pattern, self.log_path.read_bytes())
        assert found, f"no process id in the log{self.log_tail()}"
        return found.group(1).decode()

    def restored_records(self) -> int:
        """How many changelog records this start of the application restored its store from."""
        with open(self.log_path, "rb") as log:
            log.seek(self._log_start)
            return sum(int(n) for n in re.findall(
                rb"Finished restoring changelog .* with a total number of (\d+) records",
                log.read()))

    def check_alive(self) -> None:
        assert self.alive(), f"Streams exited{self.log_tail()}"

    def log_tail(self, lines: int = 60) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        tail = "\n".join(text.splitlines()[-lines:])
        return f"\n--- last lines of {self.log_path} ---\n{tail}"


class LineWriter:
    """Produces deterministic lines of words to the input topic from a thread, ``RATE`` a
    second, and counts the words it has had acknowledged."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                  "linger.ms": 5})
        self.random = random.Random(20261204)
        self.counts: Counter[str] = Counter()
        self.lines = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def write(self, count: int) -> None:
        for _ in range(count):
            words = self.random.choices(VOCABULARY, k=self.random.randint(1, 8))
            line = " ".join(w.upper() if self.random.random() < 0.1 else w for w in words)
            self.producer.produce(self.topic, key=str(self.lines).encode(), value=line.encode())
            self.counts.update(words)
            self.lines += 1
        assert self.producer.flush(30) == 0, "input lines not acknowledged"

    def start(self) -> None:
        def run():
            while not self._stop.wait(0.1):
                self.write(RATE // 10)
        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


class OutputReader:
    """Reads the output topic read committed from its start: each word's counts in order."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "counts-reader",
                                  "enable.auto.commit": False,
                                  "isolation.level": "read_committed"})
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        self.counts: dict[str, list[int]] = {}

    def poll(self) -> dict[str, int]:
        """Reads what has been committed since the last call; each word's latest count."""
        for message in self.consumer.consume(5000, 0.5):
            if message.error() is not None:
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                continue
            count = int.from_bytes(message.value(), "big", signed=True)
            self.counts.setdefault(message.key().decode(), []).append(count)
        return self.latest()

    def latest(self) -> dict[str, int]:
        return {word: counts[-1] for word, counts in self.counts.items()}

    def close(self) -> None:
        self.consumer.close()


def create_topics(bootstrap: str, topics: list[str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, PARTITIONS, 3) for t in topics])
    for future in futures.values():
        future.result(30)
    wait_until(lambda: all(t in (found := admin.list_topics(timeout=10).topics)
                           and all(p.leader >= 0 for p in found[t].partitions.values())
                           for t in topics),
               message=f"{topics} to have leaders")


def check_internal_topics(bootstrap: str, name: str) -> None:
    """Streams created its repartition topic (``cleanup.policy=delete``) and its store's
    changelog (compacted), each with replication factor 3."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    expected = {f"{name}-words-repartition": "delete", f"{name}-counts-changelog": "compact"}
    metadata = admin.list_topics(timeout=15).topics
    for topic in expected:
        assert topic in metadata, f"Streams did not create {topic}: {sorted(metadata)}"
        partitions = metadata[topic].partitions.values()
        assert len(partitions) == PARTITIONS
        assert all(len(p.replicas) == 3 for p in partitions), topic
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in expected]
    for resource, future in admin.describe_configs(resources).items():
        assert future.result(30)["cleanup.policy"].value == expected[resource.name], resource


def records_in(bootstrap: str, topic: str) -> int:
    """How many records (committed, aborted or open; not transaction markers) ``topic`` has."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "record-counter",
                         "enable.auto.commit": False, "isolation.level": "read_uncommitted"})
    partitions = [TopicPartition(topic, p, 0) for p in range(PARTITIONS)]
    ends = [consumer.get_watermark_offsets(p, timeout=15)[1] for p in partitions]
    consumer.assign(partitions)
    count = 0
    try:
        def at_end():
            nonlocal count
            for message in consumer.consume(5000, 0.5):
                assert message.error() is None, message.error()
                count += 1
            positions = consumer.position(partitions)
            return all(p.offset >= end for p, end in zip(positions, ends))
        wait_until(at_end, timeout=30, message=f"reading {topic} to its end")
    finally:
        consumer.close()
    return count


def kill_in_a_transaction(app: StreamsApp, bootstrap: str, reader: OutputReader) -> int:
    """SIGKILLs the application while a transaction of its with counts in the output is
    open; returns how many such counts there are (to be aborted).

    The JVM is frozen (SIGSTOP) and, after a moment for any commit it had sent to complete,
    the output read uncommitted is compared with what the reader reads committed; if they
    differ, the transaction holding the difference cannot commit any more: SIGKILL.
    Otherwise SIGCONT and try again a moment later."""
    for _ in range(20):
        app.process.signal(signal.SIGSTOP)
        time.sleep(0.5)
        committed = 0
        while (new := sum(len(c) for c in reader.counts.values())) != committed or not new:
            committed = new
            reader.poll()
        written = records_in(bootstrap, f"{app.name}-counts")
        if written > committed:
            app.kill()
            return written - committed
        app.process.signal(signal.SIGCONT)
        time.sleep(random.uniform(0.05, 0.3))
    raise AssertionError(f"no open transaction with output records seen{app.log_tail()}")


def test_word_count_exactly_once_through_a_sigkill(cluster, tmp_path):
    """The Streams JVM SIGKILLed while it counts, and started again."""
    count_words_through_kills(cluster, tmp_path, "wordcount")


def test_word_count_exactly_once_through_a_broker_sigkill(cluster, tmp_path):
    """Also, while the restarted application catches up, the broker coordinating the
    transactions of its first stream thread SIGKILLed and started again: the transaction
    coordinator moves, with transactions open, and the partitions it led with it."""
    def kill_the_transaction_coordinator(app: StreamsApp):
        transactional_id = f"{app.process_id()}-1"
        victim = transaction_coordinator(cluster.bootstrap(), transactional_id)
        assert victim in cluster.brokers, f"no coordinator for {transactional_id}"
        cluster.brokers[victim].kill()
        survivors = cluster.bootstrap(*(b for b in cluster.brokers if b != victim))
        wait_until(lambda: transaction_coordinator(survivors, transactional_id) not in (
            victim, -1), timeout=30, message=f"a new coordinator for {transactional_id}")
        cluster.brokers[victim].start()
    count_words_through_kills(cluster, tmp_path, "wordcount-broker",
                              kill_the_transaction_coordinator)


def transaction_coordinator(bootstrap: str, transactional_id: str) -> int:
    """The broker id FindCoordinator names for ``transactional_id`` (-1: none right now)."""
    with WireClient(bootstrap.split(",")[0]) as wire:
        found = wire.call(ApiKey.FIND_COORDINATOR, 2, {"key": transactional_id, "key_type": 1})
    return found["node_id"] if found["error_code"] == 0 else -1


def count_words_through_kills(cluster: LocalCluster, tmp_path: Path, name: str,
                              after_restart=None) -> None:
    """The whole check: application ``name`` counts the words of ``<name>-lines`` into
    ``<name>-counts`` while lines arrive; once it has counted a thousand words it is
    SIGKILLed with a transaction open (``kill_in_a_transaction``), started again, and (if
    given) ``after_restart(app)`` called once it runs again. Read committed, the output must
    then hold each word's counts 1..n once each.

    Only ``cluster.bootstrap()`` is used without ``after_restart``, so the same check runs
    on Apache Kafka by hand (an object whose ``bootstrap()`` is a ``running_kafka``'s)."""
    bootstrap = cluster.bootstrap()
    create_topics(bootstrap, [f"{name}-lines", f"{name}-counts"])
    writer = LineWriter(bootstrap, f"{name}-lines")
    writer.write(500)
    app = StreamsApp(tmp_path / "streams", bootstrap, name).start()
    reader = OutputReader(bootstrap, f"{name}-counts")
    try:
        wait_until(app.running, timeout=60, message=f"Streams to reach RUNNING{app.log_tail()}")
        writer.start()
        # Killed mid-run: some counts committed, input still arriving, and a transaction
        # with counts in the output open.
        wait_until(lambda: app.check_alive() or sum(reader.poll().values()) > 1000,
                   timeout=60, message="a thousand counted words in the output")
        open_counts = kill_in_a_transaction(app, bootstrap, reader)
        counted_before_kill = sum(len(counts) for counts in reader.counts.values())
        time.sleep(2)
        app.start()
        wait_until(app.running, timeout=90,
                   message=f"Streams to reach RUNNING again{app.log_tail()}")
        if after_restart is not None:
            after_restart(app)
        time.sleep(2)
        writer.stop()
        expected = dict(writer.counts)

        def caught_up():
            app.check_alive()
            latest = reader.poll()
            return all(latest.get(word, 0) >= n for word, n in expected.items())
        wait_until(caught_up, timeout=90, message=f"every word counted{app.log_tail()}")
        # Anything counted twice would come after the last true count: give it time to.
        time.sleep(2)
        reader.poll()
        restored = app.restored_records()
        check_internal_topics(bootstrap, name)
        written = records_in(bootstrap, f"{name}-counts")
        changelog = records_in(bootstrap, f"{name}-counts-changelog")
    finally:
        app.kill()
        reader.close()
    committed = sum(len(counts) for counts in reader.counts.values())
    print(f"{name}: {writer.lines} lines, {sum(expected.values())} words; killed after "
          f"{counted_before_kill} counted and {open_counts} in its open transaction; "
          f"{restored} counts restored from the changelog; "
          f"{written - committed} output records aborted, changelog {changelog - committed}")
    assert reader.latest() == expected
    for word, counts in reader.counts.items():
        assert counts == list(range(1, expected[word] + 1)), (
            f"{word!r}: counts not 1..{expected[word]} once each: {counts}")
    # The restarted application rebuilt its store from the changelog (under EOS a store
    # without a checkpoint, as after a SIGKILL, is wiped) rather than counting from zero.
    assert restored > 0, f"no counts restored from the changelog{app.log_tail()}"
    # The counts of the transaction open when the application was killed (and any aborted
    # later) are in the output topic, but were never read committed.
    assert written - committed >= open_counts > 0
