"""The broker at scale, next to librdkafka's mock cluster in the same run.

    python benchmarks/scale_broker_bench.py [--messages 200000] [--idle 1000]
        [--only partitions|connections|cost|latency]

(``scale_bench.py`` measures the loader at scale; this one, the broker.)

1. **partitions** -- a confluent-kafka producer (200-byte values, acks=1, linger.ms=5)
   spreading ``--messages`` round robin over 1, 10, 100 and 1,000 partitions of one
   topic, into pylog and into the mock cluster (a topic with as many partitions).
2. **connections** -- 1, 10 and 100 raw connections, each keeping ``IN_FLIGHT`` Produce
   requests (acks=1, a batch of 100 x 200-byte records) in flight, into a topic of ten
   partitions of pylog and of the mock cluster. The requests are built once, so the
   client costs little more than its sockets.
3. **cost** -- the CPU one Produce request costs the broker (pylog's process; the mock
   cluster's threads, which run in the benchmark's process), on one connection, with
   requests of 1 and of 100 records and 1, 4, 16 and 64 of them in flight: how much a
   request costs on its own and how much reading many per wake-up saves.
4. **latency** -- ``--idle`` raw connections each long-polling (Fetch, max_wait 30 s) a
   partition of an idle topic, while one producer writes one record at a time to
   another topic and one consumer long-polls it: the time from sending the Produce to
   receiving the Fetch response holding its record, p50 and p99, against pylog without
   the idle polls. (The mock cluster answers a long poll only at its max_wait, whatever
   is appended meanwhile, so it is no baseline for this one.)

Every figure is printed with its ratio to its baseline in the same run. Asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import selectors
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from broker_bench import (MockCluster, _read_frame, create_topic, process_cpu_seconds,
                          produce_frame, produce_rate)

from pylog.protocol import ApiKey, decode_response, encode_request
from pylog.testing.broker import BrokerProcess

PARTITION_COUNTS = (1, 10, 100, 1000)
CONNECTION_COUNTS = (1, 10, 100)
IN_FLIGHT = 4
BATCH_RECORDS = 100
PRODUCE_VERSION = 8
FETCH_VERSION = 11


def fetch_frame(topic: str, partition: int, offset: int, max_wait_ms: int) -> bytes:
    body = {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1,
            "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0,
            "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
                {"partition": partition, "fetch_offset": offset,
                 "partition_max_bytes": 1 << 20}]}]}
    return encode_request(ApiKey.FETCH, FETCH_VERSION, 1, "bench", body)


def _connect(bootstrap: str) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def raw_produce_rate(bootstrap: str, topic: str, partitions: int, connections: int,
                     messages: int, in_flight: int = IN_FLIGHT,
                     records: int = BATCH_RECORDS) -> float:
    """Messages per second through ``connections`` sockets, ``in_flight`` requests of
    ``records`` records each."""
    frames = [produce_frame(topic, p, records, PRODUCE_VERSION) for p in range(partitions)]
    requests = max(messages // records, connections)
    socks = [_connect(bootstrap) for _ in range(connections)]
    selector = selectors.DefaultSelector()
    state = {}
    for i, sock in enumerate(socks):
        share = requests // connections + (i < requests % connections)
        state[sock] = [frames[i % partitions], share, 0, bytearray()]  # frame, left, in flight
        selector.register(sock, selectors.EVENT_READ)
    done = 0
    start = time.perf_counter()
    for sock, entry in state.items():
        while entry[1] and entry[2] < in_flight:
            sock.sendall(entry[0])
            entry[1] -= 1
            entry[2] += 1
    while done < requests:
        for key, _ in selector.select(30):
            sock = key.fileobj
            entry = state[sock]
            chunk = sock.recv(1 << 20)
            if not chunk:
                raise RuntimeError("the broker closed a producing connection")
            buf = entry[3]
            buf += chunk
            while len(buf) >= 4:
                size = int.from_bytes(buf[:4], "big")
                if len(buf) < 4 + size:
                    break
                _, body = decode_response(ApiKey.PRODUCE, PRODUCE_VERSION, bytes(buf[4:4 + size]))
                error = body["responses"][0]["partition_responses"][0]["error_code"]
                if error:
                    raise RuntimeError(f"produce failed with error {error}")
                del buf[:4 + size]
                done += 1
                entry[2] -= 1
                if entry[1]:
                    sock.sendall(entry[0])
                    entry[1] -= 1
                    entry[2] += 1
    elapsed = time.perf_counter() - start
    for sock in socks:
        selector.unregister(sock)
        sock.close()
    return requests * records / elapsed


def fetch_latency(bootstrap: str, idle_topic: str, idle_partitions: int, idle: int,
                  live_topic: str, samples: int) -> tuple[float, float]:
    """(p50, p99) seconds from a Produce being sent to a long-polling consumer holding
    its record, with ``idle`` other long polls parked on ``idle_topic``."""
    parked = [_connect(bootstrap) for _ in range(idle)]
    for i, sock in enumerate(parked):
        sock.sendall(fetch_frame(idle_topic, i % idle_partitions, 0, 30000))
    time.sleep(1.0 + idle / 1000)  # let them park
    producer, consumer = _connect(bootstrap), _connect(bootstrap)
    frame = produce_frame(live_topic, 0, 1, PRODUCE_VERSION)
    buf = bytearray(4 << 20)
    latencies = []
    offset = 0
    try:
        while len(latencies) < samples:
            consumer.sendall(fetch_frame(live_topic, 0, offset, 5000))
            time.sleep(0.003)  # parked before the record is written
            sent = time.perf_counter()
            producer.sendall(frame)
            while True:  # until a response holds the record (an empty one: ask again)
                payload = _read_frame(consumer, buf)
                _, body = decode_response(ApiKey.FETCH, FETCH_VERSION, payload)
                partition = body["responses"][0]["partitions"][0]
                if partition["error_code"]:
                    raise RuntimeError(f"fetch failed with error {partition['error_code']}")
                if partition["records"] is not None and len(partition["records"]):
                    break
                if time.perf_counter() - sent > 30:
                    raise RuntimeError("no record 30 s after it was produced")
                consumer.sendall(fetch_frame(live_topic, 0, offset, 5000))
            latencies.append(time.perf_counter() - sent)
            _read_frame(producer, buf)
            offset += 1
    finally:
        for sock in parked + [producer, consumer]:
            sock.close()
    latencies.sort()
    return statistics.median(latencies), latencies[min(len(latencies) - 1,
                                                       int(len(latencies) * 0.99))]


def bench_partitions(broker: BrokerProcess, mock: MockCluster, messages: int) -> None:
    """Each topic is written twice: first fresh, then again. pylog creates a new topic's
    logs before CreateTopics answers, as Kafka does (a directory, its files and an
    fsync'd checkpoint each; the mock keeps partitions in memory): that time is printed
    on its own, and the fresh run pays for the first writes into each new file."""
    print(f"\n-- produce over partitions: {messages} x 200-byte values, acks=1, linger.ms=5; "
          "a fresh topic, then the same topic again")
    for partitions in PARTITION_COUNTS:
        topic = f"spread-{partitions}"
        started = time.perf_counter()
        create_topic(broker.bootstrap, topic, partitions)
        print(f"{partitions:>5} partitions: CreateTopics answered by pylog in "
              f"{(time.perf_counter() - started) * 1000:,.0f} ms")
        mock.create_topic(topic, partitions)
        for run in ("fresh", "again"):
            ours = produce_rate(broker.bootstrap, topic, messages, partitions)
            theirs = produce_rate(mock.bootstrap, topic, messages, partitions)
            print(f"{partitions:>5} partitions, {run}: pylog {ours:>10,.0f} msgs/s | mock "
                  f"cluster {theirs:>10,.0f} msgs/s | pylog/mock {ours / theirs:.2f}")


def bench_connections(broker: BrokerProcess, mock: MockCluster, messages: int) -> None:
    print(f"\n-- produce over connections: {messages} x 200-byte values in batches of "
          f"{BATCH_RECORDS}, acks=1, {IN_FLIGHT} requests in flight per connection")
    create_topic(broker.bootstrap, "conns", 10)
    mock.create_topic("conns", 10)
    # Not counted: the first appends create pylog's ten logs and compile its codecs.
    raw_produce_rate(broker.bootstrap, "conns", 10, 10, messages // 10)
    raw_produce_rate(mock.bootstrap, "conns", 10, 10, messages // 10)
    for connections in CONNECTION_COUNTS:
        for _ in range(2):
            ours = raw_produce_rate(broker.bootstrap, "conns", 10, connections, messages)
            theirs = raw_produce_rate(mock.bootstrap, "conns", 10, connections, messages)
            print(f"{connections:>4} connections: pylog {ours:>10,.0f} msgs/s | mock cluster "
                  f"{theirs:>10,.0f} msgs/s | pylog/mock {ours / theirs:.2f}")


def bench_request_cost(broker: BrokerProcess, mock: MockCluster, messages: int) -> None:
    """The CPU one Produce request costs the broker, by batch size and by how many requests
    a client keeps in flight: pylog's process, and the mock cluster's threads (which run
    in this process, beside this thread, the client)."""
    print("\n-- CPU per Produce request: one connection, acks=1, requests of 1 and of 100 "
          "records, 1 to 64 in flight (fewer in flight: fewer requests read per wake-up)")
    create_topic(broker.bootstrap, "cost", 1)
    mock.create_topic("cost", 1)
    raw_produce_rate(broker.bootstrap, "cost", 1, 1, messages // 10)  # warm-up
    for records in (1, 100):
        count = max(messages // 10, 20_000) if records == 1 else messages
        for in_flight in (1, 4, 16, 64):
            ours = _cpu_per_request(lambda: process_cpu_seconds(broker.pid), broker.bootstrap,
                                    count, in_flight, records)
            theirs = _cpu_per_request(_other_threads_cpu_seconds, mock.bootstrap,
                                      count, in_flight, records)
            print(f"{records:>3} record(s), {in_flight:>2} in flight: pylog {ours[0]:6.1f} us "
                  f"({ours[1]:>7,.0f} requests/s) | mock cluster {theirs[0]:6.1f} us "
                  f"({theirs[1]:>7,.0f} requests/s) | pylog/mock CPU {ours[0] / theirs[0]:.2f}")


def _cpu_per_request(cpu_seconds, bootstrap: str, count: int, in_flight: int,
                     records: int) -> tuple[float, float]:
    """(microseconds of ``cpu_seconds()`` per request, requests/s) for ``count`` records."""
    before, start = cpu_seconds(), time.perf_counter()
    rate = raw_produce_rate(bootstrap, "cost", 1, 1, count, in_flight, records)
    used, elapsed = cpu_seconds() - before, time.perf_counter() - start
    requests = rate / records * elapsed
    return used / requests * 1e6, rate / records


def _other_threads_cpu_seconds() -> float:
    """CPU seconds of this process's threads other than the calling one."""
    mine = str(threading.get_native_id())
    return sum(process_cpu_seconds(os.getpid(), task) for task in os.listdir("/proc/self/task")
               if task != mine)


def bench_latency(broker: BrokerProcess, idle: int, samples: int = 300) -> None:
    print(f"\n-- fetch latency: produce to a long-polling consumer, {samples} records, "
          f"with {idle} idle long polls on another topic")
    create_topic(broker.bootstrap, "idle", 100)
    create_topic(broker.bootstrap, "live", 1)
    fetch_latency(broker.bootstrap, "idle", 100, 0, "live", 50)  # warm-up, not counted
    # The baseline before and after, so a change of load on the machine shows.
    before = fetch_latency(broker.bootstrap, "idle", 100, 0, "live", samples)
    ours50, ours99 = fetch_latency(broker.bootstrap, "idle", 100, idle, "live", samples)
    after = fetch_latency(broker.bootstrap, "idle", 100, 0, "live", samples)
    base50, base99 = (before[0] + after[0]) / 2, (before[1] + after[1]) / 2
    print(f"pylog, {idle} idle polls: p50 {ours50 * 1e3:7.2f} ms  p99 {ours99 * 1e3:7.2f} ms")
    print(f"pylog, no idle polls:  p50 {base50 * 1e3:7.2f} ms  p99 {base99 * 1e3:7.2f} ms "
          f"(the mean of a run before, p50 {before[0] * 1e3:.2f} ms, and one after, "
          f"p50 {after[0] * 1e3:.2f} ms)"
          f" | with/without: p50 {ours50 / base50:.2f} p99 {ours99 / base99:.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--idle", type=int, default=1000, help="idle long-polling consumers")
    parser.add_argument("--only", choices=["partitions", "connections", "cost", "latency"])
    args = parser.parse_args()
    # A SIGTERM (timeout, kill) unwinds the with-blocks, so the broker stops too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.stdout.reconfigure(line_buffering=True)
    with tempfile.TemporaryDirectory(prefix="pylog-scale-bench-") as tmp, \
            BrokerProcess(Path(tmp), {"log.segment.bytes": 64 << 20}) as broker:
        mock = MockCluster()
        try:
            if args.only in (None, "partitions"):
                bench_partitions(broker, mock, args.messages)
            if args.only in (None, "connections"):
                bench_connections(broker, mock, args.messages)
            if args.only in (None, "cost"):
                bench_request_cost(broker, mock, args.messages)
            if args.only in (None, "latency"):
                bench_latency(broker, args.idle)
        finally:
            mock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
