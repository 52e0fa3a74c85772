"""Apache Kafka 4.4's own command-line tools against a pylog broker, and against real Kafka.

Each tool runs as ``java -cp <kafka jars> org.apache.kafka.tools.<Tool> ...`` (what
``kafka-topics.sh`` and its siblings run) twice, side by side: once with pylog's bootstrap and
once with a one-node Apache Kafka's. What a user sees -- stdout, the exit status, the exception
named on stderr -- must be the same once the things that differ by nature are normalised:
topic ids, node ids (pylog's broker is 0, Kafka's node 1), ports, timestamps and durations.

Known differences are left out of the assertions on purpose (see the test docstrings):
the synonyms ConfigCommand lists for ``retention.ms``,
GetOffsetShell ``--time -3`` after DeleteRecords, ``ConfigCommand --describe --all`` (pylog's
list of topic configs and some defaults are not Kafka 4.4's) and group configs (``--entity-type
groups``, which pylog refuses).
"""

from __future__ import annotations

import re

import pytest
from confluent_kafka import Producer

from pylog.testing.apache_kafka import apache_kafka_fixture
from pylog.testing.broker import broker_fixture
from pylog.testing.waiting import wait_until
from tests.peer.java_tools import TOOLS, KafkaTools, Side, error_class, error_message, rows

pytestmark = pytest.mark.slow

TOPICS = TOOLS + "TopicCommand"
CONSOLE_PRODUCER = TOOLS + "ConsoleProducer"
CONSOLE_CONSUMER = TOOLS + "consumer.ConsoleConsumer"
GROUPS = TOOLS + "consumer.group.ConsumerGroupCommand"
CONFIGS = TOOLS + "ConfigCommand"
OFFSETS = TOOLS + "GetOffsetShell"
DELETE_RECORDS = TOOLS + "DeleteRecordsCommand"
TRANSACTIONS = TOOLS + "TransactionsCommand"

# Kafka's fixture sets these in server.properties, so TopicCommand lists them as non-default
# configs of every topic; pylog's broker has no such static overrides.
KAFKA_STATIC_TOPIC_CONFIGS = {"min.insync.replicas=1", "unclean.leader.election.enable=false"}

broker = broker_fixture(scope="module", overrides={
    "num.partitions": 2, "offsets.topic.num.partitions": 2,
    "transaction.state.log.num.partitions": 2, "group.initial.rebalance.delay.ms": 0})
kafka = apache_kafka_fixture(scope="module", nodes=1)


@pytest.fixture(scope="module")
def tools(broker, kafka, tmp_path_factory):
    return KafkaTools(Side("pylog", broker.bootstrap, 0), Side("kafka", kafka.bootstrap, 1),
                      tmp_path_factory.mktemp("kafka-tools"))


def normalise_describe(text: str) -> list[str]:
    """TopicCommand --describe without the topic id, node ids and Kafka's static configs."""
    lines = []
    for line in text.splitlines():
        line = re.sub(r"TopicId: \S+", "TopicId: <id>", line)
        line = re.sub(r"(Leader|Replicas|Isr): \d+", r"\1: <node>", line)
        match = re.search(r"Configs: (\S*)", line)
        if match:
            configs = [c for c in match.group(1).split(",") if c not in KAFKA_STATIC_TOPIC_CONFIGS]
            line = line[:match.start(1)] + ",".join(sorted(configs)) + line[match.end(1):]
        lines.append(line)
    return lines


def create_topic(tools: KafkaTools, topic: str, partitions: int) -> None:
    tools.both(TOPICS, "--bootstrap-server", "{bootstrap}", "--create", "--topic", topic,
               "--partitions", str(partitions))


def test_topic_command_create_list_describe_alter_delete(tools):
    topic = ["--bootstrap-server", "{bootstrap}", "--topic", "tool-topics"]
    pylog, kafka = tools.both(TOPICS, *topic, "--create", "--partitions", "3",
                              "--config", "retention.ms=123456",
                              "--config", "cleanup.policy=delete")
    assert pylog.stdout == kafka.stdout == "Created topic tool-topics.\n"

    pylog, kafka = tools.both(TOPICS, "--bootstrap-server", "{bootstrap}", "--list")
    assert "tool-topics" in pylog.stdout.split() and "tool-topics" in kafka.stdout.split()

    pylog, kafka = tools.both(TOPICS, *topic, "--describe")
    assert normalise_describe(pylog.stdout) == normalise_describe(kafka.stdout)
    header = normalise_describe(pylog.stdout)[0]
    assert header == ("Topic: tool-topics\tTopicId: <id>\tPartitionCount: 3\t"
                      "ReplicationFactor: 1\tConfigs: cleanup.policy=delete,retention.ms=123456")
    assert len(pylog.stdout.splitlines()) == 4

    tools.both(TOPICS, *topic, "--alter", "--partitions", "5")
    pylog, kafka = tools.both(TOPICS, *topic, "--describe")
    assert normalise_describe(pylog.stdout) == normalise_describe(kafka.stdout)
    assert "PartitionCount: 5" in pylog.stdout
    assert [line.split("\t")[2] for line in pylog.stdout.splitlines()[1:]] == [
        f"Partition: {p}" for p in range(5)]

    # Refusals: same exit status, exception and message.
    pylog, kafka = tools.both(TOPICS, *topic, "--alter", "--partitions", "2", ok=False)
    assert pylog.returncode == kafka.returncode == 1
    assert error_class(pylog) == error_class(kafka) == "InvalidPartitionsException"
    assert error_message(pylog) == error_message(kafka) == (
        "The topic tool-topics currently has 5 partition(s); 2 would not be an increase.")
    pylog, kafka = tools.both(TOPICS, *topic, "--create", "--partitions", "1", ok=False)
    assert pylog.returncode == kafka.returncode == 1
    assert error_class(pylog) == error_class(kafka) == "TopicExistsException"
    assert error_message(pylog) == error_message(kafka) == "Topic 'tool-topics' already exists."

    pylog, kafka = tools.both(TOPICS, *topic, "--delete")
    assert pylog.stdout == kafka.stdout
    for side in tools.sides:
        wait_until(lambda: "tool-topics" not in tools.run(
            side, TOPICS, ["--bootstrap-server", "{bootstrap}", "--list"]).stdout.split(),
            timeout=20, message=f"tool-topics to leave --list on {side.name}")
    pylog, kafka = tools.both(TOPICS, *topic, "--describe", ok=False)
    assert pylog.returncode == kafka.returncode == 1
    assert "Topic 'tool-topics' does not exist as expected" in pylog.stderr
    assert error_class(pylog) == error_class(kafka) == "IllegalArgumentException"


def group_rows(text: str) -> list[list[str]]:
    """ConsumerGroupCommand's table, the coordinator (``host:port  (id)``) normalised."""
    text = re.sub(r"\S+:\d+\s+\(\d+\)", "<coordinator>", text)
    # Cells hold no spaces ("-" when empty) but may touch: split on any run of them.
    return [line.split() for line in text.splitlines() if line.strip()]


def test_console_round_trip_and_consumer_group(tools):
    create_topic(tools, "tool-console", 2)
    lines = "".join(f"key-{i}:value-{i}\n" for i in range(6))
    pylog, kafka = tools.both(CONSOLE_PRODUCER, "--bootstrap-server", "{bootstrap}",
                              "--topic", "tool-console", "--reader-property", "parse.key=true",
                              "--reader-property", "key.separator=:", stdin=lines)

    pylog, kafka = tools.both(
        CONSOLE_CONSUMER, "--bootstrap-server", "{bootstrap}", "--topic", "tool-console",
        "--group", "tool-group", "--from-beginning", "--max-messages", "6",
        "--timeout-ms", "30000", "--formatter-property", "print.key=true",
        "--formatter-property", "print.partition=true",
        "--formatter-property", "print.offset=true")
    assert sorted(pylog.stdout.splitlines()) == sorted(kafka.stdout.splitlines())
    consumed = rows(pylog.stdout)
    assert sorted((key, value) for _p, _o, key, value in consumed) == [
        (f"key-{i}", f"value-{i}") for i in range(6)]
    # Keys go to the same partitions (the client's murmur2) at offsets 0, 1, ... on each.
    for partition in ("Partition:0", "Partition:1"):
        offsets = [o for p, o, _k, _v in consumed if p == partition]
        assert offsets == [f"Offset:{n}" for n in range(len(offsets))]
    assert "Processed a total of 6 messages" in pylog.stderr

    group = ["--bootstrap-server", "{bootstrap}", "--group", "tool-group"]
    pylog, kafka = tools.both(GROUPS, "--bootstrap-server", "{bootstrap}", "--list")
    assert pylog.stdout.split() == kafka.stdout.split() == ["tool-group"]

    pylog, kafka = tools.both(GROUPS, *group, "--describe")
    assert group_rows(pylog.stdout) == group_rows(kafka.stdout)
    assert pylog.stderr.strip() == kafka.stderr.strip() == (
        "Consumer group 'tool-group' has no active members.")
    table = group_rows(pylog.stdout)
    assert table[0] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET",
                        "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
    ends = {row[2]: row[4] for row in table[1:]}
    assert [row[3] for row in table[1:]] == [ends[row[2]] for row in table[1:]]
    assert {row[5] for row in table[1:]} == {"0"}

    pylog, kafka = tools.both(GROUPS, *group, "--reset-offsets", "--to-earliest", "--execute",
                              "--topic", "tool-console")
    assert sorted(group_rows(pylog.stdout)) == sorted(group_rows(kafka.stdout))
    assert sorted(row[3] for row in group_rows(pylog.stdout)[1:]) == ["0", "0"]

    pylog, kafka = tools.both(GROUPS, *group, "--describe")
    assert group_rows(pylog.stdout) == group_rows(kafka.stdout)
    table = group_rows(pylog.stdout)
    assert [row[3] for row in table[1:]] == ["0", "0"]
    assert [row[5] for row in table[1:]] == [row[4] for row in table[1:]]

    pylog, kafka = tools.both(GROUPS, *group, "--describe", "--state")
    assert group_rows(pylog.stdout) == group_rows(kafka.stdout)
    assert group_rows(pylog.stdout)[1] == ["tool-group", "<coordinator>", "-", "Empty", "0"]
    pylog, kafka = tools.both(GROUPS, *group, "--describe", "--members")
    assert group_rows(pylog.stdout) == group_rows(kafka.stdout)


def test_consumer_group_with_a_live_member(tools):
    """A console consumer left running: --describe fills the member columns."""
    create_topic(tools, "tool-live", 2)
    consumers = [tools.start(side, CONSOLE_CONSUMER, [
        "--bootstrap-server", "{bootstrap}", "--topic", "tool-live", "--group", "tool-live",
        "--consumer-property", "client.id=tool-live-client"]) for side in tools.sides]
    group = ["--bootstrap-server", "{bootstrap}", "--group", "tool-live"]
    try:
        for side in tools.sides:
            wait_until(lambda: "tool-live-client" in tools.run(
                side, GROUPS, [*group, "--describe", "--members"]).stdout,
                timeout=60, interval=0.5, message=f"the live member on {side.name}")
        pylog, kafka = tools.both(GROUPS, *group, "--describe", "--members", "--verbose")
        assert member_rows(pylog.stdout) == member_rows(kafka.stdout)
        assert member_rows(pylog.stdout)[1] == [
            "tool-live", "<member>", "/127.0.0.1", "tool-live-client", "2", "-",
            "tool-live:0,1", "-", "-"]
        pylog, kafka = tools.both(GROUPS, *group, "--describe", "--state")
        assert group_rows(pylog.stdout) == group_rows(kafka.stdout)
        assert group_rows(pylog.stdout)[1] == [
            "tool-live", "<coordinator>", "range", "Stable", "1"]
        pylog, kafka = tools.both(GROUPS, *group, "--describe")
        assert member_rows(pylog.stdout) == member_rows(kafka.stdout)
        assert [row[6:] for row in member_rows(pylog.stdout)[1:]] == [
            ["<member>", "/127.0.0.1", "tool-live-client"]] * 2
    finally:
        for consumer in consumers:
            consumer.terminate()
        for consumer in consumers:
            consumer.wait(30)


def member_rows(text: str) -> list[list[str]]:
    """``group_rows`` with member ids (``<client id>-<uuid>``) normalised."""
    return [["<member>" if re.fullmatch(r"\S+-[0-9a-f-]{36}", cell) else cell for cell in row]
            for row in group_rows(text)]


def config_lines(text: str) -> list[str]:
    """ConfigCommand --describe lines up to the synonyms, which differ (see the test)."""
    return [line.split(" synonyms=")[0] for line in text.splitlines()]


def test_config_command_topic_configs(tools):
    """Not compared: the synonyms. For retention.ms pylog lists
    ``synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=86400000, DEFAULT_CONFIG:log.retention.hours=168}``
    where Kafka lists ``synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=86400000}``."""
    create_topic(tools, "tool-configs", 1)
    entity = ["--bootstrap-server", "{bootstrap}", "--entity-type", "topics",
              "--entity-name", "tool-configs"]
    pylog, kafka = tools.both(CONFIGS, *entity, "--describe")
    assert pylog.stdout == kafka.stdout == "Dynamic configs for topic tool-configs are:\n"

    pylog, kafka = tools.both(CONFIGS, *entity, "--alter", "--add-config",
                              "retention.ms=86400000,max.message.bytes=200000")
    assert pylog.stdout == kafka.stdout == "Completed updating config for topic tool-configs.\n"
    pylog, kafka = tools.both(CONFIGS, *entity, "--describe")
    assert config_lines(pylog.stdout) == config_lines(kafka.stdout) == [
        "Dynamic configs for topic tool-configs are:",
        "  max.message.bytes=200000 sensitive=false",
        "  retention.ms=86400000 sensitive=false"]
    assert ("synonyms={DYNAMIC_TOPIC_CONFIG:max.message.bytes=200000, "
            "DEFAULT_CONFIG:message.max.bytes=1048588}") in pylog.stdout
    assert "synonyms={DYNAMIC_TOPIC_CONFIG:max.message.bytes=200000, " in kafka.stdout

    tools.both(CONFIGS, *entity, "--alter", "--delete-config", "max.message.bytes")
    pylog, kafka = tools.both(CONFIGS, *entity, "--describe")
    assert config_lines(pylog.stdout) == config_lines(kafka.stdout) == [
        "Dynamic configs for topic tool-configs are:",
        "  retention.ms=86400000 sensitive=false"]

    pylog, kafka = tools.both(TOPICS, "--bootstrap-server", "{bootstrap}", "--describe",
                              "--topic", "tool-configs")
    assert normalise_describe(pylog.stdout) == normalise_describe(kafka.stdout)
    assert "Configs: retention.ms=86400000" in normalise_describe(pylog.stdout)[0]

    pylog, kafka = tools.both(CONFIGS, *entity, "--alter", "--add-config", "no.such.config=1",
                              ok=False)
    assert pylog.returncode == kafka.returncode == 1
    assert error_class(pylog) == error_class(kafka) == "InvalidConfigurationException"
    assert error_message(pylog) == error_message(kafka) == "Unknown topic config name: no.such.config"


def test_config_command_group_configs(tools):
    """KIP-848 group configs (``--entity-type groups``), including their synonyms."""
    entity = ["--bootstrap-server", "{bootstrap}", "--entity-type", "groups",
              "--entity-name", "tool-group"]
    pylog, kafka = tools.both(CONFIGS, *entity, "--alter", "--add-config",
                              "consumer.session.timeout.ms=50000,share.isolation.level=read_committed")
    assert pylog.stdout == kafka.stdout == "Completed updating config for group tool-group.\n"
    pylog, kafka = tools.both(CONFIGS, *entity, "--describe")
    assert pylog.stdout == kafka.stdout
    assert "consumer.session.timeout.ms=50000" in pylog.stdout
    pylog, kafka = tools.both(CONFIGS, *entity, "--alter", "--add-config",
                              "consumer.heartbeat.interval.ms=1", ok=False)
    assert pylog.returncode == kafka.returncode == 1
    assert error_message(pylog) == error_message(kafka) == (
        "consumer.heartbeat.interval.ms must be in the range 5000 to 15000 inclusive.")


BASE_TS = 1_700_000_000_000


def produce_with_timestamps(bootstrap: str, topic: str) -> None:
    """Partition 0: offsets 0-2 in one batch, 3-5 one batch each, timestamps +5 s, +9 s, +1 s
    in each half; partition 1: two records."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 100})
    shifts = [5_000, 9_000, 1_000]
    for i, shift in enumerate(shifts):
        producer.produce(topic, b"a%d" % i, partition=0, timestamp=BASE_TS + shift)
    producer.produce(topic, b"p1-0", partition=1, timestamp=BASE_TS)
    producer.produce(topic, b"p1-1", partition=1, timestamp=BASE_TS)
    assert producer.flush(30) == 0
    for i, shift in enumerate(shifts):
        producer.produce(topic, b"b%d" % i, partition=0, timestamp=BASE_TS + shift)
        assert producer.flush(30) == 0


def test_get_offset_shell_and_delete_records(tools):
    """Not compared: ``--time -3`` (max timestamp) once records were deleted. With offsets
    0-1 deleted from partition 0 (the max timestamp at offsets 1 and 4), Kafka prints
    ``tool-offsets:0:1`` (a deleted offset, still in its segment), pylog ``tool-offsets:0:4``,
    the newest record still there; for partition 1, all deleted, Kafka prints ``:1:1``,
    pylog nothing (no record left)."""
    create_topic(tools, "tool-offsets", 2)
    for side in tools.sides:
        produce_with_timestamps(side.bootstrap, "tool-offsets")

    def offsets(*args: str) -> list[str]:
        pylog, kafka = tools.both(OFFSETS, "--bootstrap-server", "{bootstrap}", *args)
        assert pylog.stdout == kafka.stdout, args
        return pylog.stdout.splitlines()

    topic = ["--topic", "tool-offsets"]
    assert offsets(*topic, "--time", "-1") == ["tool-offsets:0:6", "tool-offsets:1:2"]
    assert offsets(*topic, "--time", "-2") == ["tool-offsets:0:0", "tool-offsets:1:0"]
    assert offsets(*topic, "--time", "-3") == ["tool-offsets:0:1", "tool-offsets:1:0"]
    assert offsets("--topic-partitions", "tool-offsets:0", "--time",
                   str(BASE_TS + 6_000)) == ["tool-offsets:0:1"]
    # No record that late: the tool prints nothing for the partition.
    assert offsets("--topic-partitions", "tool-offsets:0", "--time", str(BASE_TS + 60_000)) == []

    plan = tools.work_dir / "delete-records.json"
    plan.write_text('{"version": 1, "partitions": ['
                    '{"topic": "tool-offsets", "partition": 0, "offset": 2},'
                    '{"topic": "tool-offsets", "partition": 1, "offset": -1}]}')
    pylog, kafka = tools.both(DELETE_RECORDS, "--bootstrap-server", "{bootstrap}",
                              "--offset-json-file", str(plan))
    assert sorted(pylog.stdout.splitlines()) == sorted(kafka.stdout.splitlines()) == sorted([
        "Executing records delete operation", "Records delete operation completed:",
        "partition: tool-offsets-0\tlow_watermark: 2",
        "partition: tool-offsets-1\tlow_watermark: 2"])

    assert offsets(*topic, "--time", "-2") == ["tool-offsets:0:2", "tool-offsets:1:2"]
    assert offsets(*topic, "--time", "-1") == ["tool-offsets:0:6", "tool-offsets:1:2"]
    assert offsets("--topic-partitions", "tool-offsets:0", "--time",
                   str(BASE_TS)) == ["tool-offsets:0:2"]
    pylog, _ = tools.both(OFFSETS, "--bootstrap-server", "{bootstrap}", *topic, "--time", "-3")
    assert pylog.stdout.splitlines() == ["tool-offsets:0:4"]


def transaction_rows(text: str) -> list[list[str]]:
    """TransactionsCommand's table, with coordinator ids, times and durations normalised."""
    table = rows(text)
    if not table:
        return table
    header, volatile = table[0], {"Coordinator", "CoordinatorId", "LastTimestamp",
                                  "CurrentTransactionStartTimeMs", "TransactionDurationMs"}
    return [header] + [["<v>" if name in volatile else cell for name, cell in zip(header, row)]
                       for row in table[1:]]


def test_transactions_command(tools):
    create_topic(tools, "tool-txn", 2)
    producers = []
    for side in tools.sides:
        producer = Producer({"bootstrap.servers": side.bootstrap,
                             "transactional.id": "tool-txn-id"})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce("tool-txn", b"committed", partition=0)
        producer.commit_transaction(30)
        producer.begin_transaction()
        producer.produce("tool-txn", b"open", partition=1)
        assert producer.flush(30) == 0
        producers.append(producer)
    try:
        pylog, kafka = tools.both(TRANSACTIONS, "--bootstrap-server", "{bootstrap}", "list")
        assert transaction_rows(pylog.stdout) == transaction_rows(kafka.stdout)
        table = transaction_rows(pylog.stdout)
        assert table[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
        assert [row[0] for row in table[1:]] == ["tool-txn-id"]
        assert table[1][3] == "Ongoing"
        producer_id = table[1][2]

        pylog, kafka = tools.both(TRANSACTIONS, "--bootstrap-server", "{bootstrap}",
                                  "describe", "--transactional-id", "tool-txn-id")
        assert transaction_rows(pylog.stdout) == transaction_rows(kafka.stdout)
        assert transaction_rows(pylog.stdout)[1] == [
            "<v>", "tool-txn-id", producer_id, "0", "Ongoing", "60000", "<v>", "<v>",
            "tool-txn-1"]

        pylog, kafka = tools.both(TRANSACTIONS, "--bootstrap-server", "{bootstrap}",
                                  "describe-producers", "--topic", "tool-txn",
                                  "--partition", "1")
        assert transaction_rows(pylog.stdout) == transaction_rows(kafka.stdout)
        assert transaction_rows(pylog.stdout)[1:] == [
            [producer_id, "0", "-1", "0", "<v>", "0"]]

        pylog, kafka = tools.both(TRANSACTIONS, "--bootstrap-server", "{bootstrap}",
                                  "find-hanging", "--broker-id", "{broker_id}")
        assert transaction_rows(pylog.stdout) == transaction_rows(kafka.stdout)
        assert len(transaction_rows(pylog.stdout)) == 1  # the header: nothing hanging
    finally:
        for producer in producers:
            producer.abort_transaction(30)
