"""The client subcommands as a user runs them, against librdkafka's mock cluster."""

import confluent_kafka
import pytest

from tests.cli.helpers import pylog, without_topic_id
from tests.client.mock_cluster import confluent_read_all


def test_produce_then_consume_round_trip(mock_bootstrap):
    lines = [f"user-{i % 7}:event {i}" for i in range(50)]
    produced = pylog("produce", "--topic", "cli-round-trip", "--key-separator", ":",
                     "--compression", "zstd", "--bootstrap-server", mock_bootstrap,
                     input="\n".join(lines).encode() + b"\n")
    assert produced.returncode == 0, produced.stderr
    consumed = pylog("consume", "--topic", "cli-round-trip", "--offset", "earliest",
                     "--max-messages", "50", "--format", "%k:%v", "--bootstrap-server", mock_bootstrap)
    assert consumed.returncode == 0, consumed.stderr
    assert sorted(consumed.stdout.decode().splitlines()) == sorted(lines)
    # the same records as another client sees them
    messages = confluent_read_all(mock_bootstrap, "cli-round-trip", [0, 1, 2, 3], 50)
    assert sorted(f"{m.key().decode()}:{m.value().decode()}" for m in messages) == sorted(lines)


def test_consume_what_confluent_produced_with_offsets(mock_bootstrap):
    producer = confluent_kafka.Producer({"bootstrap.servers": mock_bootstrap, "log_level": 3})
    for i in range(30):
        producer.produce("cli-offsets", f"m{i}".encode(), partition=i % 2)
    assert producer.flush(20) == 0
    offsets = pylog("offsets", "--topic", "cli-offsets", "--bootstrap-server", mock_bootstrap)
    assert offsets.returncode == 0, offsets.stderr
    assert offsets.stdout.decode().splitlines() == ["0 15", "1 15", "2 0", "3 0"]
    earliest = pylog("offsets", "--topic", "cli-offsets", "--time", "earliest", "--partition", "1",
                     "--bootstrap-server", mock_bootstrap)
    assert earliest.stdout.decode().splitlines() == ["1 0"]
    tail = pylog("consume", "--topic", "cli-offsets", "--partition", "1", "--offset", "12",
                 "--max-messages", "3", "--format", "%p/%o %v", "--bootstrap-server", mock_bootstrap)
    assert tail.stdout.decode().splitlines() == ["1/12 m25", "1/13 m27", "1/14 m29"]
    idle = pylog("consume", "--topic", "cli-offsets", "--timeout-ms", "300",
                 "--bootstrap-server", mock_bootstrap)  # from latest: nothing new, exits
    assert (idle.returncode, idle.stdout) == (0, b"")


@pytest.mark.parametrize("args, message", [
    (["consume", "--topic", "no-such-topic", "--max-messages", "1"], "topic 'no-such-topic' does not exist"),
    (["offsets", "--topic", "cli-offsets", "--time", "last tuesday"], "--time: 'last tuesday' is not an ISO-8601"),
    (["consume", "--topic", "cli-offsets", "--offset", "soon"], "--offset: expected earliest, latest"),
    (["consume", "--topic", "cli-offsets", "--partition", "1", "--offset", "9999"], "valid offsets are 0 to 15"),
    (["produce", "--topic", "t", "--compression", "brotli"], "compression.type: unknown codec 'brotli'"),
    (["topics", "create"], "--topic: required for topics create"),
])
def test_user_mistakes_are_one_line(mock_bootstrap, args, message):
    result = pylog(*args, "--bootstrap-server", mock_bootstrap, input=b"x\n")
    assert result.returncode != 0
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr


def test_broker_down_is_one_line():
    result = pylog("offsets", "--topic", "t", "--bootstrap-server", "127.0.0.1:1")
    assert result.returncode == 1
    assert result.stderr.decode().strip() == (
        "pylog offsets: error: no broker reachable: cannot connect to 127.0.0.1:1: Connection refused")


@pytest.mark.parametrize("command", ["topics", "produce", "consume", "offsets"])
def test_help(command):
    result = pylog(command, "--help")
    assert result.returncode == 0 and b"--bootstrap-server" in result.stdout


def test_topics_list_and_describe(mock_bootstrap):
    producer = confluent_kafka.Producer({"bootstrap.servers": mock_bootstrap, "log_level": 3})
    producer.produce("cli-described", b"x")
    producer.flush(20)
    listed = pylog("topics", "list", "--bootstrap-server", mock_bootstrap)
    assert "cli-described" in listed.stdout.decode().splitlines()
    described = pylog("topics", "describe", "--topic", "cli-described", "--bootstrap-server", mock_bootstrap)
    lines = without_topic_id(described.stdout.decode()).splitlines()
    assert lines[0] == "Topic: cli-described\tPartitionCount: 4\tReplicationFactor: 3"
    assert [line.split("\t")[2] for line in lines[1:]] == [f"Partition: {p}" for p in range(4)]
