"""Apache Kafka Connect 4.3.1 in distributed mode against a three-broker pylog cluster.

Two workers form one Connect cluster. Connect creates its own config, offset and status topics
(compacted, replication factor 3, checked through DescribeConfigs as Connect itself does), and
runs FileStreamSource (a text file into a topic) and FileStreamSink (that topic into another
file), both created through the REST API. While lines keep arriving in the source file, the
worker running the source task is SIGKILLed, its tasks move to the survivor, and it is started
again; then the same for the worker running the sink task.

What is checked is what a Connect user relies on: the sink file holds every source line, in
order. Both connectors are at-least-once, so a copy that resumes after a crash repeats what it
did since its last commit: the topic and the sink file are each their input replayed in runs,
each run starting at or before where the copy had got to, never after. The source's offsets
survive in the compacted offsets topic, so a restarted source resumes from its last flushed
offset (a second or two of lines again), never from the file's start. With
``exactly.once.source.support`` (KIP-618: transactional source tasks, zombie fencing) the
topic read committed holds every line exactly once, through a worker's SIGKILL and then the
SIGKILL of the pylog broker leading the topic. The connectors' configs survive in the config
topic (read back from both workers) and both run again.

Apache Kafka 4.4 behaves the same: ``copy_through`` run by hand on a three-node Kafka with
these tests' disruptions, at 40 lines a second, passes every check here, the source
repeating 39 to 75 lines after its worker's kill and the sink 40 over three runs (pylog: 40
to 74, and 0 or 40).

Last, the offsets through REST (KIP-875): what Connect reads back (the source's byte position
from the offsets topic, the sink's group offset) is where the copy ended; connectors stopped,
the source's offset moved back 50 lines and the sink's deleted (its consumer group deleted),
then resumed, copy exactly those 50 lines again and the whole topic into a new file (on Kafka
too).

Connect is 4.3.1, the newest whose FileStream connectors are on Maven Central (see
``pylog/testing/maven/kafka-connect/pom.xml``).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from pylog.testing.kafka_connect import ConnectError, ConnectWorker
from pylog.testing.waiting import wait_until
from pylog.testing.zookeeper import zookeeper_fixture
from tests.cluster.cluster_helpers import LocalCluster
from tests.peer.java_tools import replicated_cluster_fixture

pytestmark = pytest.mark.slow

zookeeper = zookeeper_fixture()

SOURCE_CLASS = "org.apache.kafka.connect.file.FileStreamSourceConnector"
SINK_CLASS = "org.apache.kafka.connect.file.FileStreamSinkConnector"
# Lines appended to the source file a second while the workers die and come back.
RATE = 40
# The partitions the workers ask for, per internal topic (the config topic always has one).
INTERNAL_PARTITIONS = {"configs": 1, "offsets": 5, "status": 3}
# A copy as runs of consecutive input lines: [(first index, length, lines repeated)].
Runs = list[tuple[int, int, int]]


cluster = replicated_cluster_fixture("kafka-connect")


@pytest.fixture
def start_workers(cluster, tmp_path):
    """``start_workers(group, overrides)`` -> two started workers of one Connect cluster,
    SIGKILLed after the test."""
    started: list[ConnectWorker] = []

    def start(group: str, overrides: dict[str, object] | None = None) -> list[ConnectWorker]:
        workers = [ConnectWorker(tmp_path / f"worker-{i}", cluster.bootstrap(), group,
                                 overrides=overrides) for i in (1, 2)]
        started.extend(workers)
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.wait_ready(timeout=90)
        return workers

    yield start
    for worker in started:
        worker.kill()


def test_file_connectors_through_workers_killed_and_restarted(cluster, start_workers, tmp_path):
    """At-least-once (Connect's default): the source's worker killed, then the sink's."""
    copy = FileCopy(cluster.bootstrap(), start_workers("connect-alo"), tmp_path, "alo")
    source_runs, _ = copy_through(copy, [kill_worker_running("source"),
                                         kill_worker_running("sink")])
    # The source resumed from offsets it had flushed to the offsets topic: never from the
    # file's start (the first 200 lines were copied, offsets flushed, before any kill), and
    # repeating only the lines it read in the last second or two before the kill.
    for first_line, _length, back in source_runs[1:]:
        assert first_line >= 200 and back <= 5 * RATE, (
            f"the source re-read {back} lines from line {first_line}")
    copy_again_from_offsets_set_through_rest(copy)


def test_exactly_once_source_through_a_worker_and_a_broker_killed(cluster, start_workers,
                                                                  tmp_path):
    """``exactly.once.source.support=enabled``: the source task's records and offsets go in
    one transaction, so after its worker's SIGKILL, and the topic leader's, the topic read
    committed holds each line once; the sink reads committed records only."""
    workers = start_workers("connect-eos", {"exactly.once.source.support": "enabled",
                                            "consumer.isolation.level": "read_committed"})
    copy = FileCopy(cluster.bootstrap(), workers, tmp_path, "eos")
    source_runs, _ = copy_through(copy, [kill_worker_running("source"),
                                         kill_topic_leader(cluster)])
    assert len(source_runs) == 1, f"lines produced twice: {source_runs}"
    # With exactly-once support, Connect fences the source's zombie producers
    # (InitProducerId on its transactional ids) before it writes the new offset.
    copy_again_from_offsets_set_through_rest(copy)


@dataclass(frozen=True)
class FileCopy:
    """One check's connectors: ``<name>-source`` copies ``source.txt`` in ``directory`` into
    the topic ``<name>-lines``, and ``<name>-sink`` that topic into ``sink.txt``."""

    bootstrap: str
    workers: list[ConnectWorker]
    directory: Path
    name: str

    @property
    def source_file(self) -> Path:
        return self.directory / "source.txt"

    @property
    def sink_file(self) -> Path:
        return self.directory / "sink.txt"

    @property
    def topic(self) -> str:
        return f"{self.name}-lines"

    @property
    def source(self) -> str:
        return f"{self.name}-source"

    @property
    def sink(self) -> str:
        return f"{self.name}-sink"

    @property
    def configs(self) -> dict[str, dict[str, str]]:
        return {
            self.source: {"connector.class": SOURCE_CLASS, "tasks.max": "1",
                          "file": str(self.source_file), "topic": self.topic},
            self.sink: {"connector.class": SINK_CLASS, "tasks.max": "1",
                        "file": str(self.sink_file), "topics": self.topic},
        }

    def running(self, connector: str) -> ConnectWorker:
        """The worker running the connector's task, as either worker reports it."""
        return next(w for w in self.workers if w.worker_id in {
            running_on(reporter, connector) for reporter in self.workers if reporter.alive()})


def copy_through(copy: FileCopy, disruptions: list[Callable[[FileCopy], None]],
                 replicas: int = 3) -> tuple[Runs, Runs]:
    """The whole check on any Kafka-compatible cluster (pylog here; Apache Kafka to compare
    by hand, ``replicas`` being its node count): the connectors created through REST copy
    200 lines, then more lines keep coming while each of ``disruptions`` runs in turn.

    Returns the replay runs (see ``replay_runs``) of the topic over the file and of the sink
    file over the topic."""
    check_internal_topics(copy.bootstrap, copy.workers[0].settings["group.id"], replicas)
    create_topic(copy.bootstrap, copy.topic, replicas)
    writer = LineWriter(copy.source_file, RATE)
    writer.write(200)
    first, second = copy.workers
    for connector, config in copy.configs.items():
        created = first.request("POST", "/connectors", {"name": connector, "config": config})
        assert created["name"] == connector and created["config"] == {**config,
                                                                      "name": connector}
    wait_until(lambda: all(running_on(second, c) for c in copy.configs), timeout=60,
               message="both connectors and their tasks RUNNING")
    wait_until(lambda: len(lines_of(copy.sink_file)) >= 200, timeout=60,
               message="the first 200 lines in the sink file")

    writer.start()
    try:
        for disrupt in disruptions:
            time.sleep(2)
            disrupt(copy)
        time.sleep(2)
    finally:
        writer.stop()
    runs = check_copied(copy, [f"line-{i:05d}" for i in range(writer.written)])
    check_configs_kept(copy)
    return runs


def kill_worker_running(role: str) -> Callable[[FileCopy], None]:
    """SIGKILL the worker running the ``role`` ("source", "sink") connector's task; once the
    survivor runs every task, start it again."""
    def disrupt(copy: FileCopy) -> None:
        victim = copy.running(f"{copy.name}-{role}")
        survivor = next(w for w in copy.workers if w is not victim)
        victim.kill()
        wait_until(lambda: all(running_on(survivor, c) == survivor.worker_id
                               for c in copy.configs), timeout=60,
                   message=f"every task on {survivor.worker_id} after {role}'s worker died")
        time.sleep(1)
        victim.start()
        victim.wait_ready(timeout=90)
        wait_until(lambda: all(running_on(victim, c) for c in copy.configs), timeout=60,
                   message=f"both tasks RUNNING after {victim.worker_id} came back")
    return disrupt


def kill_topic_leader(cluster: LocalCluster) -> Callable[[FileCopy], None]:
    """SIGKILL the pylog broker leading the copy's topic, and start it again 4 s later."""
    def disrupt(copy: FileCopy) -> None:
        reporter = next(b for b in cluster.brokers if cluster.brokers[b].alive())
        leader = cluster.leaders(reporter, copy.topic)[0]
        cluster.brokers[leader].kill()
        time.sleep(4)
        cluster.brokers[leader].start()
        cluster.wait_for_brokers(sorted(cluster.brokers))
    return disrupt


def copy_again_from_offsets_set_through_rest(copy: FileCopy) -> None:
    """Both connectors stopped (``PUT .../stop``), the source's offset moved back 50 lines
    (``PATCH .../offsets``: a record in the offsets topic), the sink's deleted (``DELETE
    .../offsets``: its consumer group deleted), both resumed: the source copies the last 50
    lines again and the sink, into a new file, the whole topic from its start."""
    first, second = copy.workers
    source, sink = copy.source, copy.sink
    source_file, sink_file = copy.source_file, copy.sink_file
    lines = lines_of(source_file)
    topic_before, _ = read_topic(copy.bootstrap, copy.topic)
    for connector in (source, sink):
        first.request("PUT", f"/connectors/{connector}/stop")
        wait_until(lambda: connector_state(second, connector) == "STOPPED", timeout=30,
                   message=f"{connector} STOPPED")
    position = sum(len(line) + 1 for line in lines[:-50])
    second.request("PATCH", f"/connectors/{source}/offsets", {"offsets": [
        {"partition": {"filename": str(source_file)}, "offset": {"position": position}}]})
    second.request("DELETE", f"/connectors/{sink}/offsets")
    assert connector_offsets(first, source) == [
        ({"filename": str(source_file)}, {"position": position})]
    assert connector_offsets(first, sink) == []
    sink_file.rename(copy.directory / "sink-before-reset.txt")

    for connector in (source, sink):
        first.request("PUT", f"/connectors/{connector}/resume")
    expected = topic_before + lines[-50:]
    wait_until(lambda: len(lines_of(sink_file)) >= len(expected), timeout=60,
               message=f"{len(expected)} lines in the new sink file")
    topic, _ = read_topic(copy.bootstrap, copy.topic)
    assert topic == expected, "the source did not go back exactly 50 lines"
    assert lines_of(sink_file) == expected, "the sink did not copy the topic from its start"


class LineWriter:
    """Appends numbered lines to the source file from a thread, ``rate`` a second, each line
    whole in one write (the source task reads up to a newline)."""

    def __init__(self, path: Path, rate: float) -> None:
        self.path = path
        self.interval = 1.0 / rate
        self.written = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def write(self, count: int) -> None:
        with open(self.path, "a") as out:
            for _ in range(count):
                out.write(f"line-{self.written:05d}\n")
                self.written += 1

    def start(self) -> None:
        def run():
            while not self._stop.wait(self.interval):
                self.write(1)
        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def lines_of(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def create_topic(bootstrap: str, topic: str, replicas: int) -> None:
    """One partition, so the topic has one order that the sink file must follow."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, replicas)])[topic].result(30)
    wait_until(lambda: topic in (found := admin.list_topics(topic, timeout=10).topics)
               and found[topic].error is None and found[topic].partitions[0].leader >= 0,
               message=f"{topic} to have a leader")


def read_topic(bootstrap: str, topic: str) -> tuple[list[str], int]:
    """The topic's values read committed, and the offset after the last of them."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader",
                         "enable.auto.commit": False})
    end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=15)[1]
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[str] = []
    after_last = 0
    try:
        def caught_up():
            nonlocal after_last
            for message in consumer.consume(1000, 0.5):
                assert message.error() is None, message.error()
                values.append(message.value().decode())
                after_last = message.offset() + 1
            # The position, not a count: transaction markers take offsets too.
            return consumer.position([TopicPartition(topic, 0)])[0].offset >= end
        wait_until(caught_up, timeout=30, message=f"reading {topic} to offset {end}")
    finally:
        consumer.close()
    return values, after_last


def connector_states(worker: ConnectWorker, name: str) -> tuple[str, list[tuple[str, str]]]:
    """(the connector's state, [(task state, worker id)])."""
    status = worker.status(name)
    return status["connector"]["state"], [(t["state"], t["worker_id"]) for t in status["tasks"]]


def connector_state(worker: ConnectWorker, name: str) -> str | None:
    try:
        return worker.status(name)["connector"]["state"]
    except (ConnectError, OSError):  # a worker between rebalances answers 404/409 a moment
        return None


def running_on(worker: ConnectWorker, name: str) -> str | None:
    """The worker id running the connector's only task, if the connector and task run."""
    try:
        state, tasks = connector_states(worker, name)
    except (ConnectError, OSError):  # a worker between rebalances answers 404/409 a moment
        return None
    if state == "RUNNING" and len(tasks) == 1 and tasks[0][0] == "RUNNING":
        return tasks[0][1]
    return None


def replay_runs(written: list[str], source: list[str]) -> Runs:
    """``written`` (a topic, the sink file) as runs over ``source`` (the file, the topic):
    [(first index, length, how far back the run starts)].

    An at-least-once copy starts again from its last committed position after a crash: a
    new run may begin at or before where the copy had got to, never after it (that would
    skip lines); ``back`` is how many lines it repeats."""
    runs: Runs = []
    furthest = 0
    position = None
    for i, line in enumerate(written):
        if position is not None and position < len(source) and source[position] == line:
            position += 1
            first, length, back = runs[-1]
            runs[-1] = (first, length + 1, back)
        else:
            # A new run: the latest occurrence of the line at or before ``furthest``.
            start = next((j for j in range(min(furthest, len(source) - 1), -1, -1)
                          if source[j] == line), None)
            assert start is not None, (
                f"line {i} ({line!r}) is not the one at or before index {furthest} of the "
                f"copied sequence: lines were skipped or made up")
            position = start + 1
            runs.append((start, 1, furthest - start))
        furthest = max(furthest, position)
    return runs


def check_copied(copy: FileCopy, expected: list[str]) -> tuple[Runs, Runs]:
    """Every line of ``expected`` in the topic and the sink file, in order; repeats only
    where a copy resumed from its last commit. Then the offsets Connect reports (KIP-875):
    the source's byte position at the end of the file, from the offsets topic; the sink's
    consumer group offset just after the last record it wrote (before a final transaction
    marker, as on Kafka)."""
    wait_until(lambda: set(lines_of(copy.sink_file)) >= set(expected), timeout=60,
               message=f"all {len(expected)} lines in the sink file")
    topic, after_last = read_topic(copy.bootstrap, copy.topic)
    sink = lines_of(copy.sink_file)
    source_runs, sink_runs = replay_runs(topic, expected), replay_runs(sink, topic)
    print(f"{copy.name}: {len(expected)} lines; topic {len(topic)} records in runs "
          f"{source_runs}; sink file {len(sink)} lines in runs {sink_runs}")
    assert list(dict.fromkeys(topic)) == expected
    assert list(dict.fromkeys(sink)) == expected
    assert source_runs[0][0] == 0 and sink_runs[0][0] == 0
    for first_line, _length, back in sink_runs[1:]:
        assert back <= 5 * RATE, f"the sink rewrote {back} lines from line {first_line}"

    first, second = copy.workers
    wait_until(lambda: connector_offsets(second, copy.source) == [
        ({"filename": str(copy.source_file)}, {"position": copy.source_file.stat().st_size})],
        timeout=30, message="the source's offset at the end of the file")
    wait_until(lambda: connector_offsets(first, copy.sink) == [
        ({"kafka_topic": copy.topic, "kafka_partition": 0}, {"kafka_offset": after_last})],
        timeout=30, message=f"the sink's committed offset at {after_last}")
    return source_runs, sink_runs


def check_configs_kept(copy: FileCopy) -> None:
    """The compacted config topic kept both connectors: both workers, one restarted, read
    the same configs back and report both connectors running."""
    for worker in copy.workers:
        assert sorted(worker.request("GET", "/connectors")) == sorted(copy.configs)
        for connector, config in copy.configs.items():
            assert worker.request("GET", f"/connectors/{connector}/config") == {
                **config, "name": connector}
            wait_until(lambda: running_on(worker, connector), timeout=30,
                       message=f"{connector} RUNNING as {worker.worker_id} reports it")


def connector_offsets(worker: ConnectWorker, connector: str) -> list[tuple[dict, dict]]:
    """``GET /connectors/<name>/offsets``: [(partition, offset)]."""
    answer = worker.request("GET", f"/connectors/{connector}/offsets")
    return [(entry["partition"], entry["offset"]) for entry in answer["offsets"]]


def check_internal_topics(bootstrap: str, group: str, replicas: int) -> None:
    """Connect created its three topics (``<group>-configs``, ``-offsets``, ``-status``):
    compacted, ``replicas`` replicas, the partitions the workers asked for."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    internal = {f"{group}-{kind}": count for kind, count in INTERNAL_PARTITIONS.items()}
    metadata = admin.list_topics(timeout=15).topics
    for topic, partitions in internal.items():
        assert topic in metadata, f"Connect did not create {topic}"
        assert len(metadata[topic].partitions) == partitions, topic
        assert all(len(p.replicas) == replicas for p in metadata[topic].partitions.values())
    resources = [ConfigResource(ConfigResource.Type.TOPIC, topic) for topic in internal]
    for resource, future in admin.describe_configs(resources).items():
        assert future.result(30)["cleanup.policy"].value == "compact", resource
