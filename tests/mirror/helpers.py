"""Real clusters, a real ``pylog mirror`` child process, and reading what landed where."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import confluent_kafka as ck
import pytest

from pylog.testing.process import ServerProcess
from tests.mirror.conftest import GROUP

HEADERS = ("pylog.mirror.source", "pylog.mirror.offset")


class MockCluster:
    """librdkafka's mock cluster (it serves transactions and consumer groups); it lives as
    long as this object. Topics are made by producing to them: 4 partitions each."""

    def __init__(self, brokers: int = 3) -> None:
        self._handle = ck.Producer({"bootstrap.servers": "mock:1",
                                    "test.mock.num.brokers": brokers, "log_level": 3})
        metadata = self._handle.list_topics(timeout=10)
        self.bootstrap = ",".join(f"{b.host}:{b.port}" for b in metadata.brokers.values())

    def close(self) -> None:
        self._handle.flush(1)
        self._handle = None


@dataclass(frozen=True)
class Record:
    partition: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple


class MirrorProcess:
    """``pylog mirror ARGS`` as a child process; ``log_path`` collects its output."""

    def __init__(self, base_dir: Path, args: list[str]) -> None:
        self.base_dir = Path(base_dir)
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.args = args
        self.runs = 0
        self.process: ServerProcess | None = None

    @property
    def log_path(self) -> Path:
        return self.base_dir / f"mirror-{self.runs}.log"

    def start(self) -> "MirrorProcess":
        self.runs += 1
        argv = [sys.executable, "-m", "pylog.cli.main", "--log-level", "INFO", "mirror", *self.args]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.process = ServerProcess(argv, self.log_path, env=env).start()
        return self

    def alive(self) -> bool:
        return self.process is not None and self.process.alive()

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()

    def stop(self, timeout: float = 30.0) -> int | None:
        return None if self.process is None else self.process.stop(timeout)

    def logs(self) -> str:
        return "\n".join((self.base_dir / f"mirror-{i}.log").read_text(errors="replace")
                         for i in range(1, self.runs + 1)
                         if (self.base_dir / f"mirror-{i}.log").exists())


def produce(bootstrap: str, topic: str, start: int, count: int, partitions: int,
            transactional_id: str | None = None, batches: int = 1,
            security: dict | None = None) -> list[Record]:
    """``count`` records numbered from ``start`` spread over ``partitions``, with keys,
    explicit timestamps and headers; in ``batches`` transactions when transactional (the
    source then holds control records and the mirror must skip them). ``security``:
    librdkafka security settings."""
    settings = {**(security or {}), "bootstrap.servers": bootstrap, "linger.ms": 5}
    if transactional_id:
        settings["transactional.id"] = transactional_id
    producer = ck.Producer(settings)
    if transactional_id:
        producer.init_transactions(30)
    sent = []
    per_batch = max(count // batches, 1)
    for i in range(start, start + count):
        if transactional_id and (i - start) % per_batch == 0:
            producer.begin_transaction()
        record = Record(i % partitions, b"k%d" % i if i % 7 else None, b"v%d-" % i * (i % 5 + 1),
                        1_700_000_000_000 + i, (("h", b"%d" % i), ("n", b"x")))
        producer.produce(topic, record.value, record.key, record.partition,
                         timestamp=record.timestamp, headers=list(record.headers))
        sent.append(record)
        if transactional_id and ((i - start + 1) % per_batch == 0 or i == start + count - 1):
            producer.commit_transaction(30)
    assert producer.flush(30) == 0
    return sent


def read_all(bootstrap: str, topic: str, partitions: int, expected: int,
             timeout: float = 60.0) -> list[tuple[Record, list]]:
    """Every committed record of ``topic`` (read_committed), once ``expected`` arrived or
    the partitions' ends were reached after the timeout; (record, headers) per offset."""
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "mirror-test-reader",
                            "enable.auto.commit": False, "isolation.level": "read_committed",
                            "enable.partition.eof": False})
    consumer.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)])
    found = []
    deadline = time.monotonic() + timeout
    try:
        while len(found) < expected and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.5):
                if message.error() is not None:
                    continue
                headers = message.headers() or []
                record = Record(message.partition(), message.key(), message.value(),
                                message.timestamp()[1], tuple(h for h in headers
                                                              if h[0] not in HEADERS))
                found.append((record, headers))
        # Anything more (a duplicate) would show within a moment.
        for message in consumer.consume(1000, 2.0):
            if message.error() is None:
                headers = message.headers() or []
                found.append((Record(message.partition(), message.key(), message.value(),
                                     message.timestamp()[1],
                                     tuple(h for h in headers if h[0] not in HEADERS)), headers))
    finally:
        consumer.close()
    return found


def check_exactly_once(sent: list[Record], mirrored: list[tuple[Record, list]], alias: str) -> None:
    """Each sent record once, in order per partition, with its source alias header."""
    by_partition: dict[int, list[Record]] = {}
    for record in sent:
        by_partition.setdefault(record.partition, []).append(record)
    got: dict[int, list[Record]] = {}
    for record, headers in mirrored:
        got.setdefault(record.partition, []).append(record)
        assert (HEADERS[0], alias.encode()) in headers
    for partition, records in by_partition.items():
        mirrored_records = got.get(partition, [])
        assert len(mirrored_records) == len(records), (
            f"partition {partition}: {len(mirrored_records)} mirrored of {len(records)}")
        assert mirrored_records == records, f"partition {partition} differs"
    assert set(got) <= set(by_partition)


def committed_total(target_bootstrap: str, topic: str, partitions: int) -> int:
    """How far the mirror's committed source positions on the target have come."""
    consumer = ck.Consumer({"bootstrap.servers": target_bootstrap, "group.id": GROUP,
                            "enable.auto.commit": False})
    try:
        found = consumer.committed([ck.TopicPartition(topic, p) for p in range(partitions)],
                                   timeout=30)
        return sum(max(tp.offset, 0) for tp in found)
    except ck.KafkaException as exc:     # the group's coordinator moving, as in a new cluster
        if exc.args[0].code() not in (ck.KafkaError.NOT_COORDINATOR,
                                      ck.KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                                      ck.KafkaError.COORDINATOR_NOT_AVAILABLE):
            raise
        return 0
    finally:
        consumer.close()


def wait_for_commit(mirror: MirrorProcess, target_bootstrap: str, topic: str, partitions: int,
                    above: int, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert mirror.alive(), mirror.logs()[-3000:]
        total = committed_total(target_bootstrap, topic, partitions)
        if total > above:
            return total
        time.sleep(0.2)
    pytest.fail(f"the mirror committed nothing past {above} within {timeout} s:\n"
                + mirror.logs()[-3000:])
