"""How many files a broker keeps open: three descriptors per partition (the active segment's
log and one for each index mapping), and a soft open-file limit raised to the hard one at
start, as the JVM raises it for Kafka."""

from __future__ import annotations

import os
import resource
from collections import Counter
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from pylog.testing.broker import BrokerProcess

PARTITIONS = 60


def open_files(pid: int) -> Counter:
    """The broker's descriptors by what they point at: segment files by suffix."""
    kinds: Counter = Counter()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except FileNotFoundError:
            continue
        kinds[Path(target).suffix if "/logs/" in target else "other"] += 1
    return kinds


def soft_limit(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError("no open file limit listed")


def test_three_descriptors_per_partition_and_the_limit_raised(tmp_path):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowered = min(1024, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowered, hard))  # inherited by the broker
    try:
        broker = BrokerProcess(tmp_path).start()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        assert soft_limit(broker.pid) == hard

        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("many", PARTITIONS, 1)])["many"].result(30)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(PARTITIONS * 20):
            producer.produce("many", b"x" * 100, partition=i % PARTITIONS)
        assert producer.flush(30) == 0

        kinds = open_files(broker.pid)
        assert kinds[".log"] == PARTITIONS, kinds
        assert kinds[".index"] == PARTITIONS, kinds  # the mapping's own descriptor only
        assert kinds[".timeindex"] == PARTITIONS, kinds
    finally:
        broker.stop()
