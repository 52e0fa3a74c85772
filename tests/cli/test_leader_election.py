"""``pylog leader-election``: the JSON file and outcome lines (pure), and the request
against a real ZooKeeper where the test plays the controller (no brokers)."""

import json
import subprocess
import time

import pytest

from pylog.cli.leader_election import outcome_line, parse_election_partitions, wait_for_removal
from pylog.cluster import layout
from pylog.cluster.layout import PartitionStateNode
from pylog.cluster.reassignment_json import ReassignmentJsonError
from pylog.testing.zookeeper import zk_chroot_fixture, zookeeper_fixture
from pylog.types import TopicPartition
from tests.cli.helpers import PYLOG, pylog
from tests.cli.test_cli_mistakes import one_error_line

zookeeper = zookeeper_fixture()
zk_connect = zk_chroot_fixture()

FOO_0 = TopicPartition("foo", 0)


# -- pure ---------------------------------------------------------------------------------

def test_the_json_file_lists_partitions():
    text = '{"partitions":[{"topic":"foo","partition":1},{"topic":"bar","partition":0}]}'
    assert parse_election_partitions(text, "f.json") == [TopicPartition("foo", 1),
                                                         TopicPartition("bar", 0)]


@pytest.mark.parametrize("text, needle", [
    ("nope", "not valid JSON"),
    ('{"version":1}', 'missing key "partitions"'),
    ('{"partitions":[]}', 'the "partitions" list is empty'),
    ('{"partitions":[{"partition":0}]}', 'partitions[0]: missing key "topic"'),
    ('{"partitions":[{"topic":"foo"}]}', 'partitions[0]: missing key "partition"'),
    ('{"partitions":[{"topic":"foo","partition":0},{"topic":"foo","partition":0}]}',
     "partition foo-0 is listed twice"),
])
def test_a_malformed_json_file_is_one_line(text, needle):
    with pytest.raises(ReassignmentJsonError) as caught:
        parse_election_partitions(text, "f.json")
    assert str(caught.value).startswith("f.json: ") and needle in str(caught.value)


def test_outcome_lines():
    led = PartitionStateNode(leader=2, leader_epoch=3, isr=(2, 1), controller_epoch=1)
    assert outcome_line(FOO_0, (2, 1), led) == (
        True, "Successfully completed leader election for partitions foo-0")
    assert outcome_line(FOO_0, (3, 2), led) == (
        False, "Preferred replica 3 is not in sync for foo-0 (leader 2, isr 2,1)")
    assert outcome_line(FOO_0, (1, 2), led) == (
        False, "Preferred replica 1 did not become the leader of foo-0 (leader 2, isr 2,1)")
    assert outcome_line(FOO_0, (1, 2), None) == (
        False, "Preferred replica 1 is not in sync for foo-0 (leader none, isr none)")


class FakeNode:
    """``exists`` answers from a list of results, one per call, and fires the watch at once
    (the node changed); each call moves the clock by ``step_s``."""

    def __init__(self, results, step_s: float) -> None:
        self.results = list(results)
        self.now = 0.0
        self.step_s = step_s

    def exists(self, path, watch=None):
        self.now += self.step_s
        result = self.results.pop(0)
        if result is not None:
            watch(None)
        return result

    def clock(self) -> float:
        return self.now


def test_waiting_ends_when_the_node_is_gone_or_the_time_is_up():
    node = FakeNode([object(), object(), None], step_s=0.001)
    assert wait_for_removal(node, "/x", 1.0, clock=node.clock) is True
    assert node.results == []
    stays = FakeNode([object()] * 3, step_s=1.0)
    assert wait_for_removal(stays, "/x", 1.5, clock=stays.clock) is False


# -- against ZooKeeper --------------------------------------------------------------------

@pytest.fixture
def cluster(zk_connect):
    """Topics foo (2 partitions, preferred leaders 1 and 2) and bar (1 partition)."""
    from pylog.cluster.session import close_client, connect_client

    client = connect_client(zk_connect, session_timeout=5.0, connection_timeout=10.0)
    client.create(layout.topic_path("foo"), layout.encode_assignment({0: (1, 2), 1: (2, 1)}),
                  makepath=True)
    client.create(layout.topic_path("bar"), layout.encode_assignment({0: (3,)}), makepath=True)
    yield client
    close_client(client)


def start_election(zk_connect, *args) -> subprocess.Popen:
    return subprocess.Popen([PYLOG, "leader-election", "--zookeeper", zk_connect,
                             "--election-type", "preferred", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_for_request(client, process: subprocess.Popen) -> list:
    deadline = time.monotonic() + 30
    while client.exists(layout.PREFERRED_ELECTION) is None:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "no election request written"
        time.sleep(0.02)
    return json.loads(client.get(layout.PREFERRED_ELECTION)[0])["partitions"]


def write_state(client, tp: TopicPartition, leader: int, isr: tuple[int, ...]) -> None:
    client.create(layout.partition_state_path(tp.topic, tp.partition),
                  PartitionStateNode(leader, 1, isr, 1).encode(), makepath=True)


def test_the_request_is_written_and_success_reported(cluster, zk_connect):
    process = start_election(zk_connect, "--topic", "foo", "--partition", "0")
    assert wait_for_request(cluster, process) == [{"topic": "foo", "partition": 0}]
    write_state(cluster, FOO_0, leader=1, isr=(1, 2))  # the controller's work
    cluster.delete(layout.PREFERRED_ELECTION)
    out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert out.decode().splitlines() == [
        "Successfully completed leader election for partitions foo-0"]


def test_every_partition_and_a_preferred_replica_out_of_sync(cluster, zk_connect):
    process = start_election(zk_connect, "--all-topic-partitions")
    assert wait_for_request(cluster, process) == [
        {"topic": "bar", "partition": 0}, {"topic": "foo", "partition": 0},
        {"topic": "foo", "partition": 1}]
    write_state(cluster, TopicPartition("bar", 0), leader=3, isr=(3,))
    write_state(cluster, FOO_0, leader=2, isr=(2,))
    write_state(cluster, TopicPartition("foo", 1), leader=2, isr=(2, 1))
    cluster.delete(layout.PREFERRED_ELECTION)
    out, _ = process.communicate(timeout=30)
    assert process.returncode == 1
    assert out.decode().splitlines() == [
        "Successfully completed leader election for partitions bar-0",
        "Preferred replica 1 is not in sync for foo-0 (leader 2, isr 2)",
        "Successfully completed leader election for partitions foo-1"]


def test_partitions_from_a_json_file(cluster, zk_connect, tmp_path):
    path = tmp_path / "election.json"
    path.write_text('{"partitions":[{"topic":"foo","partition":1}]}')
    process = start_election(zk_connect, "--path-to-json-file", str(path), "--timeout-ms", "400")
    assert wait_for_request(cluster, process) == [{"topic": "foo", "partition": 1}]
    out, err = process.communicate(timeout=30)  # nobody removes the request
    assert process.returncode == 1
    assert b"did not complete the election within 400 ms" in err
    assert cluster.exists(layout.PREFERRED_ELECTION) is not None


def test_a_pending_election_is_not_overwritten(cluster, zk_connect):
    pending = layout.encode_preferred_election([("bar", 0)])
    cluster.create(layout.PREFERRED_ELECTION, pending, makepath=True)
    result = pylog("leader-election", "--zookeeper", zk_connect, "--election-type",
                   "preferred", "--topic", "foo", "--partition", "0")
    one_error_line(result, "leader-election", "a preferred replica election is already in progress")
    assert cluster.get(layout.PREFERRED_ELECTION)[0] == pending


@pytest.mark.parametrize("args, needle", [
    (("--topic", "foo", "--partition", "7"), "partition foo-7 does not exist"),
    (("--topic", "nope", "--partition", "0"), "topic 'nope' does not exist"),
    (("--topic", "foo"), "--partition: --topic and --partition go together"),
    (("--all-topic-partitions", "--partition", "0"),
     "--topic: --topic and --partition go together"),
    (("--topic", "foo", "--partition", "0", "--timeout-ms", "0"), "--timeout-ms"),
])
def test_mistakes_write_nothing(cluster, zk_connect, args, needle):
    result = pylog("leader-election", "--zookeeper", zk_connect, "--election-type", "preferred",
                   *args)
    one_error_line(result, "leader-election", needle)
    assert cluster.exists(layout.PREFERRED_ELECTION) is None


def test_unclean_elections_need_a_broker(zk_connect):
    result = pylog("leader-election", "--zookeeper", zk_connect, "--election-type", "UNCLEAN",
                   "--all-topic-partitions")
    one_error_line(result, "leader-election", "--bootstrap-server")


def test_broker_outcomes_are_reported_as_kafka_does():
    from pylog.cli.leader_election import broker_outcome_lines
    from pylog.errors import ElectionNotNeededError, EligibleLeadersNotAvailableError

    results = {TopicPartition("foo", 2): EligibleLeadersNotAvailableError("none alive"),
               TopicPartition("foo", 1): ElectionNotNeededError("broker 1 leads it"),
               FOO_0: None, TopicPartition("bar", 0): None}
    assert broker_outcome_lines("UNCLEAN", results) == [
        "Successfully completed leader election (UNCLEAN) for partitions bar-0, foo-0",
        "Valid replica already elected for partitions foo-1",
        "Error completing leader election (UNCLEAN) for partition: foo-2: "
        "ELIGIBLE_LEADERS_NOT_AVAILABLE: none alive"]
