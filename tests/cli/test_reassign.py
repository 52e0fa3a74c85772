"""``pylog partitions reassign``: the JSON files (pure) and the three modes against a real
ZooKeeper holding hand-written broker registrations and topic assignments (no brokers)."""

import json

import pytest

from pylog.cli.reassign import (
    ReassignmentStatus, parse_broker_list, propose, reassignment_status, status_line)
from pylog.cluster import layout
from pylog.cluster.reassignment_json import (
    REASSIGN_PARTITIONS, PartitionReassignment, ReassignmentJsonError, check_against_cluster,
    decode_reassignment, encode_reassignment, parse_reassignment, parse_topics_to_move)
from pylog.errors import ConfigError, InvalidReplicationFactorError
from pylog.testing.zookeeper import zk_chroot_fixture, zookeeper_fixture
from pylog.types import TopicPartition
from tests.cli.test_cli_mistakes import one_error_line
from tests.cli.helpers import pylog

zookeeper = zookeeper_fixture()
zk_connect = zk_chroot_fixture()


def plan(*partitions) -> str:
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(r)} for t, p, r in partitions]})


# -- parsing and checking (pure) ----------------------------------------------------------

def test_a_reassignment_is_parsed_with_or_without_version_and_log_dirs():
    text = json.dumps({"partitions": [
        {"topic": "foo", "partition": 1, "replicas": [3, 1], "log_dirs": ["any", "any"]},
        {"topic": "foo", "partition": 0, "replicas": [2]}]})
    assert parse_reassignment(text, "plan.json") == [
        PartitionReassignment("foo", 1, (3, 1)), PartitionReassignment("foo", 0, (2,))]


@pytest.mark.parametrize("text, needle", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "expected a JSON object, got a list"),
    ('{"version": 2, "partitions": []}', "unsupported version 2"),
    ('{"version": 1}', 'missing key "partitions"'),
    ('{"partitions": {}}', '"partitions" must be a list, got an object'),
    ('{"partitions": []}', 'the "partitions" list is empty'),
    ('{"partitions": [7]}', "partitions[0]: expected an object, got a number"),
    ('{"partitions": [{"partition": 0, "replicas": [1]}]}', 'partitions[0]: missing key "topic"'),
    ('{"partitions": [{"topic": "", "partition": 0, "replicas": [1]}]}',
     '"topic" must be a non-empty string'),
    ('{"partitions": [{"topic": "foo", "replicas": [1]}]}', 'missing key "partition"'),
    ('{"partitions": [{"topic": "foo", "partition": -1, "replicas": [1]}]}',
     '"partition" must be a non-negative integer, got -1'),
    ('{"partitions": [{"topic": "foo", "partition": "0", "replicas": [1]}]}',
     '"partition" must be a non-negative integer, got "0"'),
    ('{"partitions": [{"topic": "foo", "partition": 0}]}',
     'partition foo-0: missing key "replicas"'),
    ('{"partitions": [{"topic": "foo", "partition": 0, "replicas": []}]}',
     "partition foo-0: the replica list is empty"),
    ('{"partitions": [{"topic": "foo", "partition": 0, "replicas": [1, true]}]}',
     "partition foo-0: a broker id must be a non-negative integer, got true"),
    ('{"partitions": [{"topic": "foo", "partition": 0, "replicas": [1, 2, 1]}]}',
     "partition foo-0: broker 1 is listed twice in replicas [1, 2, 1]"),
    ('{"partitions": [{"topic": "foo", "partition": 0, "replicas": [1]},'
     ' {"topic": "foo", "partition": 0, "replicas": [2]}]}', "partition foo-0 is listed twice"),
    ('{"partitions": [{"topic": "foo", "partition": 0, "replicas": [1, 2], "log_dirs": ["any"]}]}',
     "partition foo-0: 1 log_dirs for 2 replicas"),
    ('{"partitions": [{"topic": "foo", "partition": 0, "replicas": [1], "log_dirs": ["/d"]}]}',
     'log_dirs other than "any" are not supported'),
])
def test_malformed_reassignments_are_one_line_naming_the_file(text, needle):
    with pytest.raises(ReassignmentJsonError) as caught:
        parse_reassignment(text, "plan.json")
    message = str(caught.value)
    assert message.startswith("plan.json: ") and needle in message, message
    assert "\n" not in message
    assert isinstance(caught.value, ConfigError)


def test_topics_to_move():
    assert parse_topics_to_move('{"version":1,"topics":[{"topic":"b"},{"topic":"a"}]}',
                                "t.json") == ["b", "a"]


@pytest.mark.parametrize("text, needle", [
    ('{"version":1}', 'missing key "topics"'),
    ('{"topics":[]}', 'the "topics" list is empty'),
    ('{"topics":["foo"]}', "topics[0]: expected an object, got a string"),
    ('{"topics":[{"name":"foo"}]}', 'topics[0]: missing key "topic"'),
    ('{"topics":[{"topic":"foo"},{"topic":"foo"}]}', "topic 'foo' is listed twice"),
])
def test_malformed_topics_to_move(text, needle):
    with pytest.raises(ReassignmentJsonError, match="^t.json: .*" + needle.replace("[", r"\[")
                       .replace("]", r"\]")):
        parse_topics_to_move(text, "t.json")


CLUSTER = {"foo": {0: (1, 2), 1: (2, 3)}}


@pytest.mark.parametrize("reassignment, needle", [
    (PartitionReassignment("bar", 0, (1,)), "topic 'bar' does not exist"),
    (PartitionReassignment("foo", 2, (1,)), "partition foo-2 does not exist (the topic has 2"),
    (PartitionReassignment("foo", 0, (1, 4, 5)),
     "partition foo-0: broker(s) 4,5 are not registered (registered: 1,2,3)"),
])
def test_plans_naming_what_the_cluster_lacks_are_refused(reassignment, needle):
    with pytest.raises(ReassignmentJsonError) as caught:
        check_against_cluster([reassignment], CLUSTER, [1, 2, 3], "plan.json")
    assert needle in str(caught.value)


def test_the_node_json_is_kafkas_without_log_dirs():
    encoded = encode_reassignment([PartitionReassignment("foo", 1, (3, 1)),
                                   PartitionReassignment("foo", 0, (2,))])
    assert encoded == (b'{"version":1,"partitions":[{"topic":"foo","partition":0,"replicas":[2]},'
                       b'{"topic":"foo","partition":1,"replicas":[3,1]}]}')
    assert decode_reassignment(encoded) == [PartitionReassignment("foo", 0, (2,)),
                                            PartitionReassignment("foo", 1, (3, 1))]
    assert decode_reassignment(b'{"version":1,"partitions":[]}') == []


def test_generate_places_each_topic_with_its_replication_factor():
    current = {"foo": {0: (1, 2), 1: (2, 3), 2: (3, 1)}, "bar": {0: (1,)}}
    assert propose(current, [6, 4, 5]) == [
        PartitionReassignment("bar", 0, (4,)),
        PartitionReassignment("foo", 0, (4, 5)),
        PartitionReassignment("foo", 1, (5, 6)),
        PartitionReassignment("foo", 2, (6, 4))]
    with pytest.raises(InvalidReplicationFactorError):
        propose(current, [4])


@pytest.mark.parametrize("text", ["1,,2", "a", "1;2", "-1", ""])
def test_a_bad_broker_list(text):
    with pytest.raises(ConfigError, match="^--broker-list: expected broker ids"):
        parse_broker_list(text)


def test_a_broker_listed_twice():
    with pytest.raises(ConfigError, match="broker.s. 2 listed twice"):
        parse_broker_list("1,2,2")


def test_status_of_a_partition():
    requested = PartitionReassignment("foo", 0, (2, 3))
    pending = {TopicPartition("foo", 0)}
    assert reassignment_status(requested, pending, (1, 2)) is ReassignmentStatus.IN_PROGRESS
    assert reassignment_status(requested, set(), (2, 3)) is ReassignmentStatus.COMPLETED
    assert reassignment_status(requested, set(), (3, 2)) is ReassignmentStatus.FAILED
    assert reassignment_status(requested, set(), None) is ReassignmentStatus.FAILED
    assert status_line(requested, ReassignmentStatus.FAILED, (3, 2)) == (
        "Reassignment of partition foo-0 failed: its replicas are 3,2, expected 2,3.")


# -- against ZooKeeper ----------------------------------------------------------------------

@pytest.fixture
def cluster(zk_connect):
    """Brokers 1-4 registered and topic foo (3 partitions, 2 replicas) assigned."""
    from pylog.cluster.session import close_client, connect_client

    client = connect_client(zk_connect, session_timeout=5.0, connection_timeout=10.0)
    for broker_id in (1, 2, 3, 4):
        client.create(layout.broker_path(broker_id),
                      layout.BrokerRegistration(broker_id, "127.0.0.1", 9000 + broker_id)
                      .encode(now_ms=0), makepath=True)
    client.create(layout.topic_path("foo"),
                  layout.encode_assignment({0: (1, 2), 1: (2, 3), 2: (3, 1)}), makepath=True)
    yield client
    close_client(client)


def reassign(zk_connect, *args):
    return pylog("partitions", "reassign", "--zookeeper", zk_connect, *args)


def test_generate_prints_current_and_proposed(cluster, zk_connect, tmp_path):
    topics = tmp_path / "topics.json"
    topics.write_text('{"version":1,"topics":[{"topic":"foo"}]}')
    result = reassign(zk_connect, "--generate", "--topics-to-move-json-file", str(topics),
                      "--broker-list", "2,3,4")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.decode().splitlines()
    assert lines[0] == "Current partition replica assignment"
    assert json.loads(lines[1])["partitions"][1] == {"topic": "foo", "partition": 1,
                                                     "replicas": [2, 3]}
    assert lines[3] == "Proposed partition reassignment configuration"
    assert parse_reassignment(lines[4], "out") == [
        PartitionReassignment("foo", 0, (2, 3)), PartitionReassignment("foo", 1, (3, 4)),
        PartitionReassignment("foo", 2, (4, 2))]
    assert cluster.exists(REASSIGN_PARTITIONS) is None


def test_generate_refuses_unknown_topics_and_brokers(cluster, zk_connect, tmp_path):
    topics = tmp_path / "topics.json"
    topics.write_text('{"version":1,"topics":[{"topic":"foo"},{"topic":"nope"}]}')
    one_error_line(reassign(zk_connect, "--generate", "--topics-to-move-json-file",
                            str(topics), "--broker-list", "1,2"),
                   "partitions", "nope do not exist")
    topics.write_text('{"version":1,"topics":[{"topic":"foo"}]}')
    one_error_line(reassign(zk_connect, "--generate", "--topics-to-move-json-file",
                            str(topics), "--broker-list", "1,9"),
                   "partitions", "--broker-list", "9 are not registered")


def test_execute_writes_the_node_once_and_verify_follows_it(cluster, zk_connect, tmp_path):
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "foo", "partition": 0, "replicas": [2, 4], "log_dirs": ["any", "any"]},
        {"topic": "foo", "partition": 2, "replicas": [3, 1]}]}))

    result = reassign(zk_connect, "--execute", "--reassignment-json-file", str(plan_file))
    assert result.returncode == 0, result.stderr
    out = result.stdout.decode()
    assert ('{"version":1,"partitions":[{"topic":"foo","partition":0,"replicas":[1,2]},'
            '{"topic":"foo","partition":2,"replicas":[3,1]}]}') in out  # to roll back
    assert "Successfully started reassignment of partitions foo-0,foo-2" in out
    node, _ = cluster.get(REASSIGN_PARTITIONS)
    assert json.loads(node) == {"version": 1, "partitions": [
        {"topic": "foo", "partition": 0, "replicas": [2, 4]},
        {"topic": "foo", "partition": 2, "replicas": [3, 1]}]}

    again = reassign(zk_connect, "--execute", "--reassignment-json-file", str(plan_file))
    one_error_line(again, "partitions", "a reassignment is already in progress")
    assert cluster.get(REASSIGN_PARTITIONS)[0] == node

    # The controller finished foo-2 (already in place) and works on foo-0.
    cluster.set(REASSIGN_PARTITIONS, encode_reassignment([PartitionReassignment("foo", 0, (2, 4))]))
    result = reassign(zk_connect, "--verify", "--reassignment-json-file", str(plan_file))
    assert result.returncode == 1
    assert result.stdout.decode().splitlines()[1:] == [
        "Reassignment of partition foo-0 is still in progress.",
        "Reassignment of partition foo-2 is completed."]

    cluster.set(layout.topic_path("foo"),
                layout.encode_assignment({0: (2, 4), 1: (2, 3), 2: (3, 1)}))
    cluster.delete(REASSIGN_PARTITIONS)
    result = reassign(zk_connect, "--verify", "--reassignment-json-file", str(plan_file))
    assert result.returncode == 0, result.stdout
    assert result.stdout.decode().splitlines()[1:] == [
        "Reassignment of partition foo-0 is completed.",
        "Reassignment of partition foo-2 is completed."]


def test_verify_reports_a_reassignment_that_did_not_happen(cluster, zk_connect, tmp_path):
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(plan(("foo", 1, (4, 3))))
    result = reassign(zk_connect, "--verify", "--reassignment-json-file", str(plan_file))
    assert result.returncode == 1
    assert result.stdout.decode().splitlines()[1] == (
        "Reassignment of partition foo-1 failed: its replicas are 2,3, expected 4,3.")


@pytest.mark.parametrize("text, needle", [
    ('{"version":1,"partitions":[{"topic":"foo","partition":0,"replicas":[1,', "not valid JSON"),
    (plan(("foo", 0, (1, 9))), "broker(s) 9 are not registered"),
    (plan(("foo", 0, (1, 2)), ("foo", 5, (1, 2))), "partition foo-5 does not exist"),
    (plan(("bar", 0, (1,))), "topic 'bar' does not exist"),
    (plan(("foo", 0, (2, 2))), "broker 2 is listed twice"),
])
def test_a_bad_plan_writes_nothing(cluster, zk_connect, tmp_path, text, needle):
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(text)
    result = reassign(zk_connect, "--execute", "--reassignment-json-file", str(plan_file))
    line = one_error_line(result, "partitions", needle)
    assert str(plan_file) in line
    assert result.stdout == b""
    assert cluster.exists(REASSIGN_PARTITIONS) is None


@pytest.mark.parametrize("args, needle", [
    (("--execute",), "--reassignment-json-file: required with --execute"),
    (("--verify", "--reassignment-json-file", "/nonexistent/plan.json"),
     "cannot read /nonexistent/plan.json"),
    (("--generate", "--broker-list", "1"), "--topics-to-move-json-file: required with --generate"),
    (("--execute", "--reassignment-json-file", "p.json", "--broker-list", "1"),
     "--broker-list: not valid with --execute"),
    (("--execute", "--reassignment-json-file", "p.json", "--throttle", "1000"),
     "--throttle: needs --bootstrap-server"),
    (("--verify", "--reassignment-json-file", "p.json", "--throttle", "1000"),
     "--throttle: not valid with --verify"),
    (("--execute", "--reassignment-json-file", "p.json", "--preserve-throttles"),
     "--preserve-throttles: not valid with --execute"),
])
def test_option_mistakes_are_one_line(zk_connect, args, needle):
    one_error_line(reassign(zk_connect, *args), "partitions", needle)


def test_a_malformed_zookeeper_connect_is_one_line(tmp_path):
    one_error_line(pylog("partitions", "reassign", "--zookeeper", "/chroot-only", "--verify",
                         "--reassignment-json-file", "p.json"), "partitions", "--zookeeper")
