"""Produce and fetch throughput over secured listeners next to PLAINTEXT, same broker,
same run.

One pylog broker listens on every protocol in ``PROTOCOLS`` (one line each: listener
name, security protocol, client settings). A confluent-kafka producer writes
``--messages`` 1 KiB values (acks=1, linger.ms=5) through each listener into its own
topic, then a ``--fetch-mb`` partition is read from the beginning through each listener,
by a confluent-kafka consumer and by a raw Fetch reader (Python ``ssl`` on the secured
listeners) that only walks batch headers, so that the client's per-record work does not
hide the broker's. Prints msgs/s and MB/s per protocol and the ratio to PLAINTEXT. Kafka
loses zero-copy under TLS too: pylog's fetch goes from ``os.sendfile`` to bounded
``pread`` chunks encrypted by OpenSSL.

Then connections per second through each listener, with a full TLS handshake and SCRAM
exchange where the listener asks for them.

    python benchmarks/security_bench.py [--messages 200000] [--fetch-mb 256] [--seconds 3]
"""

from __future__ import annotations

import argparse
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pylog.client.connection import BrokerConnection
from pylog.client.security import SecurityConfig
from pylog.protocol import ApiKey, decode_response, encode_request
from pylog.records import iter_batch_headers
from pylog.testing.broker import HOST, BrokerProcess
from pylog.testing.certs import TestCertificates

VALUE_SIZE = 1024


@dataclass(frozen=True)
class Protocol:
    """One secured (or not) way in: the listener, its protocol, the broker settings it
    needs and the client settings that reach it."""

    listener: str
    security_protocol: str
    broker: Callable[[TestCertificates], dict] = lambda certs: {}
    client: Callable[[TestCertificates], dict] = lambda certs: {}
    extra: dict = field(default_factory=dict)
    raw: bool = True  # the raw reader speaks it (no SASL there)


def _tls_client(certs: TestCertificates) -> dict:
    return {"security.protocol": "SSL", "ssl.ca.location": str(certs.truststore)}


USER, PASSWORD = "bench", "bench-secret"


def _scram_client(certs: TestCertificates) -> dict:
    return {"security.protocol": "SASL_SSL", "ssl.ca.location": str(certs.truststore),
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": USER, "sasl.password": PASSWORD}


# One line per protocol; the first is the baseline the others are compared with.
PROTOCOLS = [
    Protocol("PLAINTEXT", "PLAINTEXT"),
    Protocol("SSL", "SSL", broker=lambda certs: certs.broker_settings(), client=_tls_client),
    Protocol("SASL_SSL", "SASL_SSL", broker=lambda certs: {
        **certs.broker_settings(), "sasl.enabled.mechanisms": "SCRAM-SHA-256"},
        client=_scram_client, raw=False),
]


def add_user(log_dir: Path) -> None:
    """The SCRAM user, added offline before the start as an operator would."""
    subprocess.run([sys.executable, "-m", "pylog.cli.main", "users", "add", "--user", USER,
                    "--password-env", "BENCH_PASSWORD", "--mechanism", "SCRAM-SHA-256",
                    "--log-dirs", str(log_dir)], check=True, capture_output=True,
                   env={**os.environ, "BENCH_PASSWORD": PASSWORD})


def start_broker(base: Path, certs: TestCertificates) -> BrokerProcess:
    add_user(base / "broker" / "logs")
    overrides: dict = {"listener.security.protocol.map": ",".join(
        f"{p.listener}:{p.security_protocol}" for p in PROTOCOLS),
        "log.segment.bytes": 256 * 1024 * 1024}
    for protocol in PROTOCOLS:
        overrides.update(protocol.broker(certs))
    extra = [p.listener for p in PROTOCOLS if p.listener != "PLAINTEXT"]
    return BrokerProcess(base / "broker", overrides, extra_listeners=extra).start()


def client_settings(broker: BrokerProcess, certs: TestCertificates, protocol: Protocol) -> dict:
    return {"bootstrap.servers": broker.bootstrap_for(protocol.listener),
            **protocol.client(certs), **protocol.extra}


def produce_rate(settings: dict, topic: str, count: int) -> float:
    producer = Producer({**settings, "acks": "1", "linger.ms": 5,
                         "queue.buffering.max.messages": 1_000_000})
    value = os.urandom(VALUE_SIZE)
    failed = []
    producer.produce(topic, value, partition=0)  # connect and learn metadata first
    producer.flush(30)
    start = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, partition=0,
                                 on_delivery=lambda e, _m: e and failed.append(e))
                break
            except BufferError:
                producer.poll(0.01)
    remaining = producer.flush(300)
    elapsed = time.perf_counter() - start
    if remaining or failed:
        raise RuntimeError(f"{remaining} undelivered, {len(failed)} failed: {failed[:1]}")
    return count / elapsed


def fetch_rate(settings: dict, topic: str, total_bytes: int) -> float:
    """MB/s reading ``topic`` partition 0 from offset 0 until ``total_bytes`` of values."""
    consumer = Consumer({**settings, "group.id": f"bench-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "fetch.max.bytes": 52428800,
                         "max.partition.fetch.bytes": 8 * 1024 * 1024})
    consumer.assign([TopicPartition(topic, 0, 0)])
    read = 0
    start = time.perf_counter()
    while read < total_bytes:
        for message in consumer.consume(1000, timeout=5):
            if message.error() is None:
                read += len(message.value())
    elapsed = time.perf_counter() - start
    consumer.close()
    return read / elapsed / 1e6


def raw_fetch_rate(port: int, tls: ssl.SSLContext | None, topic: str, total_bytes: int
                   ) -> float:
    """MB/s of Fetch responses read by a reader that walks batch headers only."""
    sock = socket.create_connection((HOST, port))
    if tls is not None:
        sock = tls.wrap_socket(sock, server_hostname=HOST)
    reader = sock.makefile("rb", buffering=1 << 20)
    offset = size = 0
    start = time.perf_counter()
    with sock:
        while size < total_bytes:
            body = {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 64 << 20,
                    "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                    "topics": [{"topic": topic, "partitions": [
                        {"partition": 0, "fetch_offset": offset,
                         "partition_max_bytes": 32 << 20}]}]}
            sock.sendall(encode_request(ApiKey.FETCH, 11, 1, "bench", body))
            payload = reader.read(int.from_bytes(reader.read(4), "big"))
            _, response = decode_response(ApiKey.FETCH, 11, memoryview(payload))
            data = response["responses"][0]["partitions"][0]["records"]
            last = None
            for _, last in iter_batch_headers(data):
                pass
            offset = last.base_offset + last.last_offset_delta + 1
            size += len(data)
    return size / (time.perf_counter() - start) / 1e6


def raw_tls(certs: TestCertificates, protocol: Protocol) -> ssl.SSLContext | None:
    if protocol.security_protocol not in ("SSL", "SASL_SSL"):
        return None
    context = ssl.create_default_context(cafile=str(certs.truststore))
    return context


def connection_rate(broker: BrokerProcess, certs: TestCertificates, protocol: Protocol,
                    seconds: float) -> float:
    """Connections per second, each opened (TCP, TLS and SASL as the protocol needs),
    asked ApiVersions and closed, one after the other by pylog's client."""
    security = SecurityConfig.from_mapping(protocol.client(certs))
    port = broker.ports[protocol.listener]
    count = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        connection = BrokerConnection(HOST, port, security=security)
        connection.request(ApiKey.METADATA, {"topics": [], "allow_auto_topic_creation": False})
        connection.close()
        count += 1
    return count / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--fetch-mb", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pylog-security-bench-") as tmp:
        base = Path(tmp)
        certs = TestCertificates.create(base / "certs")
        broker = start_broker(base, certs)
        try:
            baseline = PROTOCOLS[0]
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            topics = [f"produce-{p.listener.lower()}" for p in PROTOCOLS] + ["fetch"]
            for future in admin.create_topics([NewTopic(t, 1) for t in topics]).values():
                future.result(30)

            print(f"\n-- produce: {args.messages} x {VALUE_SIZE}-byte values, acks=1, "
                  f"linger.ms=5, one partition")
            rates = {}
            for protocol in PROTOCOLS:
                rates[protocol.listener] = produce_rate(
                    client_settings(broker, certs, protocol),
                    f"produce-{protocol.listener.lower()}", args.messages)
            for protocol in PROTOCOLS:
                rate = rates[protocol.listener]
                print(f"{protocol.listener:>12}: {rate:10,.0f} msgs/s {rate * VALUE_SIZE / 1e6:8.1f}"
                      f" MB/s  x{rate / rates[baseline.listener]:.2f} of {baseline.listener}")

            count = args.fetch_mb * 1024 * 1024 // VALUE_SIZE
            produce_rate(client_settings(broker, certs, baseline), "fetch", count)
            print(f"\n-- fetch: {count * VALUE_SIZE / 1e6:.0f} MB of one partition from "
                  f"offset 0 (sendfile on PLAINTEXT, pread + TLS otherwise)")
            rates, raw = {}, {}
            for protocol in PROTOCOLS:
                rates[protocol.listener] = fetch_rate(
                    client_settings(broker, certs, protocol), "fetch", count * VALUE_SIZE)
                if protocol.raw:
                    raw[protocol.listener] = raw_fetch_rate(
                        broker.ports[protocol.listener], raw_tls(certs, protocol), "fetch",
                        count * VALUE_SIZE)
            for protocol in PROTOCOLS:
                rate = rates[protocol.listener]
                line = (f"{protocol.listener:>12}: consumer {rate:8.1f} MB/s "
                        f"x{rate / rates[baseline.listener]:.2f}")
                if protocol.listener in raw:
                    line += (f" | raw Fetch reader {raw[protocol.listener]:8.1f} MB/s "
                             f"x{raw[protocol.listener] / raw[baseline.listener]:.2f}")
                print(f"{line}  (of {baseline.listener})")

            print(f"\n-- connections: open (with TLS and SCRAM-SHA-256 as the listener "
                  f"needs), one Metadata request, close; one client thread, {args.seconds} s")
            rates = {p.listener: connection_rate(broker, certs, p, args.seconds)
                     for p in PROTOCOLS}
            for protocol in PROTOCOLS:
                rate = rates[protocol.listener]
                print(f"{protocol.listener:>12}: {rate:8.0f} connections/s "
                      f"x{rate / rates[baseline.listener]:.2f} of {baseline.listener}")
        finally:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
