"""``pylog topics alter``: CreatePartitions against a real standalone broker."""

import pytest

from pylog.testing.broker import broker_fixture
from tests.cli.helpers import pylog, without_topic_id
from tests.cli.test_cli_mistakes import one_error_line

broker = broker_fixture(scope="module")


def partition_lines(broker, topic: str) -> list[str]:
    result = pylog("topics", "describe", "--topic", topic, "--bootstrap-server", broker.bootstrap)
    assert result.returncode == 0, result.stderr
    return [line for line in result.stdout.decode().splitlines() if line.startswith("\t")]


def test_growing_a_topic(broker):
    bs = ("--bootstrap-server", broker.bootstrap)
    assert pylog("topics", "create", "--topic", "grows", *bs).returncode == 0
    result = pylog("topics", "alter", "--topic", "grows", "--partitions", "3", *bs)
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode() == "Topic grows now has 3 partitions.\n"
    described = without_topic_id(pylog("topics", "describe", "--topic", "grows", *bs).stdout.decode())
    assert described.splitlines()[0].startswith("Topic: grows\tPartitionCount: 3\t")
    assert [line.split("\t")[2] for line in partition_lines(broker, "grows")] == [
        "Partition: 0", "Partition: 1", "Partition: 2"]
    # The new partitions take records.
    produced = pylog("produce", "--topic", "grows", "--partition", "2", *bs, input=b"x\n")
    assert produced.returncode == 0, produced.stderr


def test_shrinking_is_refused_in_one_line(broker):
    bs = ("--bootstrap-server", broker.bootstrap)
    assert pylog("topics", "create", "--topic", "stays", "--partitions", "2", *bs).returncode == 0
    for total in ("1", "2"):
        result = pylog("topics", "alter", "--topic", "stays", "--partitions", total, *bs)
        one_error_line(result, "topics", "INVALID_PARTITIONS")
    assert len(partition_lines(broker, "stays")) == 2


def test_an_unknown_topic_is_one_line(broker):
    result = pylog("topics", "alter", "--topic", "never-made", "--partitions", "2",
                   "--bootstrap-server", broker.bootstrap)
    one_error_line(result, "topics", "UNKNOWN_TOPIC_OR_PARTITION")


@pytest.mark.parametrize("args, needle", [
    (("--topic", "t"), "--partitions: required for topics alter"),
    (("--partitions", "3"), "--topic: required for topics alter"),
    (("--topic", "t", "--partitions", "3", "--replication-factor", "2"),
     "--replication-factor: cannot be altered"),
    (("--topic", "t", "--partitions", "3", "--config", "retention.ms=1"),
     "--config: not supported with topics alter"),
    (("--topic", "t", "--partitions", "0"), "--partitions"),
])
def test_option_mistakes_are_refused_before_connecting(args, needle):
    result = pylog("topics", "alter", *args, "--bootstrap-server", "127.0.0.1:1")
    one_error_line(result, "topics", needle)


def test_kafka_topics_sh_spelling_works(broker):
    # A script written for kafka-topics.sh (flags for the action) runs with pylog topics.
    bs = ("--bootstrap-server", broker.bootstrap)
    created = pylog("topics", *bs, "--create", "--topic", "kafka-style", "--partitions", "2",
                    "--replication-factor", "1", "--config", "cleanup.policy=compact")
    assert created.returncode == 0, created.stderr
    grown = pylog("topics", "--alter", "--topic", "kafka-style", "--partitions", "3", *bs)
    assert grown.returncode == 0, grown.stderr
    described = pylog("--log-level", "ERROR", "topics", "--describe", "--topic", "kafka-style",
                      *bs).stdout.decode()
    described = without_topic_id(described)
    assert described.splitlines()[0].startswith("Topic: kafka-style\tPartitionCount: 3\t")
    assert "cleanup.policy=compact" in described.splitlines()[0]
    assert "kafka-style" in pylog("topics", "--list", *bs).stdout.decode().split()
    assert pylog("topics", "--delete", "--topic", "kafka-style", *bs).returncode == 0
    one_error_line(pylog("topics", "--create", "--delete", "--topic", "x", *bs), "topics",
                   "one action at a time, got --create and --delete")
