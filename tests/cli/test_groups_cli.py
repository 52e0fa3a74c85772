"""``pylog groups`` against servers with real confluent-kafka consumers as group members.

Two servers: librdkafka's mock cluster (a Kafka-protocol server we did not write) and a
pylog broker. The mock serves FindCoordinator, OffsetCommit, OffsetFetch and ListOffsets
but not DescribeGroups, ListGroups, DeleteGroups or OffsetDelete, nor offsets by
timestamp; tests that need those run against the servers that have them.

Every server gets one module-wide setup: a topic ``live-t`` (4 partitions) read and
committed by a live group of two consumers, and a topic ``reset-t`` for resets of
groups without members. Offsets are checked with librdkafka (``Consumer.committed``).
"""

from __future__ import annotations

import contextlib
import io
import time
from dataclasses import dataclass

import confluent_kafka
import pytest

from pylog.cli.main import main
from pylog.testing.broker import BrokerProcess
from tests.client.mock_cluster import mock_cluster

SERVERS = ("mock", "pylog")
GROUP_ADMIN_SERVERS = tuple(s for s in SERVERS if s != "mock")
BROKER_OVERRIDES = {"num.partitions": 4, "group.initial.rebalance.delay.ms": 0,
                    "offsets.topic.num.partitions": 2, "offsets.topic.replication.factor": 1}
PARTITIONS = 4
LIVE_TOPIC, LIVE_GROUP = "live-t", "live"
RESET_TOPIC = "reset-t"
RECORDS = 5
EXTRA_ON_P0 = 3
# Partition 0 of reset-t: record i has timestamp T0 + i seconds.
T0_MS = 1_000_000_000_000  # 2001-09-09T01:46:40Z
RESET_RECORDS = 10


@dataclass(frozen=True)
class Server:
    name: str
    bootstrap: str
    serves_group_admin: bool  # DescribeGroups, ListGroups, DeleteGroups, OffsetDelete
    finds_by_timestamp: bool  # ListOffsets by timestamp


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    def rows(self) -> list[list[str]]:
        """The table printed on stdout, without its header, split into columns."""
        return [line.split() for line in self.out.splitlines()[1:]]


@pytest.fixture(scope="module", params=SERVERS)
def server(request, tmp_path_factory):
    if request.param == "mock":
        with mock_cluster(3) as bootstrap:
            yield Server("mock", bootstrap, serves_group_admin=False, finds_by_timestamp=False)
    else:
        with BrokerProcess(tmp_path_factory.mktemp("broker"), BROKER_OVERRIDES) as broker:
            yield Server("pylog", broker.bootstrap, serves_group_admin=True, finds_by_timestamp=True)


@pytest.fixture(scope="module")
def live(server):
    """Group ``live``: two consumers (client ids live-a, live-b) that read every record
    of live-t and committed; then 3 more records went to partition 0 (lag 3 there)."""
    produce(server.bootstrap, LIVE_TOPIC, dict.fromkeys(range(PARTITIONS), RECORDS))
    consumers = [start_consumer(server.bootstrap, LIVE_GROUP, f"live-{c}") for c in "ab"]
    try:
        read_until(consumers, dict.fromkeys(range(PARTITIONS), RECORDS))
        for consumer in consumers:
            consumer.commit(asynchronous=False)
        produce(server.bootstrap, LIVE_TOPIC, {0: EXTRA_ON_P0})
        yield consumers
    finally:
        for consumer in consumers:
            consumer.close()


@pytest.fixture(scope="module")
def reset_topic(server):
    produce(server.bootstrap, RESET_TOPIC, dict.fromkeys(range(PARTITIONS), RESET_RECORDS),
            timestamps={0: T0_MS})
    return RESET_TOPIC


# -- helpers -----------------------------------------------------------------------

def groups(server: Server | str, *args: str) -> Result:
    """``pylog groups ARGS --bootstrap-server ...``, run in this process."""
    bootstrap = server.bootstrap if isinstance(server, Server) else server
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["groups", *args, "--bootstrap-server", bootstrap])
    return Result(code, out.getvalue(), err.getvalue())


def error_line(result: Result, *needles: str) -> str:
    """The one line a mistake prints (non-zero exit, nothing else on stderr)."""
    assert result.code != 0, result
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith("pylog groups: error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def produce(bootstrap: str, topic: str, counts: dict[int, int],
            timestamps: dict[int, int] | None = None) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "log_level": 0})
    for partition, count in counts.items():
        for i in range(count):
            first = (timestamps or {}).get(partition)
            producer.produce(topic, b"record", partition=partition,
                             timestamp=0 if first is None else first + i * 1000)
    assert producer.flush(20) == 0


def start_consumer(bootstrap: str, group: str, client_id: str) -> confluent_kafka.Consumer:
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id,
        "session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "log_level": 0})
    consumer.subscribe([LIVE_TOPIC])
    return consumer


def read_until(consumers: list, positions: dict[int, int], timeout_s: float = 30.0) -> None:
    """Poll until every consumer owns partitions and, together, they own them all at
    ``positions`` (so the group is stable and has read everything)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for consumer in consumers:
            consumer.poll(0.05)
        owned = {}
        for consumer in consumers:
            assignment = consumer.assignment()
            if not assignment:
                break
            owned.update({tp.partition: tp.offset for tp in consumer.position(assignment)})
        else:
            if owned == positions:
                return
    raise AssertionError(f"the group did not read up to {positions} within {timeout_s}s")


def committed(server: Server, group: str, topic: str) -> dict[int, int | None]:
    """The group's committed offsets as librdkafka reads them (None: none committed)."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": server.bootstrap, "group.id": group,
                                         "enable.auto.commit": False, "log_level": 0})
    try:
        found = consumer.committed([confluent_kafka.TopicPartition(topic, p) for p in range(PARTITIONS)],
                                   timeout=20)
    finally:
        consumer.close()
    return {tp.partition: tp.offset if tp.offset >= 0 else None for tp in found}


def new_offsets(result: Result, group: str, topic: str) -> dict[int, int]:
    """The NEW-OFFSET column of reset-offsets, by partition."""
    assert result.out.split("\n")[0].split() == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    rows = result.rows()
    assert {(r[0], r[1]) for r in rows} == {(group, topic)}
    return {int(r[2]): int(r[3]) for r in rows}


# -- reset-offsets (every server) --------------------------------------------------

def test_reset_offsets_is_a_dry_run_by_default(server, reset_topic):
    for dry_run in ([], ["--dry-run"]):
        result = groups(server, "reset-offsets", "--group", "planned", "--topic", reset_topic,
                        "--to-latest", *dry_run)
        assert result.code == 0, result
        assert new_offsets(result, "planned", reset_topic) == dict.fromkeys(range(PARTITIONS), RESET_RECORDS)
    assert committed(server, "planned", reset_topic) == dict.fromkeys(range(PARTITIONS))


def test_reset_offsets_execute_commits_what_it_prints(server, reset_topic):
    def reset(*args: str) -> dict[int, int]:
        result = groups(server, "reset-offsets", "--group", "resets", *args, "--execute")
        assert result.code == 0, result
        return new_offsets(result, "resets", reset_topic)

    all_latest = dict.fromkeys(range(PARTITIONS), RESET_RECORDS)
    assert reset("--topic", reset_topic, "--to-latest") == all_latest
    assert committed(server, "resets", reset_topic) == all_latest

    assert reset("--topic", f"{reset_topic}:0,1", "--to-offset", "4") == {0: 4, 1: 4}
    assert reset("--topic", f"{reset_topic}:0", "--shift-by", "-3") == {0: 1}
    assert reset("--topic", f"{reset_topic}:1", "--shift-by", "2") == {1: 6}
    assert reset("--topic", f"{reset_topic}:2", "--to-earliest") == {2: 0}
    assert committed(server, "resets", reset_topic) == {0: 1, 1: 6, 2: 0, 3: RESET_RECORDS}

    # Like Kafka's tool, new offsets stay within [log start, latest].
    assert reset("--topic", f"{reset_topic}:0", "--shift-by", "-100") == {0: 0}
    assert reset("--topic", f"{reset_topic}:1", "--to-offset", "1000") == {1: RESET_RECORDS}
    assert committed(server, "resets", reset_topic) == {0: 0, 1: RESET_RECORDS, 2: 0, 3: RESET_RECORDS}


def test_reset_offsets_to_datetime(server, reset_topic):
    result = groups(server, "reset-offsets", "--group", "by-time", "--topic", reset_topic,
                    "--to-datetime", "2001-09-09T01:46:44.500+00:00", "--execute")
    assert result.code == 0, result
    if server.finds_by_timestamp:
        # Partition 0's record 5 is the first at or after T0 + 4.5 s; the other partitions
        # were written now, after it.
        expected = {0: 5, 1: 0, 2: 0, 3: 0}
    else:
        # The mock finds no offset by timestamp: Kafka's tool falls back to the latest.
        expected = dict.fromkeys(range(PARTITIONS), RESET_RECORDS)
    assert new_offsets(result, "by-time", reset_topic) == expected
    assert committed(server, "by-time", reset_topic) == expected

    future = groups(server, "reset-offsets", "--group", "by-time", "--topic", f"{reset_topic}:0",
                    "--to-datetime", "2100-01-01T00:00:00", "--execute")
    assert new_offsets(future, "by-time", reset_topic) == {0: RESET_RECORDS}


def test_reset_offsets_of_an_active_group_is_refused(server, live):
    before = committed(server, LIVE_GROUP, LIVE_TOPIC)
    result = groups(server, "reset-offsets", "--group", LIVE_GROUP, "--topic", LIVE_TOPIC,
                    "--to-earliest", "--execute")
    line = error_line(result, f"Assignments can only be reset if the group '{LIVE_GROUP}' is inactive, ")
    if server.serves_group_admin:
        assert line.endswith("but the current state is Stable.")
    else:  # no DescribeGroups: the coordinator refuses the commit itself
        assert line.endswith("but the coordinator refused: UNKNOWN_MEMBER_ID")
    assert result.out == ""
    assert committed(server, LIVE_GROUP, LIVE_TOPIC) == before == dict.fromkeys(range(PARTITIONS), RECORDS)


def test_reset_offsets_mistakes_with_a_server(server, reset_topic):
    error_line(groups(server, "reset-offsets", "--group", "m", "--topic", "no-such-topic",
                      "--to-earliest"), "no-such-topic", "does not exist")
    error_line(groups(server, "reset-offsets", "--group", "m", "--topic", f"{reset_topic}:0,7,9",
                      "--to-earliest"), f"{reset_topic}-7, {reset_topic}-9 do not exist")
    error_line(groups(server, "reset-offsets", "--group", "never-committed", "--topic",
                      f"{reset_topic}:1", "--shift-by", "1"),
               f"cannot shift the offsets of {reset_topic}-1", "no committed offset")


# -- the servers without group administration -------------------------------------

@pytest.mark.parametrize("server", [s for s in SERVERS if s == "mock"], indirect=True)
def test_a_server_without_the_group_apis_says_which_it_lacks(server):
    error_line(groups(server, "list"), "does not support LIST_GROUPS")
    error_line(groups(server, "describe", "--group", "g"), "does not support DESCRIBE_GROUPS")
    error_line(groups(server, "delete", "--group", "g"), "does not support DELETE_GROUPS")


# -- list, describe, delete (servers with group administration) --------------------

@pytest.mark.parametrize("server", GROUP_ADMIN_SERVERS, indirect=True)
def test_list(server, live, reset_topic):
    groups(server, "reset-offsets", "--group", "listed-empty", "--topic", reset_topic,
           "--to-earliest", "--execute")
    names = groups(server, "list")
    assert names.code == 0 and names.err == ""
    assert {LIVE_GROUP, "listed-empty"} <= set(names.out.split())

    states = groups(server, "list", "--state")
    assert states.out.split("\n")[0].split() == ["GROUP", "STATE"]
    assert [LIVE_GROUP, "Stable"] in states.rows() and ["listed-empty", "Empty"] in states.rows()

    stable = groups(server, "list", "--state", "stable")
    assert [LIVE_GROUP, "Stable"] in stable.rows()
    assert all(row[1] == "Stable" for row in stable.rows())
    empty = groups(server, "list", "--state", "Empty,Dead")
    assert ["listed-empty", "Empty"] in empty.rows() and LIVE_GROUP not in empty.out


@pytest.mark.parametrize("server", GROUP_ADMIN_SERVERS, indirect=True)
def test_describe_offsets_and_lag_of_a_live_group(server, live):
    members = {row[1]: row for row in groups(server, "describe", "--group", LIVE_GROUP, "--members").rows()}
    result = groups(server, "describe", "--group", LIVE_GROUP)
    assert result.code == 0 and result.err == ""
    assert result.out.split("\n")[0].split() == [
        "GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
        "HOST", "CLIENT-ID"]
    rows = sorted(result.rows(), key=lambda r: int(r[2]))
    assert [r[:6] for r in rows] == [
        [LIVE_GROUP, LIVE_TOPIC, "0", "5", "8", "3"], [LIVE_GROUP, LIVE_TOPIC, "1", "5", "5", "0"],
        [LIVE_GROUP, LIVE_TOPIC, "2", "5", "5", "0"], [LIVE_GROUP, LIVE_TOPIC, "3", "5", "5", "0"]]
    for row in rows:  # consumer id, host and client id of the member owning the partition
        assert row[6:] == [row[6], members[row[6]][2], members[row[6]][3]]
    # The range assignor gives partitions 0,1 to one member and 2,3 to the other.
    assert rows[0][6] == rows[1][6] != rows[2][6] == rows[3][6]
    assert {rows[0][8], rows[2][8]} == {"live-a", "live-b"}


@pytest.mark.parametrize("server", GROUP_ADMIN_SERVERS, indirect=True)
def test_describe_members(server, live):
    result = groups(server, "describe", "--group", LIVE_GROUP, "--members")
    assert result.code == 0 and result.err == ""
    assert result.out.split("\n")[0].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
    rows = result.rows()
    assert sorted(r[3] for r in rows) == ["live-a", "live-b"]
    assert all(r[0] == LIVE_GROUP and r[1].startswith(r[3] + "-") and r[4] == "2" for r in rows)
    assert all("127.0.0.1" in r[2] for r in rows)

    verbose = groups(server, "describe", "--group", LIVE_GROUP, "--members", "--verbose")
    assert verbose.out.split("\n")[0].split()[-1] == "ASSIGNMENT"
    assert sorted(r[5] for r in verbose.rows()) == [f"{LIVE_TOPIC}:0,1", f"{LIVE_TOPIC}:2,3"]


@pytest.mark.parametrize("server", GROUP_ADMIN_SERVERS, indirect=True)
def test_describe_state(server, live):
    result = groups(server, "describe", "--group", LIVE_GROUP, "--state")
    assert result.code == 0 and result.err == ""
    lines = result.out.splitlines()
    assert lines[0].split() == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
    group, address, broker_id, strategy, state, members = lines[1].split()
    assert (group, strategy, state, members) == (LIVE_GROUP, "range", "Stable", "2")
    assert address in server.bootstrap.split(",") and broker_id.strip("()").isdigit()


@pytest.mark.parametrize("server", GROUP_ADMIN_SERVERS, indirect=True)
def test_a_group_whose_consumers_left_is_described_and_reset(server, live):
    consumers = [start_consumer(server.bootstrap, "left", f"left-{c}") for c in "ab"]
    try:
        read_until(consumers, {0: RECORDS + EXTRA_ON_P0, 1: RECORDS, 2: RECORDS, 3: RECORDS})
        for consumer in consumers:
            consumer.commit(asynchronous=False)
    finally:
        for consumer in consumers:
            consumer.close()

    result = groups(server, "describe", "--group", "left")
    assert result.err.strip() == "Consumer group 'left' has no active members."
    assert sorted(result.rows()) == [
        ["left", LIVE_TOPIC, str(p), str(o), str(o), "0", "-", "-", "-"]
        for p, o in enumerate([RECORDS + EXTRA_ON_P0, RECORDS, RECORDS, RECORDS])]
    assert groups(server, "describe", "--group", "left", "--state").rows()[0][4:] == ["Empty", "0"]

    reset = groups(server, "reset-offsets", "--group", "left", "--topic", LIVE_TOPIC, "--to-earliest",
                   "--execute")
    assert new_offsets(reset, "left", LIVE_TOPIC) == dict.fromkeys(range(PARTITIONS), 0)
    assert committed(server, "left", LIVE_TOPIC) == dict.fromkeys(range(PARTITIONS), 0)


@pytest.mark.parametrize("server", GROUP_ADMIN_SERVERS, indirect=True)
def test_describe_a_group_that_does_not_exist(server):
    for view in ([], ["--members"], ["--state"]):
        error_line(groups(server, "describe", "--group", "nobody", *view),
                   "Consumer group 'nobody' does not exist.")


@pytest.mark.parametrize("server", GROUP_ADMIN_SERVERS, indirect=True)
def test_delete(server, live, reset_topic):
    for group in ("old-1", "old-2"):
        groups(server, "reset-offsets", "--group", group, "--topic", reset_topic, "--to-earliest",
               "--execute")
    deleted = groups(server, "delete", "--group", "old-1", "--group", "old-2")
    assert (deleted.code, deleted.err) == (0, "")
    assert deleted.out == "Deletion of requested consumer groups ('old-1', 'old-2') was successful.\n"
    assert committed(server, "old-1", reset_topic) == dict.fromkeys(range(PARTITIONS))
    error_line(groups(server, "describe", "--group", "old-1"), "does not exist")

    refused = groups(server, "delete", "--group", LIVE_GROUP)
    assert error_line(refused) == ("pylog groups: error: Deletion of some consumer groups failed: "
                                   f"* Group '{LIVE_GROUP}' could not be deleted due to: NON_EMPTY_GROUP")
    assert groups(server, "describe", "--group", LIVE_GROUP, "--state").rows()[0][4] == "Stable"

    groups(server, "reset-offsets", "--group", "old-3", "--topic", reset_topic, "--to-earliest", "--execute")
    mixed = groups(server, "delete", "--group", "old-3", "--group", "never-was")
    error_line(mixed, "* Group 'never-was' could not be deleted due to: GROUP_ID_NOT_FOUND")
    assert mixed.out == "These consumer groups were deleted successfully: 'old-3'\n"


@pytest.mark.parametrize("server", GROUP_ADMIN_SERVERS, indirect=True)
def test_delete_offsets(server, live, reset_topic):
    groups(server, "reset-offsets", "--group", "trim", "--topic", reset_topic, "--to-latest", "--execute")
    result = groups(server, "delete-offsets", "--group", "trim", "--topic", f"{reset_topic}:0,1")
    assert result.code == 0, result
    assert sorted(result.rows()) == [[reset_topic, "0", "Successful"], [reset_topic, "1", "Successful"]]
    assert committed(server, "trim", reset_topic) == {0: None, 1: None, 2: RESET_RECORDS, 3: RESET_RECORDS}

    refused = groups(server, "delete-offsets", "--group", LIVE_GROUP, "--topic", f"{LIVE_TOPIC}:0")
    error_line(refused, f"not deleted for {LIVE_TOPIC}-0")
    assert refused.rows() == [[LIVE_TOPIC, "0", "Error:", "GROUP_SUBSCRIBED_TO_TOPIC"]]


# -- mistakes caught before connecting ------------------------------------------------

NOWHERE = "127.0.0.1:1"


@pytest.mark.parametrize("args, needle", [
    (("describe",), "--group: required for groups describe"),
    (("list", "--group", "g"), "--group: not valid with groups list"),
    (("describe", "--group", "a", "--group", "b"), "--group: groups describe takes one group"),
    (("reset-offsets", "--group", "g", "--to-earliest"), "--topic: required"),
    (("reset-offsets", "--group", "g", "--topic", "t"), "needs one of --to-earliest"),
    (("describe", "--group", "g", "--to-latest"), "--to-latest: only valid with reset-offsets"),
    (("delete", "--group", "g", "--execute"), "--execute: only valid with reset-offsets"),
    (("describe", "--group", "g", "--topic", "t"), "--topic: only valid with reset-offsets"),
    (("delete", "--group", "g", "--state"), "--state: only valid with list and describe"),
    (("describe", "--group", "g", "--state", "Stable"), "--state: takes no value with describe"),
    (("describe", "--group", "g", "--verbose"), "--verbose: only valid with describe --members"),
    (("describe", "--group", "g", "--members", "--state"), "--members: cannot be combined"),
    (("list", "--members"), "--members: only valid with describe"),
    (("list", "--state", "Sleepy"), "'Sleepy' is not a group state"),
    (("reset-offsets", "--group", "g", "--topic", "t:x", "--to-earliest"), "partitions must be numbers"),
    (("reset-offsets", "--group", "g", "--topic", "t:", "--to-earliest"), "expected TOPIC or TOPIC:P"),
    (("reset-offsets", "--group", "g", "--topic", "t:-1", "--to-earliest"), "--topic: must be between"),
    (("reset-offsets", "--group", "g", "--topic", "t", "--to-offset", "-5"), "--to-offset: must be between"),
    (("reset-offsets", "--group", "g", "--topic", "t", "--to-datetime", "yesterday"),
     "--to-datetime: 'yesterday' is not an ISO-8601 timestamp"),
    (("list", "--request-timeout-ms", "0"), "--request-timeout-ms"),
    (("list",), f"cannot connect to {NOWHERE}"),
])
def test_mistakes_are_one_line(args, needle):
    error_line(groups(NOWHERE, *args), needle)


def test_two_scenarios_or_modes_are_refused_by_the_parser(capsys):
    for args in (["--to-earliest", "--to-latest"], ["--dry-run", "--execute", "--to-earliest"]):
        with pytest.raises(SystemExit) as exited:
            main(["groups", "reset-offsets", "--group", "g", "--topic", "t", *args])
        assert exited.value.code == 2
        assert "not allowed with argument" in capsys.readouterr().err
