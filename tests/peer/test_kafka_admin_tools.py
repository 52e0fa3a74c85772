"""Apache Kafka 4.4's AclCommand and ReassignPartitionsCommand against a three-broker pylog
cluster and a three-node Apache Kafka at once, outputs compared (see test_kafka_tools for the
one-broker tools). Both clusters run an ACL authorizer with the PLAINTEXT principal
(``User:ANONYMOUS``) as super user, so the tools may do anything and ACLs are kept and listed
by the broker.
"""

from __future__ import annotations

import json
import re
import time
import uuid

import pytest

from pylog.testing.apache_kafka import apache_kafka_fixture
from pylog.testing.waiting import wait_until
from pylog.testing.zookeeper import zookeeper_fixture
from tests.cluster.cluster_helpers import LocalCluster
from tests.peer.java_tools import TOOLS, KafkaTools, Side

pytestmark = pytest.mark.slow

ACLS = TOOLS + "AclCommand"
TOPICS = TOOLS + "TopicCommand"
REASSIGN = TOOLS + "reassign.ReassignPartitionsCommand"

zookeeper = zookeeper_fixture()
# Followers fetch at most 64 KiB of a partition at a time, so a throttled reassignment of a
# few megabytes takes minutes (see test_throttled_reassignment) on both sides.
REPLICA_FETCH_MAX_BYTES = 65536
BATCH_BYTES = 16384  # the throttled reassignment's producer batches
kafka = apache_kafka_fixture(scope="module", nodes=3, overrides={
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS", "replica.fetch.max.bytes": REPLICA_FETCH_MAX_BYTES})


@pytest.fixture(scope="module")
def pylog_cluster(zookeeper, tmp_path_factory):
    connect = f"{zookeeper.connect_string}/admin-tools-{uuid.uuid4().hex[:8]}"
    cluster = LocalCluster(tmp_path_factory.mktemp("admin-tools"), connect, extra={
        "default.replication.factor": 3, "min.insync.replicas": 2,
        "offsets.topic.num.partitions": 2, "num.partitions": 2,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS", "replica.fetch.wait.max.ms": 100,
        "replica.fetch.max.bytes": REPLICA_FETCH_MAX_BYTES}).start()
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def tools(pylog_cluster, kafka, tmp_path_factory):
    # Both clusters number their brokers 1, 2, 3: node ids need no normalising.
    return KafkaTools(Side("pylog", pylog_cluster.bootstrap(), 1),
                      Side("kafka", kafka.bootstrap, 1), tmp_path_factory.mktemp("admin-tools"))


def acl_blocks(text: str) -> dict[str, set[str]]:
    """AclCommand's output as {header line: its ACL lines}; ACLs are a set on both brokers,
    printed in no defined order."""
    blocks: dict[str, set[str]] = {}
    header = None
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.startswith(("\t", " ")):
            blocks.setdefault(header, set()).add(line.strip())
        else:
            header = line.strip()
            blocks.setdefault(header, set())
    return blocks


def test_acl_command_add_list_remove(tools):
    bootstrap = ["--bootstrap-server", "{bootstrap}"]
    pylog, kafka = tools.both(ACLS, *bootstrap, "--add", "--allow-principal", "User:alice",
                              "--operation", "Read", "--operation", "Describe",
                              "--topic", "acl-topic")
    assert acl_blocks(pylog.stdout) == acl_blocks(kafka.stdout)
    assert "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)" in (
        acl_blocks(pylog.stdout)["Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, "
                                 "name=acl-topic, patternType=LITERAL)`:"])

    tools.both(ACLS, *bootstrap, "--add", "--allow-principal", "User:bob", "--operation", "Write",
               "--topic", "logs-", "--resource-pattern-type", "prefixed")
    tools.both(ACLS, *bootstrap, "--add", "--deny-principal", "User:mallory",
               "--deny-host", "10.0.0.1", "--operation", "All", "--group", "*")
    pylog, kafka = tools.both(ACLS, *bootstrap, "--add", "--producer", "--allow-principal",
                              "User:writer", "--topic", "orders", "--transactional-id", "tx-",
                              "--resource-pattern-type", "prefixed")
    assert acl_blocks(pylog.stdout) == acl_blocks(kafka.stdout)
    pylog, kafka = tools.both(ACLS, *bootstrap, "--add", "--consumer", "--allow-principal",
                              "User:reader", "--topic", "orders", "--group", "readers")
    assert acl_blocks(pylog.stdout) == acl_blocks(kafka.stdout)

    pylog, kafka = tools.both(ACLS, *bootstrap, "--list")
    assert acl_blocks(pylog.stdout) == acl_blocks(kafka.stdout)
    assert len(acl_blocks(pylog.stdout)) == 7
    for filters in (["--topic", "acl-topic"], ["--principal", "User:writer"],
                    ["--topic", "logs-", "--resource-pattern-type", "prefixed"],
                    ["--topic", "logs-app", "--resource-pattern-type", "match"],
                    ["--group", "*"], ["--cluster"]):
        pylog, kafka = tools.both(ACLS, *bootstrap, "--list", *filters)
        assert acl_blocks(pylog.stdout) == acl_blocks(kafka.stdout), filters

    tools.both(ACLS, *bootstrap, "--remove", "--force", "--allow-principal", "User:alice",
               "--operation", "Read", "--topic", "acl-topic")
    pylog, kafka = tools.both(ACLS, *bootstrap, "--list", "--topic", "acl-topic")
    assert acl_blocks(pylog.stdout) == acl_blocks(kafka.stdout)
    assert {line.split("operation=")[1].split(",")[0] for block in
            acl_blocks(pylog.stdout).values() for line in block} == {"DESCRIBE"}
    tools.both(ACLS, *bootstrap, "--remove", "--force", "--topic", "orders")
    pylog, kafka = tools.both(ACLS, *bootstrap, "--list", "--topic", "orders")
    assert acl_blocks(pylog.stdout) == acl_blocks(kafka.stdout) == {}


def assignment_json(text: str, heading: str) -> dict:
    """The JSON document printed on the line after ``heading``, each replica's log directory
    (a path on that machine, as DescribeLogDirs gave it) replaced by ``<dir>``."""
    lines = text.splitlines()
    document = json.loads(lines[lines.index(heading) + 1])
    for partition in document["partitions"]:
        assert len(partition["log_dirs"]) == len(partition["replicas"])
        partition["log_dirs"] = ["<dir>" if d.startswith("/") else d
                                 for d in partition["log_dirs"]]
    return document


def without_dirs(text: str) -> str:
    """A tool's output with each absolute path (a replica's log directory) as ``<dir>``."""
    return re.sub(r'"/[^"]*"', '"<dir>"', text)


def replicas(tools: KafkaTools, topic: str) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """(pylog's, Kafka's) partition -> replicas, from TopicCommand --describe."""
    runs = tools.both(TOPICS, "--bootstrap-server", "{bootstrap}", "--describe", "--topic", topic)
    found = []
    for run in runs:
        parsed = {}
        for line in run.stdout.splitlines()[1:]:
            partition = int(re.search(r"Partition: (\d+)", line).group(1))
            parsed[partition] = [int(r) for r in re.search(r"Replicas: ([\d,]+)", line)
                                 .group(1).split(",")]
        found.append(parsed)
    return found[0], found[1]


def test_reassign_partitions_generate_execute_verify(tools, tmp_path):
    topic = "move-me"
    tools.both(TOPICS, "--bootstrap-server", "{bootstrap}", "--create", "--topic", topic,
               "--replica-assignment", "1:2,2:3,3:1")
    tools.both(TOOLS + "ConsoleProducer", "--bootstrap-server", "{bootstrap}", "--topic", topic,
               stdin="".join(f"record {i}\n" for i in range(300)))

    to_move = tmp_path / "topics.json"
    to_move.write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))
    pylog, kafka = tools.both(REASSIGN, "--bootstrap-server", "{bootstrap}", "--generate",
                              "--topics-to-move-json-file", str(to_move), "--broker-list", "1,2")
    current = "Current partition replica assignment"
    assert assignment_json(pylog.stdout, current) == assignment_json(kafka.stdout, current)
    proposed = assignment_json(pylog.stdout, "Proposed partition reassignment configuration")
    assert {p["partition"] for p in proposed["partitions"]} == {0, 1, 2}
    assert all(set(p["replicas"]) <= {1, 2} for p in proposed["partitions"])

    target = {0: [3, 1], 1: [1, 2], 2: [2, 3]}
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": p, "replicas": r} for p, r in target.items()]}))
    pylog, kafka = tools.both(REASSIGN, "--bootstrap-server", "{bootstrap}", "--execute",
                              "--reassignment-json-file", str(plan))
    assert without_dirs(pylog.stdout) == without_dirs(kafka.stdout)
    assert f"Successfully started partition reassignments for {topic}-0,{topic}-1,{topic}-2" \
        in pylog.stdout

    def verified():
        runs = tools.both(REASSIGN, "--bootstrap-server", "{bootstrap}", "--verify",
                          "--reassignment-json-file", str(plan))
        done = all(f"Reassignment of partition {topic}-{p} is completed." in run.stdout
                   for run in runs for p in target)
        return runs if done else None
    pylog, kafka = wait_until(verified, timeout=60, message="both reassignments to complete",
                              interval=1)
    assert pylog.stdout == kafka.stdout
    assert replicas(tools, topic) == (target, target)

    pylog, kafka = tools.both(REASSIGN, "--bootstrap-server", "{bootstrap}", "--list")
    assert pylog.stdout == kafka.stdout == "No partition reassignments found.\n"

    pylog, kafka = tools.both(TOOLS + "consumer.ConsoleConsumer", "--bootstrap-server",
                              "{bootstrap}", "--topic", topic, "--from-beginning",
                              "--max-messages", "300", "--timeout-ms", "30000")
    assert sorted(pylog.stdout.splitlines()) == sorted(kafka.stdout.splitlines()) == sorted(
        f"record {i}" for i in range(300))


def partition_sizes(tools: KafkaTools, topic: str) -> tuple[dict, dict]:
    """(pylog's, Kafka's) (broker, partition) -> bytes on disk, from LogDirsCommand."""
    runs = tools.both(TOOLS + "LogDirsCommand", "--bootstrap-server", "{bootstrap}",
                      "--describe", "--topic-list", topic)
    found = []
    for run in runs:
        document = json.loads(next(line for line in run.stdout.splitlines()
                                   if line.startswith("{")))
        found.append({(broker["broker"], int(p["partition"].rsplit("-", 1)[1])): p["size"]
                      for broker in document["brokers"] for log_dir in broker["logDirs"]
                      for p in log_dir["partitions"]})
    return found[0], found[1]


def throttle_configs(tools: KafkaTools, topic: str) -> tuple[list[str], list[str]]:
    """The throttle settings ConfigCommand shows on broker 1 and on the topic, per side."""
    shown = []
    for entity in (["--entity-type", "brokers", "--entity-name", "1"],
                   ["--entity-type", "topics", "--entity-name", topic]):
        runs = tools.both(TOOLS + "ConfigCommand", "--bootstrap-server", "{bootstrap}",
                          "--describe", *entity)
        shown.append([sorted(re.findall(r"^\s+(\w+\.replication\.throttled\.\w+)=(\S+) ",
                                        run.stdout, re.M)) for run in runs])
    return shown[0][0] + shown[1][0], shown[0][1] + shown[1][1]


def test_throttled_reassignment(tools, tmp_path):
    """``--execute --throttle``: the tool sets the rates on the brokers and the throttled
    replicas on the topic; the new replicas get their first fetch and then wait for the
    throttle (a 10 KB/s rate, 3 MB a partition: still moving while checked); the throttle
    raised with ``--additional`` lets them finish, and ``--verify`` clears every throttle."""
    from confluent_kafka import Producer

    topic = "move-throttled"
    tools.both(TOPICS, "--bootstrap-server", "{bootstrap}", "--create", "--topic", topic,
               "--replica-assignment", "1:2,2:3,3:1")
    value = b"x" * 1000
    for side in tools.sides:
        producer = Producer({"bootstrap.servers": side.bootstrap, "linger.ms": 20,
                             "acks": "all", "batch.size": BATCH_BYTES})
        for i in range(9000):
            producer.produce(topic, value, partition=i % 3)
            if i % 1000 == 0:
                producer.poll(0)
        assert producer.flush(60) == 0

    target = {0: [3, 1], 1: [1, 2], 2: [2, 3]}
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": p, "replicas": r} for p, r in target.items()]}))
    started = time.monotonic()
    pylog, kafka = tools.both(REASSIGN, "--bootstrap-server", "{bootstrap}", "--execute",
                              "--reassignment-json-file", str(plan), "--throttle", "10000")
    assert without_dirs(pylog.stdout) == without_dirs(kafka.stdout)
    assert "The inter-broker throttle limit was set to 10000 B/s" in pylog.stdout

    pylog_throttles, kafka_throttles = throttle_configs(tools, topic)
    assert pylog_throttles == kafka_throttles
    assert ("leader.replication.throttled.rate", "10000") in pylog_throttles
    assert ("follower.replication.throttled.replicas", "0:3") in [
        (key, value.split(",")[0]) for key, value in pylog_throttles]

    pylog, kafka = tools.both(REASSIGN, "--bootstrap-server", "{bootstrap}", "--verify",
                              "--reassignment-json-file", str(plan))
    assert pylog.stdout == kafka.stdout
    assert f"Reassignment of partition {topic}-0 is still in progress." in pylog.stdout
    # Each new replica gets a fetch (replica.fetch.max.bytes, 64 KiB, and the batch that
    # crosses it) of the 3 MB its partition holds whenever the throttle's 10 KB/s, measured
    # over its window (11 s), has room: a fetch or two a window. The tools take seconds each
    # on a loaded machine, so some windows have passed by now; unthrottled, the 3 MB would
    # have been copied in a second.
    pylog_sizes, kafka_sizes = partition_sizes(tools, topic)
    windows = 1 + int((time.monotonic() - started) / 11)
    allowed = 2 * (REPLICA_FETCH_MAX_BYTES + BATCH_BYTES) * windows
    for sizes in (pylog_sizes, kafka_sizes):
        assert sizes[(3, 0)] <= allowed and sizes[(3, 0)] < sizes[(1, 0)], (windows, sizes)

    tools.both(REASSIGN, "--bootstrap-server", "{bootstrap}", "--execute", "--additional",
               "--reassignment-json-file", str(plan), "--throttle", "1000000000")

    def verified():
        runs = tools.both(REASSIGN, "--bootstrap-server", "{bootstrap}", "--verify",
                          "--reassignment-json-file", str(plan))
        return runs if all("is completed" in run.stdout and "in progress" not in run.stdout
                           for run in runs) else None
    pylog, kafka = wait_until(verified, timeout=90, message="both reassignments to complete",
                              interval=1)
    assert pylog.stdout == kafka.stdout
    assert f"Clearing topic-level throttles on topic {topic}" in pylog.stdout
    assert throttle_configs(tools, topic) == ([], [])
    assert replicas(tools, topic) == (target, target)
    pylog_sizes, kafka_sizes = partition_sizes(tools, topic)
    assert pylog_sizes[(3, 0)] == pylog_sizes[(1, 0)] >= 3_000_000
