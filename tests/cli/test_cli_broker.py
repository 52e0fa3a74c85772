"""The client subcommands against a real pylog broker subprocess, through stdin and stdout."""

import subprocess
import uuid

from pylog.testing.broker import broker_fixture
from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient

from pylog.protocol.primitives import uuid_text
from tests.cli.helpers import pylog, without_topic_id

broker = broker_fixture(scope="module", overrides={"auto.create.topics.enable": "false"})


def _ok(*args, input=None) -> str:
    result = pylog(*args, input=input)
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode()


def test_topic_commands(broker):
    bs = ("--bootstrap-server", broker.bootstrap)
    assert _ok("topics", "create", "--topic", "cli-topics", "--partitions", "3",
               "--config", "retention.ms=86400000", *bs) == "Created topic cli-topics.\n"
    assert "cli-topics" in _ok("topics", "list", *bs).splitlines()
    described = _ok("topics", "describe", "--topic", "cli-topics", *bs).splitlines()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    theirs = admin.describe_topics(TopicCollection(["cli-topics"]))["cli-topics"].result(30).topic_id
    # librdkafka prints ids in standard base64; Kafka (and pylog) in its url-safe form.
    topic_id = uuid_text(uuid.UUID(int=(theirs.get_most_significant_bits() % 2**64) << 64
                                   | theirs.get_least_significant_bits() % 2**64))
    assert described[0] == (f"Topic: cli-topics\tTopicId: {topic_id}\tPartitionCount: 3"
                            "\tReplicationFactor: 1\tConfigs: retention.ms=86400000")
    assert described[3] == "\tTopic: cli-topics\tPartition: 2\tLeader: 0\tReplicas: 0\tIsr: 0"
    again = pylog("topics", "create", "--topic", "cli-topics", *bs)
    assert again.returncode == 1
    message = again.stderr.decode().strip()
    assert message.startswith("pylog topics: error: create topic 'cli-topics': TOPIC_ALREADY_EXISTS")
    assert "\n" not in message
    bad = pylog("topics", "create", "--topic", "x", "--config", "retention.ms", *bs)
    assert bad.stderr.decode().strip() == "pylog topics: error: --config: expected KEY=VALUE, got 'retention.ms'"
    assert _ok("topics", "delete", "--topic", "cli-topics", *bs) == "Deleted topic cli-topics.\n"
    assert "cli-topics" not in _ok("topics", "list", *bs).splitlines()


def test_describe_prints_like_kafka_topics(broker):
    bs = ("--bootstrap-server", broker.bootstrap)
    _ok("topics", "create", "--topic", "cli-described-a", "--partitions", "2", *bs)
    _ok("topics", "create", "--topic", "cli-described-b", *bs)
    one = without_topic_id(_ok("topics", "describe", "--topic", "cli-described-a", *bs))
    assert one == ("Topic: cli-described-a\tPartitionCount: 2\tReplicationFactor: 1\tConfigs: \n"
                   "\tTopic: cli-described-a\tPartition: 0\tLeader: 0\tReplicas: 0\tIsr: 0\n"
                   "\tTopic: cli-described-a\tPartition: 1\tLeader: 0\tReplicas: 0\tIsr: 0\n")
    # Without --topic: every topic, sorted by name, in the same format.
    everything = without_topic_id(_ok("topics", "describe", *bs))
    assert one + "Topic: cli-described-b\tPartitionCount: 1\tReplicationFactor: 1\tConfigs: \n" in everything
    for line in everything.splitlines():
        fields = dict(f.split(": ", 1) for f in line.strip("\t").split("\t"))
        if "Partition" in fields:  # RF 1 on one broker: the leader is the only replica
            assert fields["Leader"] == fields["Replicas"] == fields["Isr"] == "0", line
    # One healthy broker: nothing under-replicated, nothing without a leader.
    for flags in (["--under-replicated-partitions"], ["--unavailable-partitions"],
                  ["--under-replicated-partitions", "--unavailable-partitions"]):
        assert _ok("topics", "describe", *flags, *bs) == ""
        assert _ok("topics", "describe", "--topic", "cli-described-a", *flags, *bs) == ""
    missing = pylog("topics", "describe", "--topic", "cli-never-created", *bs)
    assert missing.returncode == 1
    assert missing.stderr.decode() == (
        "pylog topics: error: topic 'cli-never-created' does not exist\n")


def test_describe_filters_are_refused_with_other_actions(broker):
    bs = ("--bootstrap-server", broker.bootstrap)
    for action in ("create", "list", "delete"):
        for flag in ("--under-replicated-partitions", "--unavailable-partitions"):
            result = pylog("topics", action, "--topic", "cli-filter", flag, *bs)
            assert result.returncode == 1
            assert result.stderr.decode() == (
                f"pylog topics: error: {flag}: only valid with topics describe, not {action}\n")
    assert "cli-filter" not in _ok("topics", "list", *bs).splitlines()


def test_produce_consume_and_offsets_round_trip(broker):
    bs = ("--bootstrap-server", broker.bootstrap)
    _ok("topics", "create", "--topic", "cli-io", "--partitions", "2", *bs)
    lines = [f"k{i % 5}\tline {i} \u00e9" for i in range(500)]
    _ok("produce", "--topic", "cli-io", "--key-separator", "\t", "--compression", "snappy", *bs,
        input=("\n".join(lines) + "\n").encode())
    out = _ok("consume", "--topic", "cli-io", "--from-beginning", "--max-messages", "500",
              "--format", "%k\\t%v", *bs)
    assert sorted(out.splitlines()) == sorted(lines)
    # kcat sees the same records
    kcat = subprocess.run(["kcat", "-q", "-C", "-b", broker.bootstrap, "-t", "cli-io", "-e", "-f", "%k\t%s\n"],
                          capture_output=True, timeout=60, check=True).stdout.decode()
    assert sorted(kcat.splitlines()) == sorted(lines)
    offsets = dict(line.split() for line in _ok("offsets", "--topic", "cli-io", *bs).splitlines())
    assert sum(int(o) for o in offsets.values()) == 500
    earliest = _ok("offsets", "--topic", "cli-io", "--time", "earliest", *bs).splitlines()
    assert earliest == ["0 0", "1 0"]
    future = _ok("offsets", "--topic", "cli-io", "--time", "2999-01-01T00:00:00Z", *bs).splitlines()
    assert future == ["0 -1", "1 -1"]
    past = _ok("offsets", "--topic", "cli-io", "--time", "2000-01-01T00:00:00", *bs).splitlines()
    assert past == ["0 0", "1 0"]
    since = _ok("consume", "--topic", "cli-io", "--offset", "@2000-01-01T00:00:00Z", "--max-messages", "500",
                "--format", "%v", *bs)
    assert len(since.splitlines()) == 500


def test_unknown_topic_without_auto_create(broker):
    result = pylog("produce", "--topic", "never-created", "--bootstrap-server", broker.bootstrap, input=b"x\n")
    assert result.returncode == 1
    message = result.stderr.decode().strip()
    assert "\n" not in message and "never-created" in message and "does not exist" in message, message
