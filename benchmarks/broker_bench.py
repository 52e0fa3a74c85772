"""Broker throughput, next to baselines run in the same process tree.

1. Produce: a confluent-kafka producer (200-byte values, acks=1, linger.ms=5) into a
   pylog broker, with one partition and with four, and the same producer into
   librdkafka's built-in mock cluster. Prints msgs/s, MB/s and pylog/mock: once with
   ``produce()`` and a delivery callback per message, once with ``produce_batch()`` and
   failure-only delivery reports (no Python per message); then the same with kcat.
2. Fetch: a confluent-kafka consumer and a raw protocol reader reading a large partition
   (1 GB by default) from the beginning, next to raw loopback ``os.sendfile`` bandwidth
   of a file of the same size drained into a 1 MB buffer, and next to the same sent
   as the broker sends (its default SO_SNDBUF) and landed 32 MB at a time, as the raw
   reader lands each response; and the raw reader again, streaming each response
   through a 1 MB buffer as the sendfile baseline drains, which leaves the broker's own
   cost. Prints MB/s and the ratios.
4. Consume: the same confluent-kafka consumer reading the same messages (1000 bytes,
   ``--consume-per-partition`` in each of ``--consume-partitions``) from pylog and from
   librdkafka's mock cluster, and the ratio: once with the messages produced by librdkafka
   into both, once with the fetch section's data (1 MB batches of 1000 records, raw
   Produce).
3. The Kafka paper's producer test: 200-byte messages sent in batches of 1 and of 50
   (paper: about 50k and 400k msgs/s on its 2011 hardware).

    python benchmarks/broker_bench.py [--messages 300000] [--fetch-mb 1024]
        [--consume-per-partition 4000] [--consume-partitions 16]
        [--only produce|paper|fetch|consume]
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import confluent_kafka
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pylog.broker.config import broker_settings
from pylog.protocol import ApiKey, decode_response, encode_request
from pylog.records import build_batch, iter_batch_headers
from pylog.testing.broker import BrokerProcess

VALUE = b"v" * 200


def produce_rate(bootstrap: str, topic: str, count: int, partitions: int,
                 batched: bool = False, **extra) -> float:
    """Messages per second for ``count`` 200-byte messages, spread over ``partitions``."""
    return produce_run(bootstrap, topic, count, partitions, batched=batched, **extra)[0]


def produce_run(bootstrap: str, topic: str, count: int, partitions: int,
                broker_pid: int | None = None, batched: bool = False,
                **extra) -> tuple[float, float, float]:
    """``(msgs/s, producer thread busy, broker busy)``: the rate of :func:`produce_rate`,
    the share of the run this thread (the Python loop around ``produce()``) spent on a
    CPU, and the cores' worth the process ``broker_pid`` used meanwhile (0 without one).

    ``batched`` hands the messages to librdkafka 1000 at a time (``produce_batch``) and
    asks for delivery reports of failures only, so no Python runs per message: what is
    left paces the run from librdkafka and the broker."""
    settings = {"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5,
                "queue.buffering.max.messages": 2_000_000, **extra}
    if batched:
        settings["delivery.report.only.error"] = True
    producer = Producer(settings)
    failed = []

    def delivered(err, _msg):
        if err is not None:
            failed.append(err)

    producer.produce(topic, VALUE, partition=0)  # connect and fetch metadata first
    producer.flush(30)
    broker_cpu = process_cpu_seconds(broker_pid) if broker_pid else 0.0
    thread_cpu = time.thread_time()
    start = time.perf_counter()
    if batched:
        _produce_batches(producer, topic, count, partitions, delivered)
    else:
        for i in range(count):
            while True:
                try:
                    producer.produce(topic, VALUE, partition=i % partitions,
                                     on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.01)
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - start
    thread_cpu = time.thread_time() - thread_cpu
    if broker_pid:
        broker_cpu = process_cpu_seconds(broker_pid) - broker_cpu
    if remaining or failed:
        raise RuntimeError(f"{remaining} undelivered, {len(failed)} failed: {failed[:1]}")
    return count / elapsed, thread_cpu / elapsed, broker_cpu / elapsed


def _produce_batches(producer: Producer, topic: str, count: int, partitions: int,
                     delivered) -> None:
    """``count`` messages through ``produce_batch``, 1000 per call, round-robin over the
    partitions like the per-message loop; a message the full queue refused is retried."""
    template = [{"value": VALUE, "partition": i % partitions} for i in range(1000)]
    for start in range(0, count, len(template)):
        pending = template[:count - start]
        while producer.produce_batch(topic, pending, on_delivery=delivered) < len(pending):
            pending = [m for m in pending if m.pop("_error", None) is not None]
            producer.poll(0.01)


def process_cpu_seconds(pid: int, only: str | None = None) -> float:
    """CPU time all threads of process ``pid`` (or its thread ``only``) have used (the
    scheduler's own count, in nanoseconds, rather than the tick-sampled figure of
    ``/proc/<pid>/stat``)."""
    total = 0
    for task in [only] if only else os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as stat:
                total += int(stat.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended meanwhile
    return total / 1e9


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions)])[topic].result(30)


def mock_cluster_bootstrap() -> tuple[Producer, str]:
    """Start librdkafka's in-process mock cluster; keep the returned handle alive."""
    handle = Producer({"test.mock.num.brokers": 1})
    brokers = handle.list_topics(timeout=10).brokers
    broker = next(iter(brokers.values()))
    return handle, f"{broker.host}:{broker.port}"


class MockCluster:
    """librdkafka's mock cluster through its C API, which (unlike the Python client)
    creates topics with a given number of partitions. ``close()`` stops it."""

    def __init__(self, brokers: int = 1) -> None:
        self._lib = lib = _librdkafka()
        error = ctypes.create_string_buffer(512)
        conf = lib.rd_kafka_conf_new()
        if lib.rd_kafka_conf_set(conf, b"test.mock.num.brokers", str(brokers).encode(),
                                 error, len(error)) != 0:
            raise RuntimeError(error.value.decode())
        self._handle = lib.rd_kafka_new(0, conf, error, len(error))  # 0: a producer
        if not self._handle:
            raise RuntimeError(error.value.decode())
        self._cluster = lib.rd_kafka_handle_mock_cluster(self._handle)
        self.bootstrap = lib.rd_kafka_mock_cluster_bootstraps(self._cluster).decode()

    def create_topic(self, name: str, partitions: int) -> None:
        code = self._lib.rd_kafka_mock_topic_create(self._cluster, name.encode(), partitions, 1)
        if code != 0:
            raise RuntimeError(f"mock cluster: cannot create {name}: error {code}")

    def close(self) -> None:
        self._lib.rd_kafka_destroy(self._handle)


def _librdkafka():
    """The librdkafka that confluent-kafka loaded, with the signatures used here."""
    here = os.path.dirname(confluent_kafka.__file__)
    paths = glob.glob(os.path.join(here, "..", "confluent_kafka.libs", "librdkafka*.so*"))
    lib = ctypes.CDLL(paths[0] if paths else "librdkafka.so.1")
    pointer = ctypes.c_void_p
    lib.rd_kafka_conf_new.restype = pointer
    lib.rd_kafka_conf_set.argtypes = [pointer, ctypes.c_char_p, ctypes.c_char_p,
                                      ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_new.restype = pointer
    lib.rd_kafka_new.argtypes = [ctypes.c_int, pointer, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_handle_mock_cluster.restype = pointer
    lib.rd_kafka_handle_mock_cluster.argtypes = [pointer]
    lib.rd_kafka_mock_topic_create.argtypes = [pointer, ctypes.c_char_p, ctypes.c_int,
                                               ctypes.c_int]
    lib.rd_kafka_mock_cluster_bootstraps.restype = ctypes.c_char_p
    lib.rd_kafka_mock_cluster_bootstraps.argtypes = [pointer]
    lib.rd_kafka_destroy.argtypes = [pointer]
    return lib


def bench_produce(broker: BrokerProcess, count: int) -> None:
    print(f"\n-- produce: {count} x 200-byte values, acks=1, linger.ms=5; "
          f"{PRODUCE_RUNS} runs each, pylog and the mock alternated")
    handle, mock = mock_cluster_bootstrap()
    # First produce() per message with a delivery callback each, as most programs do;
    # then produce_batch() with failure-only reports, which leaves no Python per message
    # and so shows what the broker allows once the client's loop stops pacing the run.
    for batched, partitions in ((False, 1), (False, 4), (True, 1), (True, 4)):
        topic = f"produce-{partitions}"
        if not batched:
            create_topic(broker.bootstrap, topic, partitions)
        # The mock cluster auto-creates topics with four partitions; we use the first N.
        runs, busy = [], []
        for _ in range(PRODUCE_RUNS):
            rate, thread, broker_share = produce_run(broker.bootstrap, topic, count, partitions,
                                                     broker_pid=broker.pid, batched=batched)
            theirs, their_thread, _ = produce_run(mock, topic, count, partitions,
                                                  batched=batched)
            runs.append((rate, theirs))
            busy.append((thread, broker_share, their_thread))
        how = "produce_batch(), " if batched else ""
        _print_runs(f"{how}{partitions} partition(s)", runs,
                    lambda rate: f"{rate:,.0f} msgs/s {rate * 200 / 1e6:.1f} MB/s")
        _print_busy(busy, runs)
    del handle
    if shutil.which("kcat") is None:
        return
    # The Python loop around produce() paces the runs above (the broker is mostly idle
    # at four partitions); kcat is the same librdkafka with no Python per message. Its
    # mock cluster creates the topic with four partitions; -p -1 spreads over them.
    print(f"the same with kcat as the producer ({KCAT_MESSAGES} messages), and kcat into "
          "its own mock cluster:")
    written = []  # MB/s into pylog's log during each of its kcat runs
    for partitions in (1, 4):
        topic = f"produce-kcat-{partitions}"
        create_topic(broker.bootstrap, topic, partitions)
        which = 0 if partitions == 1 else -1
        runs = []
        for _ in range(PRODUCE_RUNS):
            before = _bytes_under(broker.log_dir)
            ours = kcat_rate(broker.bootstrap, topic, KCAT_MESSAGES, None, partition=which)
            written.append((_bytes_under(broker.log_dir) - before) / (KCAT_MESSAGES / ours) / 1e6)
            runs.append((ours, kcat_rate("x:1", topic, KCAT_MESSAGES, None,
                                         "-X", "test.mock.num.brokers=1", partition=which)))
        _print_runs(f"{partitions} partition(s)", runs, lambda rate: f"{rate:,.0f} msgs/s")
    # kcat sends faster than a disk takes data for long: the mock keeps its log in memory,
    # pylog writes it to the page cache, which past its dirty limit takes bytes only as
    # fast as the disk writes them back.
    disk = sustained_write_rate(broker.log_dir)
    print(f"  pylog wrote its log at {min(written):,.0f}-{max(written):,.0f} MB/s in these runs; "
          f"this disk takes {disk:,.0f} MB/s sustained (a plain write loop of 768 MB into the "
          "same directory, the last 512 MB timed)")


def _bytes_under(directory: Path) -> int:
    return sum(f.stat().st_size for f in Path(directory).rglob("*.log"))


def sustained_write_rate(directory: Path, megabytes: int = 768, untimed: int = 256) -> float:
    """MB/s of 1 MB ``os.write`` calls into a new file in ``directory`` once the first
    ``untimed`` MB have filled the page cache's allowance of dirty pages."""
    chunk = os.urandom(1 << 20)
    path = Path(directory) / "write-rate.tmp"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        for _ in range(untimed):
            os.write(fd, chunk)
        start = time.perf_counter()
        for _ in range(megabytes - untimed):
            os.write(fd, chunk)
        return (megabytes - untimed) / (time.perf_counter() - start)
    finally:
        os.close(fd)
        path.unlink()


def _print_busy(busy: list[tuple[float, float, float]],
                runs: list[tuple[float, float]]) -> None:
    """Which side paces the runs: a producer thread on a CPU nearly all of the run against
    both brokers, while pylog idles, is the client's limit, whatever the broker does.

    The client's ceiling is what its thread would send if it never waited for anything:
    the messages over the thread's CPU seconds (the rate over its busy share). Over the
    mock's rate in the same pair, it is the best pylog/mock any broker could reach."""
    print("  producer thread on a CPU: " + ", ".join(
        f"{ours:.0%} (mock {theirs:.0%})" for ours, _, theirs in busy) + " of each run; "
        "pylog used " + ", ".join(f"{share:.0%}" for _, share, _ in busy) + " of a core")
    print("  the client's ceiling (its messages / its thread's CPU seconds) over the mock's "
          "rate, the most a broker costing nothing would reach: " + ", ".join(
              f"{ours / thread / theirs:.2f}" for (ours, theirs), (thread, _, _) in zip(runs, busy)))


def _print_runs(what: str, runs: list[tuple[float, float]], show) -> None:
    """One line: the median pylog/mock ratio of ``runs`` (pylog, mock) and each run."""
    ratios = sorted(ours / theirs for ours, theirs in runs)
    print(f"{what}: median pylog/mock {ratios[len(ratios) // 2]:.2f}; runs: " + ", ".join(
        f"pylog {show(ours)} | mock {show(theirs)} ({ours / theirs:.2f})"
        for ours, theirs in runs))


KCAT_MESSAGES = 1_000_000
PAPER_RUNS = PRODUCE_RUNS = 3


def bench_paper(broker: BrokerProcess, count: int) -> None:
    print(f"\n-- the Kafka paper's producer test: {count} x 200-byte messages, acks=1, "
          f"{PAPER_RUNS} runs each after an uncounted warm-up, next to the same producer into "
          "the mock cluster")
    create_topic(broker.bootstrap, "paper", 1)
    mock = MockCluster()
    try:
        mock.create_topic("paper", 1)
        settings = {1: {"batch.num.messages": 1, "linger.ms": 0},
                    50: {"batch.num.messages": 50, "linger.ms": 5}}
        # Not counted: the broker's first produce requests compile its codecs.
        produce_rate(broker.bootstrap, "paper", count // 10, 1, **settings[1])
        # produce() per message with a callback each, then produce_batch() with
        # failure-only reports (no Python per message), as in the produce section.
        for batched, batch in ((False, 1), (False, 50), (True, 1), (True, 50)):
            extra = settings[batch]
            runs, busy = [], []
            for _ in range(PAPER_RUNS):
                rate, thread, broker_share = produce_run(broker.bootstrap, "paper", count, 1,
                                                         broker_pid=broker.pid,
                                                         batched=batched, **extra)
                theirs, their_thread, _ = produce_run(mock.bootstrap, "paper", count, 1,
                                                      batched=batched, **extra)
                runs.append((rate, theirs))
                busy.append((thread, broker_share, their_thread))
            paper = {1: 50_000, 50: 400_000}[batch]
            rates = sorted(ours for ours, _ in runs)
            how = "produce_batch(), " if batched else ""
            print(f"{how}batch size {batch:>2}: median {rates[len(rates) // 2]:>10,.0f} msgs/s "
                  f"(paper: about {paper:,}); runs: " + ", ".join(
                      f"{ours:,.0f} (mock {theirs:,.0f}, {ours / theirs:.2f})"
                      for ours, theirs in runs))
            _print_busy(busy, runs)
    finally:
        mock.close()
    if shutil.which("kcat") is None:
        return
    # The Python loop around confluent-kafka's produce() paces the runs above at large
    # batches (the broker idles); kcat is the same librdkafka without Python per message.
    print("the same with kcat as the producer, and kcat into its own mock cluster:")
    create_topic(broker.bootstrap, "paper-kcat", 1)
    for batch in (1, 50):
        ours = kcat_rate(broker.bootstrap, "paper-kcat", count, batch)
        theirs = kcat_rate("x:1", "paper-kcat", count, batch, "-X", "test.mock.num.brokers=1")
        print(f"batch size {batch:>2}: pylog {ours:>10,.0f} msgs/s | mock cluster "
              f"{theirs:>10,.0f} msgs/s | pylog/mock {ours / theirs:.2f}")
    # The broker's own cost per request, with next to no client work: the frames are
    # encoded before the clock starts.
    print("batch size 1 from a raw client pipelining ready-made Produce v9 frames:")
    create_topic(broker.bootstrap, "paper-raw", 1)
    mock = MockCluster()
    try:
        mock.create_topic("paper-raw", 1)
        for _ in range(3):
            ours = pipelined_produce_rate(broker.bootstrap, "paper-raw", count)
            theirs = pipelined_produce_rate(mock.bootstrap, "paper-raw", count)
            print(f"  pylog {ours:>10,.0f} requests/s | mock cluster {theirs:>10,.0f} "
                  f"requests/s | pylog/mock {ours / theirs:.2f}")
        # Latency, not throughput: what a client with one request in flight sees (the
        # broker's processor thread sleeps between requests and runs cold after each
        # wake-up; see the README).
        print("batch size 1, one request at a time from a raw client (round trip):")
        for _ in range(2):
            ours = one_at_a_time(broker.bootstrap, "paper-raw", count // 20)
            theirs = one_at_a_time(mock.bootstrap, "paper-raw", count // 20)
            print(f"  pylog p50 {ours[0]:.0f} us, p99 {ours[1]:.0f} us | mock cluster p50 "
                  f"{theirs[0]:.0f} us, p99 {theirs[1]:.0f} us | pylog/mock p50 "
                  f"{ours[0] / theirs[0]:.2f}")
    finally:
        mock.close()


def produce_frame(topic: str, partition: int, records: int, version: int = 8) -> bytes:
    """A Produce request (acks=1) of one batch of ``records`` 200-byte values."""
    batch = build_batch([(None, VALUE, (), int(time.time() * 1000))] * records)
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 30000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": batch}]}]}
    return encode_request(ApiKey.PRODUCE, version, 1, "bench", body)


def pipelined_produce_rate(bootstrap: str, topic: str, count: int) -> float:
    """Requests per second for ``count`` Produce v9 requests of one 200-byte record each,
    encoded beforehand and sent back to back on one connection by a thread while this
    one reads the answers (checking each one's error code where it sits in a v9 answer
    for one partition: after the correlation id, the header's tags, the topic count, the
    topic name, the partition count and the partition index)."""
    host, port = bootstrap.rsplit(":", 1)
    error_at = 4 + 1 + 1 + 1 + len(topic.encode()) + 1 + 4
    frames = produce_frame(topic, 0, 1, version=9) * count
    with socket.create_connection((host, int(port))) as sock:
        def send() -> None:
            view = memoryview(frames)
            for start in range(0, len(view), 1 << 16):
                sock.sendall(view[start:start + (1 << 16)])

        sender = threading.Thread(target=send)
        start = time.perf_counter()
        sender.start()
        answered, pending = 0, bytearray()
        while answered < count:
            data = sock.recv(1 << 20)
            if not data:
                raise RuntimeError(f"connection closed after {answered} answers")
            pending += data
            position = 0
            while len(pending) - position >= 4:
                size = int.from_bytes(pending[position:position + 4], "big")
                if len(pending) - position - 4 < size:
                    break
                error = int.from_bytes(pending[position + 4 + error_at:position + 6 + error_at],
                                       "big", signed=True)
                if answered == 0:  # the place of the error code, checked once
                    _, body = decode_response(ApiKey.PRODUCE, 9,
                                              bytes(pending[position + 4:position + 4 + size]))
                    if error != body["responses"][0]["partition_responses"][0]["error_code"]:
                        raise RuntimeError("the Produce answer is not laid out as expected")
                if error:
                    raise RuntimeError(f"Produce answered with error {error}")
                position += 4 + size
                answered += 1
            del pending[:position]
        elapsed = time.perf_counter() - start
        sender.join()
    return count / elapsed


def one_at_a_time(bootstrap: str, topic: str, count: int) -> tuple[float, float]:
    """Round-trip p50 and p99 in microseconds of ``count`` Produce v9 requests of one
    200-byte record sent one at a time (each waits for the answer before the next),
    after 2,000 uncounted ones. Each answer is decoded and its error code checked."""
    host, port = bootstrap.rsplit(":", 1)
    frame = produce_frame(topic, 0, 1, version=9)
    buf = bytearray(1 << 16)
    with socket.create_connection((host, int(port))) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        times = []
        for sent in range(2000 + count):
            started = time.perf_counter()
            sock.sendall(frame)
            answer = _read_frame(sock, buf)
            if sent >= 2000:
                times.append(time.perf_counter() - started)
            _, body = decode_response(ApiKey.PRODUCE, 9, answer)
            error = body["responses"][0]["partition_responses"][0]["error_code"]
            if error:
                raise RuntimeError(f"Produce answered with error {error}")
    times.sort()
    return times[len(times) // 2] * 1e6, times[int(len(times) * 0.99)] * 1e6


def kcat_rate(bootstrap: str, topic: str, count: int, batch: int | None, *mock: str,
              partition: int = 0) -> float:
    """Messages per second for ``count`` 200-byte lines written by kcat (librdkafka's C
    command-line client: no Python per message) in batches of ``batch`` (None: up to
    librdkafka's defaults, linger.ms 5), into ``partition`` (-1: spread by librdkafka's
    partitioner), from start to the last acknowledgement; ``mock`` adds kcat's options
    for its own mock cluster."""
    batching = ["-X", "linger.ms=5"] if batch is None else [
        "-X", f"batch.num.messages={batch}", "-X", f"linger.ms={0 if batch == 1 else 5}"]
    with tempfile.TemporaryFile() as lines:
        lines.write((VALUE[:199] + b"\n") * count)
        lines.seek(0)
        command = ["kcat", "-P", "-b", bootstrap, "-t", topic, "-p", str(partition),
                   "-X", "acks=1", *batching,
                   "-X", "queue.buffering.max.messages=2000000", *mock]
        start = time.perf_counter()
        subprocess.run(command, stdin=lines, check=True, stderr=subprocess.DEVNULL)
        return count / (time.perf_counter() - start)


def fill_partition(bootstrap: str, topic: str, total_bytes: int, partition: int = 0) -> int:
    """Append ~total_bytes of 1000-byte records with raw 1 MB produce requests (1 MB
    batches of 1000 identical records from ``build_batch``); returns the record count."""
    host, port = bootstrap.rsplit(":", 1)
    batch = build_batch([(None, b"r" * 1000, (), int(time.time() * 1000))] * 1000)
    records = 0
    with socket.create_connection((host, int(port))) as sock:
        reader = sock.makefile("rb")
        sent = 0
        while sent < total_bytes:
            body = {"transactional_id": None, "acks": 1, "timeout_ms": 30000, "topic_data": [
                {"name": topic, "partition_data": [{"index": partition, "records": batch}]}]}
            sock.sendall(encode_request(ApiKey.PRODUCE, 8, 1, "bench", body))
            size = int.from_bytes(reader.read(4), "big")
            reader.read(size)
            sent += len(batch)
            records += 1000
    return records


def produce_values(bootstrap: str, topic: str, count: int, size: int,
                   partitions: int = 1) -> None:
    """``count`` values of ``size`` bytes spread over ``partitions``, written by librdkafka."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5,
                         "queue.buffering.max.messages": 2_000_000,
                         "batch.size": 1 << 20})
    value = b"c" * size
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(120):
        raise RuntimeError("messages left undelivered")


# Fetch sizes for a consumer reading fast: up to 16 MB of a partition and 50 MB in all
# per Fetch (librdkafka's defaults are 1 MB and 50 MB).
LARGE_FETCHES = {"fetch.max.bytes": 50 << 20, "max.partition.fetch.bytes": 16 << 20}


def consume_rate(bootstrap: str, topic: str, records: int, partitions: int = 1,
                 fetch_sizes: dict | None = None) -> float:
    """MB/s of values read by a confluent-kafka consumer, from its ``assign`` on."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench",
                         "enable.auto.commit": False,
                         **(LARGE_FETCHES if fetch_sizes is None else fetch_sizes)})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = size = 0
    start = time.perf_counter()
    while got < records:
        # consume() waits until it has num_messages or the timeout passes: ask for no
        # more than remain, or the last call waits out its whole timeout.
        messages = consumer.consume(num_messages=min(10000, records - got), timeout=30)
        if not messages:
            raise RuntimeError(f"consumer stalled after {got} of {records} records")
        for message in messages:
            if message.error() is None:
                got += 1
                size += len(message.value())
    elapsed = time.perf_counter() - start
    consumer.close()
    return size / elapsed / 1e6


def raw_fetch_rate(bootstrap: str, topic: str, records: int) -> float:
    """MB/s of the broker's Fetch path alone: a raw protocol reader that only walks
    batch headers, so the client's per-record work does not hide the broker's speed.

    Each response lands whole in one buffer, as in librdkafka and the Java client, and
    is decoded in place (the records stay a view into it). Batch CRCs are not checked,
    as librdkafka does not by default (``check.crcs=false``): a CRC pass over every
    byte is client work. The first Fetch is not timed: it compiles the Fetch codecs on
    both ends."""
    host, port = bootstrap.rsplit(":", 1)
    buf = bytearray(80 << 20)
    with socket.create_connection((host, int(port))) as sock:
        _raw_fetch(sock, buf, topic, 0, 1)
        offset = size = 0
        start = time.perf_counter()
        while offset < records:
            data = _raw_fetch(sock, buf, topic, offset, RAW_FETCH_PARTITION_BYTES)
            last = None
            for _, last in iter_batch_headers(data, verify_crc=False):
                pass
            offset = last.base_offset + last.last_offset_delta + 1
            size += len(data)
        elapsed = time.perf_counter() - start
    return size / elapsed / 1e6


RAW_FETCH_PARTITION_BYTES = 32 << 20


def streamed_fetch_rate(bootstrap: str, topic: str, records: int,
                        landing_bytes: int = 1 << 20) -> float:
    """MB/s of the same Fetch requests as :func:`raw_fetch_rate`, each response streamed
    through a ``landing_bytes`` ring as it arrives (the baseline ``sendfile_rate`` drains
    the same way) instead of landed whole: the batch headers are read as they pass, so
    the reader still knows every batch and the next offset. What is left is the
    broker's cost, not the client's memory bandwidth."""
    host, port = bootstrap.rsplit(":", 1)
    ring = bytearray(landing_bytes)
    with socket.create_connection((host, int(port))) as sock:
        _raw_fetch(sock, bytearray(8 << 20), topic, 0, 1)  # compiles the codecs
        offset = size = 0
        start = time.perf_counter()
        while offset < records:
            sock.sendall(encode_request(ApiKey.FETCH, 11, 1, "bench", _fetch_body(
                topic, offset, RAW_FETCH_PARTITION_BYTES)))
            next_offset, received = _stream_fetch_response(sock, ring, topic, offset)
            if next_offset == offset:
                raise RuntimeError(f"Fetch at offset {offset} returned no whole batch")
            offset, size = next_offset, size + received
        elapsed = time.perf_counter() - start
    return size / elapsed / 1e6


def _stream_fetch_response(sock: socket.socket, ring: bytearray, topic: str,
                           offset: int) -> tuple[int, int]:
    """Read one Fetch v11 response of one partition through ``ring``: the offset after
    its last whole batch, and the bytes of its records."""
    name = topic.encode()
    # size, correlation id, throttle, error, session id, topics, topic name, partitions,
    # partition, error, high watermark, last stable offset, log start, aborted (count).
    head = _recv_exactly(sock, 4 + 4 + 4 + 2 + 4 + 4 + 2 + len(name) + 4 + 4 + 2 + 24 + 4)
    error, aborted = struct.unpack_from(">h", head, 32 + len(name))[0], \
        struct.unpack_from(">i", head, len(head) - 4)[0]
    if error:
        raise RuntimeError(f"Fetch at offset {offset}: error {error}")
    if aborted > 0:
        _recv_exactly(sock, 16 * aborted)
    # preferred read replica, records length
    _, length = struct.unpack(">ii", _recv_exactly(sock, 8))
    view = memoryview(ring)
    capacity = len(ring)
    got = 0  # records bytes received
    header_at = 0  # where the next batch header starts, in the records
    next_offset = offset
    while got < length:
        at = got % capacity
        # Never overwrite a header not read yet: leave room for one.
        got += sock.recv_into(view[at:min(capacity, at + length - got, at + capacity - 64)])
        while header_at + BATCH_HEAD <= got:
            head = _ring_bytes(ring, header_at, BATCH_HEAD)
            base, batch_length = struct.unpack_from(">qi", head)
            batch_end = header_at + 12 + batch_length
            if batch_end > length:  # a partial batch at the end
                header_at = length
                break
            next_offset = base + struct.unpack_from(">i", head, 23)[0] + 1
            header_at = batch_end
    return next_offset, length


BATCH_HEAD = 27  # a batch header up to and including lastOffsetDelta


def _ring_bytes(ring: bytearray, position: int, count: int) -> bytes:
    start = position % len(ring)
    if start + count <= len(ring):
        return bytes(ring[start:start + count])
    return bytes(ring[start:]) + bytes(ring[:count - (len(ring) - start)])


def _recv_exactly(sock: socket.socket, count: int) -> bytes:
    buf = bytearray(count)
    _fill(sock, memoryview(buf))
    return bytes(buf)


def _fetch_body(topic: str, offset: int, partition_max_bytes: int) -> dict:
    return {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 64 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [
                {"partition": 0, "fetch_offset": offset,
                 "partition_max_bytes": partition_max_bytes}]}]}


def _raw_fetch(sock: socket.socket, buf: bytearray, topic: str, offset: int,
               partition_max_bytes: int) -> memoryview:
    """One Fetch v11 of partition 0 from ``offset``: its records, a view into ``buf``."""
    sock.sendall(encode_request(ApiKey.FETCH, 11, 1, "bench",
                                _fetch_body(topic, offset, partition_max_bytes)))
    _, response = decode_response(ApiKey.FETCH, 11, _read_frame(sock, buf))
    partition = response["responses"][0]["partitions"][0]
    if partition["error_code"]:
        raise RuntimeError(f"Fetch at offset {offset}: error {partition['error_code']}")
    return partition["records"]


def _read_frame(sock: socket.socket, buf: bytearray) -> memoryview:
    view = memoryview(buf)
    _fill(sock, view[:4])
    length = int.from_bytes(buf[:4], "big")
    _fill(sock, view[4:4 + length])
    return view[4:4 + length]


def _fill(sock: socket.socket, view: memoryview) -> None:
    """Receive exactly ``len(view)`` bytes into ``view``."""
    got = 0
    while got < len(view):
        received = sock.recv_into(view[got:])
        if not received:
            raise RuntimeError("the broker closed the connection")
        got += received


def sendfile_rate(total_bytes: int, landing_bytes: int = 1 << 20,
                  send_buffer: int | None = None) -> float:
    """Raw loopback bandwidth: os.sendfile of a file into a TCP socket (with SO_SNDBUF
    ``send_buffer``, else the OS's), drained by a thread into a buffer of
    ``landing_bytes``, filled from its start again once full. A 1 MB buffer stays in the
    CPU cache; a Fetch client lands each whole response in memory (32 MB for the raw
    reader), and each byte then costs more to receive."""
    with tempfile.NamedTemporaryFile() as source:
        chunk = os.urandom(1 << 20)
        for _ in range(total_bytes >> 20):
            source.write(chunk)
        source.flush()
        server = socket.create_server(("127.0.0.1", 0))
        port = server.getsockname()[1]

        def drain():
            conn, _ = server.accept()
            view = memoryview(bytearray(landing_bytes))
            filled = 0
            while got := conn.recv_into(view[filled:]):
                filled = (filled + got) % landing_bytes
            conn.close()

        reader = threading.Thread(target=drain)
        reader.start()
        with socket.create_connection(("127.0.0.1", port)) as out:
            if send_buffer is not None:
                out.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
            start = time.perf_counter()
            offset, size = 0, os.fstat(source.fileno()).st_size
            while offset < size:
                offset += os.sendfile(out.fileno(), source.fileno(), offset, size - offset)
        reader.join()
        elapsed = time.perf_counter() - start
        server.close()
        return size / elapsed / 1e6


def bench_consume(broker: BrokerProcess, per_partition: int, repeat: int = 3,
                  partitions: int = 16) -> None:
    """The same consumer and the same data from pylog and from the mock cluster, for two
    data sets: records written by librdkafka, and the 1 MB batches of 1000 records that
    ``fill_partition`` writes with raw Produce requests (the fetch section's data). The
    mock keeps only the last few megabytes of each partition, so the data is spread over
    ``partitions`` partitions of a few MB each.

    Two consumer settings: librdkafka's default fetch sizes, and ``LARGE_FETCHES``. The
    mock answers a Fetch with one producer batch per partition whatever the sizes asked
    for; pylog, like Kafka, fills the response up to them. With the large sizes pylog's
    first answer holds nearly all the data (52 MB here), which the client receives whole
    before it parses any of it, while the mock's client parses one small answer as the
    next arrives. The two settings show that difference next to the broker's speed."""
    count = per_partition * partitions
    mock = MockCluster()
    try:
        for bootstrap in (broker.bootstrap, mock.bootstrap):
            if bootstrap == mock.bootstrap:
                mock.create_topic("consume", partitions)
                mock.create_topic("consume-raw", partitions)
            else:
                create_topic(bootstrap, "consume", partitions)
                create_topic(bootstrap, "consume-raw", partitions)
            produce_values(bootstrap, "consume", count, 1000, partitions)
            raw_count = sum(fill_partition(bootstrap, "consume-raw", per_partition * 1000, p)
                            for p in range(partitions))
        for topic in ("consume", "consume-raw"):
            _check_mock_kept_everything(mock.bootstrap, topic, partitions)
        print(f"\n-- consume: {count} x 1000-byte values in {partitions} partitions, "
              "written by librdkafka into each")
        _consume_pairs(broker.bootstrap, mock.bootstrap, "consume", count, repeat, partitions)
        print(f"the same consumer, {raw_count} x 1000-byte values in {partitions} "
              "partitions, written as 1 MB batches of 1000 records by raw Produce requests "
              "(fill_partition)")
        _consume_pairs(broker.bootstrap, mock.bootstrap, "consume-raw", raw_count, repeat,
                       partitions)
    finally:
        mock.close()


def _consume_pairs(ours: str, mock: str, topic: str, count: int, repeat: int,
                   partitions: int) -> None:
    settings = {"librdkafka's default fetch sizes": {},
                "16 MB per partition, 50 MB per fetch": LARGE_FETCHES}
    pairs: dict[str, list[tuple[float, float]]] = {name: [] for name in settings}
    for bootstrap in (ours, mock):
        # Not counted: the first consumer of a group makes pylog create its offsets
        # topic, and the first read of the files may come from disk.
        consume_rate(bootstrap, topic, count, partitions)
    # Alternate the two, several times: on a shared machine one pair can mislead.
    for _ in range(repeat):
        for name, sizes in settings.items():
            pairs[name].append(
                (consume_rate(ours, topic, count, partitions, sizes),
                 consume_rate(mock, topic, count, partitions, sizes)))
    for name, runs in pairs.items():
        _print_runs(f"confluent-kafka consumer, {name}", runs, lambda rate: f"{rate:.1f} MB/s")


def _check_mock_kept_everything(bootstrap: str, topic: str, partitions: int) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-check"})
    try:
        for p in range(partitions):
            low, _ = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if low > 0:
                raise RuntimeError(f"the mock cluster dropped the first {low} messages of "
                                   f"partition {p}: pass a smaller --consume-per-partition")
    finally:
        consumer.close()


def bench_fetch(broker: BrokerProcess, megabytes: int) -> None:
    print(f"\n-- fetch: a {megabytes} MB partition read from the beginning")
    raw = sendfile_rate(megabytes << 20)
    _fetch_lines(broker, megabytes, raw, _broker_send_buffer())
    # socket.send.buffer.bytes (Kafka's default, 100 KB) fixes each connection's send
    # buffer, which turns off the kernel's autotuning: the broker sends a large answer in
    # hundreds of sendfile calls, a wake-up each. -1 leaves the buffer to the kernel.
    print("the same from a broker with socket.send.buffer.bytes=-1:")
    with tempfile.TemporaryDirectory(prefix="pylog-bench-") as tmp:
        with BrokerProcess(Path(tmp), {**BENCH_BROKER, "socket.send.buffer.bytes": -1}) as tuned:
            _fetch_lines(tuned, megabytes, raw, None)


def _fetch_lines(broker: BrokerProcess, megabytes: int, raw: float,
                 send_buffer: int | None) -> None:
    """Fill a partition of ``broker`` and print what each reader gets from it next to
    raw loopback ``sendfile`` (``raw`` MB/s) and to ``sendfile`` landed as the raw reader
    lands (with SO_SNDBUF ``send_buffer``, as the broker sends)."""
    create_topic(broker.bootstrap, "fetch", 1)
    records = fill_partition(broker.bootstrap, "fetch", megabytes << 20)
    ours = consume_rate(broker.bootstrap, "fetch", records)
    wire = raw_fetch_rate(broker.bootstrap, "fetch", records)
    streamed = streamed_fetch_rate(broker.bootstrap, "fetch", records)
    landed = sendfile_rate(megabytes << 20, RAW_FETCH_PARTITION_BYTES, send_buffer)
    print(f"confluent-kafka consumer from pylog {ours:8.1f} MB/s | raw loopback sendfile "
          f"{raw:8.1f} MB/s | ratio {ours / raw:.3f}")
    print(f"raw Fetch reader from pylog         {wire:8.1f} MB/s | raw loopback sendfile "
          f"{raw:8.1f} MB/s | ratio {wire / raw:.3f}")
    print(f"raw Fetch reader from pylog         {wire:8.1f} MB/s | sent as the broker, landed "
          f"32 MB at a time {landed:8.1f} MB/s | ratio {wire / landed:.3f}")
    print(f"raw Fetch reader, streamed through 1 MB {streamed:8.1f} MB/s | raw loopback "
          f"sendfile {raw:8.1f} MB/s | ratio {streamed / raw:.3f}")


BENCH_BROKER = {"log.segment.bytes": 256 << 20, "log.retention.hours": 100000}


def _broker_send_buffer() -> int:
    """The broker's default ``socket.send.buffer.bytes`` (Kafka's), which the benchmark's
    first broker runs with."""
    return next(s.default for s in broker_settings() if s.name == "socket.send.buffer.bytes")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--fetch-mb", type=int, default=1024)
    parser.add_argument("--consume-per-partition", type=int, default=4000)
    parser.add_argument("--consume-partitions", type=int, default=16,
                        help="partitions the consume section spreads its records over")
    parser.add_argument("--repeat", type=int, default=3, help="consume runs of each")
    parser.add_argument("--only", choices=["produce", "paper", "fetch", "consume"],
                        help="run one part only")
    args, _ = parser.parse_known_args()
    # A SIGTERM (timeout, kill) unwinds the with-blocks, so the broker stops too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with tempfile.TemporaryDirectory(prefix="pylog-bench-") as tmp:
        with BrokerProcess(Path(tmp), BENCH_BROKER) as broker:
            if args.only in (None, "produce"):
                bench_produce(broker, args.messages)
            if args.only in (None, "paper"):
                bench_paper(broker, args.messages)
            if args.only in (None, "fetch"):
                bench_fetch(broker, args.fetch_mb)
            if args.only in (None, "consume"):
                bench_consume(broker, args.consume_per_partition, args.repeat,
                              args.consume_partitions)
    return 0


if __name__ == "__main__":
    sys.exit(main())
