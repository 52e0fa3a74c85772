"""pylog next to Apache Kafka 4.4 on this machine: the same clients, the same run.

Starts one pylog broker and one Apache Kafka 4.4 node (KRaft, combined controller and
broker) side by side, or with ``--three`` three of each (pylog on ZooKeeper, Kafka a
three-voter quorum) with every topic at replication factor 3, min.insync.replicas 2 and
every producer at acks=all. Then, for each partition count of ``--partitions``, the same
work against each, pylog and Kafka taking turns:

1. Produce ``--records`` 100-byte values with confluent-kafka (librdkafka; acks=1, then
   acks=all into the same topic; ``produce_batch``, linger.ms=5) and with Kafka's own
   ``org.apache.kafka.tools.ProducerPerformance`` (acks=1; its defaults otherwise).
2. Consume them again: confluent-kafka (assign from the beginning, no group) and
   ``org.apache.kafka.tools.ConsumerPerformance`` (a consumer group; its fetch-phase
   rate, which leaves out the group join).
3. End-to-end latency, average, p50 and p99, with ``org.apache.kafka.tools.EndToEndLatency``
   (``--latency-records`` round trips, one at a time; it prints percentiles in whole ms).

Then many connections: ``--connections`` clients (default 500) connected at once, each
sending ``--requests`` Produce requests of one 10-record batch (acks=1; acks=all with
``--three``) to a 10-partition topic, four in flight per connection, from one selector
loop in this process; records/s, the requests' p50 and p99 latency, and the brokers' CPU.

Each figure is printed with pylog/Kafka, the CPU seconds the broker processes used during
it (``/proc/<pid>/stat`` utime+stime of each broker and its descendants, plus the children
it reaped) and records per broker-CPU-second, whose ratio is the goal (pylog at least 1.0
of Kafka per CPU second on one broker). Kafka runs with the JVM options of its own start
script (G1, full JIT; not the test harness's start-up-tuned C1-only ones) and a 1 GB heap.
Clients run on the same cores as the brokers, so rates are of the whole machine; the
records per broker-CPU-second are the brokers' own. The machine is shared, so single runs
vary by tens of percent; ``--rounds N`` prints the median of N alternating runs. CPU is
counted in clock ticks (10 ms): pylog's 0.1 s figures are good to about 10%.

    python benchmarks/kafka_peer_bench.py [--records 1000000] [--partitions 1,100]
        [--latency-records 2000] [--rounds 1] [--three] [--connections 500] [--requests 40]
"""

from __future__ import annotations

import argparse
import os
import re
import selectors
import shlex
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pylog.protocol import ApiKey, encode_request
from pylog.records import build_batch
from pylog.testing import apache_kafka
from pylog.testing.apache_kafka import ApacheKafkaCluster
from pylog.testing.broker import BrokerProcess
from pylog.testing.process import descendants, running_in_temp_dir
from pylog.testing.zookeeper import running_zookeeper

VALUE = b"v" * 100
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
TOOLS = "org.apache.kafka.tools."
TOOL_JVM = ("-Xmx512m", "-XX:+UseG1GC", "-Djava.awt.headless=true",
            "-Dlog4j2.level=WARN")
# What kafka-server-start.sh / kafka-run-class.sh give the broker (KAFKA_HEAP_OPTS aside).
KAFKA_JVM = ("-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
             "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
             "-Djava.awt.headless=true")
SIDES = ("pylog", "kafka")


# -- CPU accounting ---------------------------------------------------------------------


def cpu_seconds(pids: list[int]) -> float:
    """utime+stime of each process in ``pids`` and of every live descendant, plus the
    cutime+cstime of children already reaped (``/proc/<pid>/stat``, clock ticks)."""
    ticks = 0
    for pid in pids:
        for member in [pid, *descendants(pid)]:
            try:
                with open(f"/proc/{member}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue  # ended meanwhile
            # fields[0] is field 3 (state): utime 14, stime 15, cutime 16, cstime 17
            ticks += sum(int(f) for f in fields[11:15])
    return ticks / CLOCK_TICKS


@dataclass
class Measurement:
    """One figure on one side: ``rate`` in the figure's unit, ``records`` the work done,
    ``cpu`` the brokers' CPU seconds meanwhile."""

    rate: float
    records: int
    cpu: float

    @property
    def per_cpu(self) -> float:
        return self.records / self.cpu if self.cpu > 0 else float("inf")


# -- the two systems --------------------------------------------------------------------


class TunedKafkaCluster(ApacheKafkaCluster):
    """ApacheKafkaCluster with the JVM options of Kafka's start script instead of the
    test harness's (C1 only, serial GC: quick to start, slow to run)."""

    def _java(self, node, main_class: str, *args: str) -> list[str]:
        argv = super()._java(node, main_class, *args)
        keep = [a for a in argv if a not in apache_kafka.JVM_OPTIONS]
        return [keep[0], *KAFKA_JVM, *keep[1:]]


@dataclass
class System:
    """A running pylog or Kafka cluster as the benchmark sees it."""

    name: str
    bootstrap: str
    pids: Callable[[], list[int]]
    replication: int

    def cpu(self) -> float:
        return cpu_seconds(self.pids())


@contextmanager
def running_pylog(base: Path, three: bool) -> Iterator[System]:
    with ExitStack() as stack:
        if not three:
            broker = stack.enter_context(BrokerProcess(base / "pylog"))
            yield System("pylog", broker.bootstrap, lambda: [broker.pid], 1)
            return
        zookeeper = stack.enter_context(running_zookeeper(base))
        brokers = [BrokerProcess(base / f"pylog-{i}", {
            "broker.id": i, "zookeeper.connect": zookeeper.connect_string,
            "auto.leader.rebalance.enable": "false"}) for i in (1, 2, 3)]
        for broker in brokers:
            stack.callback(broker.stop)
            broker.launch()
        for broker in brokers:
            broker.wait_listening()
        system = System("pylog", ",".join(b.bootstrap for b in brokers),
                        lambda: [b.pid for b in brokers], 3)
        wait_for_brokers(system.bootstrap, 3)
        yield system


@contextmanager
def running_apache_kafka(base: Path, three: bool) -> Iterator[System]:
    nodes = 3 if three else 1
    make = lambda work_dir: TunedKafkaCluster(work_dir, nodes=nodes, heap="1g")  # noqa: E731
    with running_in_temp_dir(make, "pylog-kafka-", base,
                             finish=lambda cluster: cluster.kill()) as cluster:
        yield System("kafka", cluster.bootstrap,
                     lambda: [p.pid for p in cluster.processes.values()], nodes)


def wait_for_brokers(bootstrap: str, count: int, timeout: float = 60) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    while len(admin.list_topics(timeout=10).brokers) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"fewer than {count} brokers registered at {bootstrap}")
        time.sleep(0.5)


def create_topic(system: System, topic: str, partitions: int, timeout: float = 120) -> None:
    """Create ``topic`` and wait until every partition has a leader and a full ISR."""
    admin = AdminClient({"bootstrap.servers": system.bootstrap})
    configs = {"min.insync.replicas": "2"} if system.replication > 1 else {}
    admin.create_topics([NewTopic(topic, num_partitions=partitions,
                                  replication_factor=system.replication,
                                  config=configs)])[topic].result(timeout)
    deadline = time.monotonic() + timeout
    while True:
        found = admin.list_topics(topic, timeout=10).topics.get(topic)
        if (found is not None and found.error is None and len(found.partitions) == partitions
                and all(p.leader >= 0 and len(p.isrs) == system.replication
                        for p in found.partitions.values())):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{system.name}: {topic} not fully in sync after {timeout:.0f}s")
        time.sleep(0.2)


# -- confluent-kafka --------------------------------------------------------------------


def confluent_produce(system: System, topic: str, records: int, partitions: int,
                      acks: str) -> Measurement:
    """``records`` values round-robin over the partitions, 1000 per ``produce_batch``,
    delivery reports for failures only (no Python per record)."""
    producer = Producer({"bootstrap.servers": system.bootstrap, "acks": acks, "linger.ms": 5,
                         "queue.buffering.max.messages": 2_000_000,
                         "delivery.report.only.error": True})
    failed: list = []
    producer.produce(topic, VALUE, partition=0)  # connect and fetch metadata first
    producer.flush(30)
    template = [{"value": VALUE, "partition": i % partitions} for i in range(1000)]
    cpu = system.cpu()
    start = time.perf_counter()
    for first in range(0, records, len(template)):
        pending = [dict(m) for m in template[:records - first]]
        while producer.produce_batch(topic, pending,
                                     on_delivery=lambda err, _m: failed.append(err)) < len(pending):
            pending = [m for m in pending if m.pop("_error", None) is not None]
            producer.poll(0.01)
    remaining = producer.flush(300)
    elapsed = time.perf_counter() - start
    cpu = system.cpu() - cpu
    if remaining or failed:
        raise RuntimeError(f"{system.name}: {remaining} undelivered, {len(failed)} failed: "
                           f"{failed[:1]}")
    return Measurement(records / elapsed, records, cpu)


def confluent_consume(system: System, topic: str, records: int, partitions: int,
                      **settings: object) -> Measurement:
    """confluent-kafka reading ``records`` from the start. With librdkafka's defaults a
    partition whose local queue holds ``queued.min.messages`` (100,000) is not fetched
    for ``fetch.queue.backoff.ms`` (1 s), so a fast reader's rate is mostly those pauses;
    ``fetch.queue.backoff.ms=10`` in ``settings`` leaves the round trips."""
    consumer = Consumer({"bootstrap.servers": system.bootstrap,
                         "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "enable.partition.eof": False,
                         "log_level": 3,  # errors only: no line per partition reset
                         **settings})
    try:
        cpu = system.cpu()
        start = time.perf_counter()
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        count, deadline = 0, time.monotonic() + 300
        while count < records:
            for message in consumer.consume(10_000, timeout=1.0):
                if message.error() is not None:
                    raise RuntimeError(f"{system.name}: {message.error()}")
                count += 1
            if time.monotonic() > deadline:
                raise RuntimeError(f"{system.name}: {count} of {records} consumed in 300 s")
        elapsed = time.perf_counter() - start
        return Measurement(count / elapsed, count, system.cpu() - cpu)
    finally:
        consumer.close()


# -- many connections -----------------------------------------------------------------------

IN_FLIGHT = 4  # Produce requests each connection keeps outstanding
BATCH_RECORDS = 10


def many_connections(system: System, topic: str, connections: int, requests: int,
                     partitions: int, acks: int) -> tuple[Measurement, float, float]:
    """``connections`` sockets at once, each sending ``requests`` Produce requests (one
    ``BATCH_RECORDS``-record batch each) with ``IN_FLIGHT`` outstanding; returns records/s
    with the brokers' CPU, and the requests' p50 and p99 latency in ms. Every response is
    read; an error code in one fails the figure."""
    addresses = [tuple(a.rsplit(":", 1)) for a in system.bootstrap.split(",")]
    leaders = partition_leaders(system, topic)
    batch = build_batch([(None, VALUE, (), int(time.time() * 1000))] * BATCH_RECORDS)
    selector = selectors.DefaultSelector()
    states = []
    for index in range(connections):
        partition = index % partitions
        host, port = addresses[leaders.get(partition, 0) % len(addresses)] \
            if system.replication > 1 else addresses[0]
        sock = socket.create_connection((host, int(port)))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        frame = encode_request(ApiKey.PRODUCE, 7, index, f"conn-{index}", {
            "transactional_id": None, "acks": acks, "timeout_ms": 30000, "topic_data": [
                {"name": topic, "partition_data": [{"index": partition, "records": batch}]}]})
        state = {"sock": sock, "frame": frame, "sent": 0, "answered": 0, "out": b"",
                 "inbuf": bytearray(), "times": []}
        states.append(state)
        selector.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE, state)
    latencies: list[float] = []
    done = 0
    cpu = system.cpu()
    start = time.perf_counter()
    while done < connections:
        for key, events in selector.select(timeout=30):
            state = key.data
            sock = state["sock"]
            if events & selectors.EVENT_WRITE:
                while (state["sent"] < requests and state["sent"] - state["answered"] < IN_FLIGHT
                       and not state["out"]):
                    state["out"] = state["frame"]
                    state["sent"] += 1
                    state["times"].append(time.perf_counter())
                if state["out"]:
                    sent = sock.send(state["out"])
                    state["out"] = state["out"][sent:]
            if events & selectors.EVENT_READ:
                chunk = sock.recv(1 << 16)
                if not chunk:
                    raise RuntimeError(f"{system.name} closed a connection")
                inbuf = state["inbuf"]
                inbuf += chunk
                while len(inbuf) >= 4:
                    size = struct.unpack_from(">i", inbuf)[0]
                    if len(inbuf) < 4 + size:
                        break
                    frame = bytes(inbuf[4:4 + size])
                    del inbuf[:4 + size]
                    check_produce_response(system, frame)
                    latencies.append(time.perf_counter() - state["times"][state["answered"]])
                    state["answered"] += 1
                    if state["answered"] == requests:
                        selector.unregister(sock)
                        done += 1
                        break
            if state["answered"] < requests:
                wanted = selectors.EVENT_READ | (
                    selectors.EVENT_WRITE if state["out"] or (
                        state["sent"] < requests
                        and state["sent"] - state["answered"] < IN_FLIGHT) else 0)
                selector.modify(sock, wanted, state)
    elapsed = time.perf_counter() - start
    cpu = system.cpu() - cpu
    for state in states:
        state["sock"].close()
    selector.close()
    latencies.sort()
    records = connections * requests * BATCH_RECORDS
    return (Measurement(records / elapsed, records, cpu),
            latencies[len(latencies) // 2] * 1000, latencies[int(len(latencies) * 0.99)] * 1000)


def check_produce_response(system: System, frame: bytes) -> None:
    """The partition error code of a Produce v7 response (correlation id, one topic, one
    partition): 0, else the figure fails."""
    position = 4  # correlation id
    topics = struct.unpack_from(">i", frame, position)[0]
    position += 4
    name_length = struct.unpack_from(">h", frame, position)[0]
    position += 2 + name_length + 4  # the name, the partition count
    error = struct.unpack_from(">h", frame, position + 4)[0]  # after the partition index
    if topics != 1 or error != 0:
        raise RuntimeError(f"{system.name}: a Produce failed with error {error}")


def partition_leaders(system: System, topic: str) -> dict[int, int]:
    """Partition -> the index of its leader's address in the bootstrap list."""
    metadata = AdminClient({"bootstrap.servers": system.bootstrap}).list_topics(topic, timeout=30)
    ports = [int(a.rsplit(":", 1)[1]) for a in system.bootstrap.split(",")]
    brokers = {b.id: ports.index(b.port) for b in metadata.brokers.values() if b.port in ports}
    return {p.id: brokers.get(p.leader, 0) for p in metadata.topics[topic].partitions.values()}


def bench_connections(systems: dict[str, System], connections: int, requests: int,
                      three: bool) -> None:
    partitions, acks = 10, (-1 if three else 1)
    topic = f"bench-conns-{uuid.uuid4().hex[:6]}"
    results, latency, errors = {}, {}, {}
    for name, system in systems.items():
        create_topic(system, topic, partitions)
        try:
            results[name], *latency[name] = many_connections(system, topic, connections,
                                                             requests, partitions, acks)
        except Exception as exc:  # noqa: BLE001
            errors[name] = str(exc).strip()
    print_row(f"produce, {connections} connections", partitions, results.get("pylog"),
              results.get("kafka"), errors)
    for index, label in ((0, "p50"), (1, "p99")):
        sides = {n: f"{v[index]:.1f} ms" for n, v in latency.items()}
        ratio = (f"{latency['pylog'][index] / latency['kafka'][index]:6.2f}"
                 if len(latency) == 2 else "     -")
        print(f"{f'  request latency {label}':<34} {partitions:>5} "
              f"{sides.get('pylog', 'FAILED'):>11} {sides.get('kafka', 'FAILED'):>11} {ratio} |",
              flush=True)
    for system in systems.values():
        delete_topics(system, [topic])


# -- Kafka's own tools --------------------------------------------------------------------


class ToolFailed(RuntimeError):
    """A Java tool exited non-zero or printed no result line (the output's tail is kept)."""


def run_tool(system: System, main_class: str, *args: str,
             timeout: float = 600) -> tuple[str, float]:
    """Run one of Kafka's tools; its output and the brokers' CPU seconds meanwhile."""
    argv = ["java", *TOOL_JVM, "-cp", apache_kafka.kafka_classpath(), TOOLS + main_class, *args]
    cpu = system.cpu()
    done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)
    cpu = system.cpu() - cpu
    if done.returncode != 0:
        raise ToolFailed(f"{main_class} against {system.name} exited {done.returncode}:\n"
                         + "\n".join(done.stdout.splitlines()[-25:]))
    return done.stdout, cpu


def producer_performance(system: System, topic: str, records: int, acks: str) -> Measurement:
    output, cpu = run_tool(system, "ProducerPerformance", "--bootstrap-server", system.bootstrap,
                           "--topic", topic, "--num-records", str(records), "--record-size",
                           str(len(VALUE)), "--throughput", "-1", "--command-property",
                           f"acks={acks}")
    found = re.search(r"^(\d+) records sent, ([\d.]+) records/sec", output, re.M)
    if found is None:
        raise ToolFailed(f"ProducerPerformance against {system.name}: no summary line:\n"
                         + output[-3000:])
    return Measurement(float(found.group(2)), int(found.group(1)), cpu)


def consumer_performance(system: System, topic: str, records: int) -> Measurement:
    """The fetch phase's records/s (``fetch.nMsg.sec``: after the group join)."""
    output, cpu = run_tool(system, "ConsumerPerformance", "--bootstrap-server", system.bootstrap,
                           "--topic", topic, "--num-records", str(records), "--timeout", "30000",
                           "--group", f"perf-{uuid.uuid4().hex[:8]}")
    lines = [line for line in output.splitlines() if re.match(r"^\d{4}-\d\d-\d\d ", line)]
    if not lines:
        raise ToolFailed(f"ConsumerPerformance against {system.name}: no result line:\n"
                         + output[-3000:])
    fields = [f.strip() for f in lines[-1].split(",")]
    consumed, fetch_rate = int(fields[4]), float(fields[9])
    if consumed < records:
        raise ToolFailed(f"ConsumerPerformance against {system.name}: {consumed} of {records} "
                         f"records:\n" + output[-3000:])
    return Measurement(fetch_rate, consumed, cpu)


def end_to_end_latency(system: System, topic: str, records: int,
                       acks: str) -> tuple[float, float, float, float]:
    """``(average, p50, p99 in ms, broker CPU seconds)`` of produce-then-consume round trips,
    one record at a time (the tool prints its percentiles in whole milliseconds)."""
    output, cpu = run_tool(system, "EndToEndLatency", "--bootstrap-server", system.bootstrap,
                           "--topic", topic, "--num-records", str(records), "--producer-acks",
                           acks, "--record-size", str(len(VALUE)))
    average = re.search(r"Avg latency: ([\d.]+) ms", output)
    found = re.search(r"50th = (\d+), 99th = (\d+)", output)
    if average is None or found is None:
        raise ToolFailed(f"EndToEndLatency against {system.name}: no latencies:\n"
                         + output[-3000:])
    return float(average.group(1)), float(found.group(1)), float(found.group(2)), cpu


# -- the report ---------------------------------------------------------------------------


HEADER = (f"{'figure':<34} {'P':>5} {'pylog':>11} {'kafka':>11} {'ratio':>6} | "
          f"{'cpu pylog':>9} {'cpu kafka':>9} | {'rec/cpu-s pylog':>15} {'kafka':>11} {'ratio':>6}")


def print_row(figure: str, partitions: int, pylog: Measurement | None,
              kafka: Measurement | None, errors: dict[str, str]) -> None:
    def cell(m: Measurement | None, name: str, value: Callable[[Measurement], str]) -> str:
        return value(m) if m is not None else ("FAILED" if name in errors else "-")

    rate = lambda m: f"{m.rate:,.0f}"  # noqa: E731
    ratio = (f"{pylog.rate / kafka.rate:6.2f}" if pylog and kafka else "     -")
    cpu_ratio = (f"{pylog.per_cpu / kafka.per_cpu:6.2f}" if pylog and kafka else "     -")
    print(f"{figure:<34} {partitions:>5} {cell(pylog, 'pylog', rate):>11} "
          f"{cell(kafka, 'kafka', rate):>11} {ratio} | "
          f"{cell(pylog, 'pylog', lambda m: f'{m.cpu:.2f}'):>9} "
          f"{cell(kafka, 'kafka', lambda m: f'{m.cpu:.2f}'):>9} | "
          f"{cell(pylog, 'pylog', lambda m: f'{m.per_cpu:,.0f}'):>15} "
          f"{cell(kafka, 'kafka', lambda m: f'{m.per_cpu:,.0f}'):>11} {cpu_ratio}", flush=True)
    for name, error in errors.items():
        print(f"    {name} FAILED: {error}", flush=True)


def both(systems: dict[str, System], run: Callable[[System], Measurement], rounds: int
         ) -> tuple[dict[str, Measurement], dict[str, str]]:
    """``run`` against pylog, then Kafka, ``rounds`` times; the median run (by rate) of each
    side. A failure on one side is kept for the table, not raised."""
    runs: dict[str, list[Measurement]] = {name: [] for name in SIDES}
    errors: dict[str, str] = {}
    for _ in range(rounds):
        for name in SIDES:
            if name in errors:
                continue
            try:
                runs[name].append(run(systems[name]))
            except Exception as exc:  # noqa: BLE001 -- reported in the table, the run goes on
                errors[name] = str(exc).strip()
    medians = {name: sorted(found, key=lambda m: m.rate)[(len(found) - 1) // 2]
               for name, found in runs.items() if found}
    return medians, errors


def bench_partitions(systems: dict[str, System], partitions: int, records: int,
                     latency_records: int, three: bool, rounds: int) -> None:
    tag = uuid.uuid4().hex[:6]
    # Few topics, deleted afterwards: pylog holds several descriptors per partition, and
    # thousands of partitions at once reach the usual 20,000 open-file limit.
    topics = {kind: f"bench-{kind}-p{partitions}-{tag}" for kind in ("cf", "pp", "e2e")}
    for system in systems.values():
        for topic in topics.values():
            create_topic(system, topic, partitions)
    acks_list = ("all",) if three else ("1", "all")
    for acks in acks_list:
        topic = topics["cf"]
        results, errors = both(systems, lambda s: confluent_produce(s, topic, records,
                                                                    partitions, acks), rounds)
        print_row(f"produce confluent acks={acks}", partitions,
                  results.get("pylog"), results.get("kafka"), errors)
    pp_acks = "all" if three else "1"
    results, errors = both(systems, lambda s: producer_performance(s, topics["pp"], records,
                                                                   pp_acks), rounds)
    print_row(f"produce ProducerPerf acks={pp_acks}", partitions,
              results.get("pylog"), results.get("kafka"), errors)
    results, errors = both(systems, lambda s: confluent_consume(s, topics["cf"], records,
                                                                partitions),
                           rounds)
    print_row("consume confluent", partitions,
              results.get("pylog"), results.get("kafka"), errors)
    results, errors = both(systems, lambda s: confluent_consume(
        s, topics["cf"], records, partitions, **{"fetch.queue.backoff.ms": 10}), rounds)
    print_row("consume confluent, backoff 10 ms", partitions,
              results.get("pylog"), results.get("kafka"), errors)
    results, errors = both(systems, lambda s: consumer_performance(s, topics["pp"], records),
                           rounds)
    print_row("consume ConsumerPerf (fetch phase)", partitions,
              results.get("pylog"), results.get("kafka"), errors)
    latency, latency_errors = {}, {}
    for name in SIDES:
        try:
            latency[name] = end_to_end_latency(systems[name], topics["e2e"], latency_records,
                                               pp_acks)
        except Exception as exc:  # noqa: BLE001
            latency_errors[name] = str(exc).strip()
    for index, label in ((0, "avg"), (1, "p50"), (2, "p99")):
        sides = {n: f"{v[index]:.2f} ms" for n, v in latency.items()}
        ratio = (f"{latency['pylog'][index] / latency['kafka'][index]:6.2f}"
                 if len(latency) == 2 and latency["kafka"][index] > 0 else "     -")
        cpu = {n: f"{v[3]:.2f}" for n, v in latency.items()} if index == 0 else {}
        print(f"{f'e2e latency {label} ({latency_records} msgs)':<34} {partitions:>5} "
              f"{sides.get('pylog', 'FAILED'):>11} {sides.get('kafka', 'FAILED'):>11} {ratio} | "
              f"{cpu.get('pylog', ''):>9} {cpu.get('kafka', ''):>9} |", flush=True)
    for name, error in latency_errors.items():
        print(f"    {name} FAILED: {error}", flush=True)
    for system in systems.values():
        delete_topics(system, list(topics.values()))


def delete_topics(system: System, topics: list[str]) -> None:
    """Best effort: a topic left behind only costs the next figures some descriptors."""
    admin = AdminClient({"bootstrap.servers": system.bootstrap})
    for topic, future in admin.delete_topics(topics, operation_timeout=60).items():
        try:
            future.result(90)
        except Exception as exc:  # noqa: BLE001
            print(f"    {system.name}: deleting {topic} failed: {exc}", flush=True)


def warm_up(systems: dict[str, System], records: int) -> None:
    """Produce and consume once, untimed, on each side: the JVM's JIT compiles Kafka's hot
    paths during the first seconds of load, which would otherwise count against it."""
    for system in systems.values():
        topic = f"bench-warm-up-{uuid.uuid4().hex[:6]}"
        create_topic(system, topic, 1)
        confluent_produce(system, topic, records, 1, "1")
        confluent_consume(system, topic, records, 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000,
                        help="records per produce and consume figure")
    parser.add_argument("--partitions", default="1,100",
                        help="comma-separated partition counts (e.g. 1,100,1000)")
    parser.add_argument("--latency-records", type=int, default=2000,
                        help="round trips for EndToEndLatency")
    parser.add_argument("--rounds", type=int, default=1,
                        help="runs of each throughput figure, pylog and Kafka alternating; "
                             "the median is printed")
    parser.add_argument("--three", action="store_true",
                        help="3 brokers of each, RF 3, min.insync.replicas 2, acks=all")
    parser.add_argument("--connections", type=int, default=500,
                        help="clients connected at once for the many-connections figure "
                             "(0: skip it)")
    parser.add_argument("--requests", type=int, default=40,
                        help="Produce requests each of those connections sends")
    args = parser.parse_args()
    counts = [int(p) for p in args.partitions.split(",")]
    started = time.monotonic()
    print(f"{' '.join(shlex.quote(a) for a in [sys.executable, *sys.argv])}")
    print(f"{os.cpu_count()} cores; {args.records:,} x {len(VALUE)}-byte records per figure; "
          f"{'3 brokers each, RF 3, acks=all' if args.three else 'one broker each, RF 1'}")
    with tempfile.TemporaryDirectory(prefix="pylog-peer-bench-") as tmp, ExitStack() as stack:
        base = Path(tmp)
        systems = {"pylog": stack.enter_context(running_pylog(base, args.three)),
                   "kafka": stack.enter_context(running_apache_kafka(base, args.three))}
        warm_up(systems, min(args.records, 200_000))
        print(f"brokers up after {time.monotonic() - started:.0f} s; rates in records/s, "
              f"ratio = pylog/kafka; cpu = broker CPU seconds during the figure\n")
        print(HEADER)
        for partitions in counts:
            bench_partitions(systems, partitions, args.records, args.latency_records,
                             args.three, args.rounds)
        if args.connections:
            bench_connections(systems, args.connections, args.requests, args.three)
    print(f"\ntotal {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
