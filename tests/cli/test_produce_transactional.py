"""``pylog produce --transactional-id``: the whole input in one transaction, against a pylog
broker. read_committed readers see every line, or none when a line fails."""

from __future__ import annotations

import time
import uuid

import pytest

from pylog.client import Admin, SimpleConsumer
from pylog.client.transactions import ABORT_MARKER, drop_aborted
from pylog.records import decode_batch, iter_batch_headers
from pylog.testing.broker import broker_fixture
from tests.cli.helpers import pylog

broker = broker_fixture(scope="module", overrides={"transaction.state.log.num.partitions": 1,
                                                   "num.partitions": 1})


def settled(read, expected, timeout_s: float = 30.0):
    """``read()`` once it returns ``expected``, else its last value after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = read()
        if value == expected or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def committed_values(bootstrap: str, topic: str) -> list[bytes]:
    with SimpleConsumer(bootstrap, isolation_level="read_committed") as consumer:
        offset, end, found = 0, consumer.latest_offset(topic, 0), []
        while offset < end:
            result = consumer.fetch(topic, 0, offset)
            found += [r.value for r in result.records]
            offset = result.next_offset
        return found


def markers(bootstrap: str, topic: str) -> list[str]:
    with SimpleConsumer(bootstrap) as consumer:
        raw = drop_aborted(bytes(consumer.fetch_raw(topic, 0, 0).records), [])
    kinds = []
    for position, header in iter_batch_headers(raw):
        if header.is_control:
            key = decode_batch(raw, position).records[0].key
            kinds.append("ABORT" if int.from_bytes(key[2:4], "big") == ABORT_MARKER else "COMMIT")
    return kinds


@pytest.fixture
def topic(broker) -> str:
    name = f"cli-txn-{uuid.uuid4().hex[:8]}"
    with Admin(broker.bootstrap) as admin:
        admin.create_topic(name, 1, 1, {})
    return name


def test_the_input_is_committed_in_one_transaction(broker, topic):
    lines = [b"line %d" % i for i in range(200)]
    result = pylog("produce", "--topic", topic, "--transactional-id", "cli-import",
                   "--bootstrap-server", broker.bootstrap, input=b"\n".join(lines) + b"\n")
    assert result.returncode == 0, result.stderr.decode()
    assert settled(lambda: markers(broker.bootstrap, topic), ["COMMIT"]) == ["COMMIT"]
    assert committed_values(broker.bootstrap, topic) == lines


def test_a_bad_line_aborts_the_whole_input(broker, topic):
    lines = [b"k%d:v%d" % (i, i) for i in range(50)] + [b"no separator here"]
    result = pylog("produce", "--topic", topic, "--transactional-id", "cli-bad", "--key-separator", ":",
                   "--linger-ms", "0", "--bootstrap-server", broker.bootstrap, input=b"\n".join(lines))
    assert result.returncode != 0
    assert result.stderr.decode().count("\n") == 1 and "line 51 has no ':'" in result.stderr.decode()
    # the first 50 were written, then aborted (the broker writes the marker after answering)
    assert settled(lambda: markers(broker.bootstrap, topic), ["ABORT"]) == ["ABORT"]
    assert committed_values(broker.bootstrap, topic) == []


def test_transactions_need_acks_all(broker, topic):
    result = pylog("produce", "--topic", topic, "--transactional-id", "cli-acks", "--acks", "1",
                   "--bootstrap-server", broker.bootstrap, input=b"x\n")
    assert result.returncode != 0
    assert result.stderr.decode().strip().endswith("--acks: must be all with --transactional-id, got '1'")
