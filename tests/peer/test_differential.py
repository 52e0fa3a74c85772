"""Differential checks: the same requests, edge cases and mistakes included, to a pylog broker
and to a one-node Apache Kafka 4.4, at the same API version; the error codes each answers
must be the same.

Each case builds its request from what the side it goes to knows (its own leader epochs and
producer ids), sends it with pylog's wire client, and reduces the response to its error
codes in order (top level, then per topic and partition, as the response lists them) plus
whatever else the case names. Differences that remain on purpose are listed in
``KNOWN_DIFFERENCES`` with the reason, and asserted to be exactly that, so a change on
either side shows up.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass
from typing import Callable

import pytest

from pylog.client.connection import BrokerConnection
from pylog.protocol import ApiKey
from pylog.records import build_batch
from pylog.testing.apache_kafka import apache_kafka_fixture
from pylog.testing.broker import broker_fixture
from pylog.testing.waiting import wait_until

TOPIC, SMALL = "diff", "diff-small"  # SMALL: max.message.bytes=2000

broker = broker_fixture(scope="module", overrides={
    "num.partitions": 2, "offsets.topic.num.partitions": 2, "auto.create.topics.enable": "false",
    "transaction.state.log.num.partitions": 2, "group.initial.rebalance.delay.ms": 0,
    "transaction.max.timeout.ms": 900000})
kafka = apache_kafka_fixture(scope="module", nodes=1,
                             overrides={"auto.create.topics.enable": "false"})


@dataclass
class Side:
    name: str
    host: str
    port: int

    def connect(self) -> BrokerConnection:
        connection = BrokerConnection(self.host, self.port, client_id="differential",
                                      timeout_s=30)
        connection.connect()
        return connection

    def call(self, api_key: int, body: dict, version: int) -> dict:
        connection = self.connect()
        try:
            return connection.request(api_key, body, version)
        finally:
            connection.close()

    def leader_epoch(self, topic: str, partition: int = 0) -> int:
        response = self.call(ApiKey.METADATA, {"topics": [{"name": topic}],
                                               "allow_auto_topic_creation": False,
                                               "include_topic_authorized_operations": False}, 9)
        [meta] = response["topics"]
        return next(p["leader_epoch"] for p in meta["partitions"]
                    if p["partition_index"] == partition)

    def has_leaders(self, *topics: str) -> bool:
        response = self.call(ApiKey.METADATA, {"topics": [{"name": t} for t in topics],
                                               "allow_auto_topic_creation": False,
                                               "include_topic_authorized_operations": False}, 9)
        return all(t["error_code"] == 0 and t["partitions"] and
                   all(p["leader_id"] >= 0 for p in t["partitions"])
                   for t in response["topics"])

    def producer_id(self, transactional_id: str | None = None) -> tuple[int, int]:
        """A new producer id and epoch; the coordinator may still be loading (14) a moment."""
        body = {"transactional_id": transactional_id, "transaction_timeout_ms": 60000}
        response = wait_until(lambda: (lambda r: r if r["error_code"] not in (14, 15, 16)
                                       else None)(self.call(ApiKey.INIT_PRODUCER_ID, body, 1)),
                              message=f"{self.name}'s InitProducerId")
        assert response["error_code"] == 0, (self.name, response)
        return response["producer_id"], response["producer_epoch"]


def sides_of(broker, kafka) -> tuple[Side, Side]:
    host, port = broker.bootstrap.rsplit(":", 1)
    khost, kport = kafka.bootstrap.split(",")[0].rsplit(":", 1)
    return Side("pylog", host, int(port)), Side("kafka", khost, int(kport))


@pytest.fixture(scope="module")
def sides(broker, kafka):
    pair = sides_of(broker, kafka)
    for side in pair:
        response = side.call(ApiKey.CREATE_TOPICS, {"topics": [
            create_topic(TOPIC, 2), create_topic(SMALL, 1, {"max.message.bytes": "2000"})],
            "timeout_ms": 30000, "validate_only": False}, 4)
        assert [t["error_code"] for t in response["topics"]] == [0, 0], (side.name, response)
        wait_until(lambda: side.has_leaders(TOPIC, SMALL), message=f"{side.name}'s leaders")
        for partition in (0, 1):  # a partition not led yet answers NOT_LEADER: try again
            wait_until(lambda: codes(side.call(ApiKey.PRODUCE, produce(
                TOPIC, {partition: batch(10)}), 8)) == [0], message=f"{side.name}'s produce")
        # The group and transaction coordinators exist (Kafka creates their topics on the
        # first FindCoordinator): the cases below meet a coordinator, not its absence.
        for key_type in (0, 1):
            wait_until(lambda: side.call(ApiKey.FIND_COORDINATOR, {
                "key": "any", "key_type": key_type}, 2)["error_code"] == 0, timeout=60,
                message=f"{side.name}'s coordinator of type {key_type}")
    return pair


def create_topic(name: str, partitions: int, configs: dict | None = None,
                 replication: int = 1) -> dict:
    return {"name": name, "num_partitions": partitions, "replication_factor": replication,
            "assignments": [], "configs": [{"name": k, "value": v}
                                           for k, v in (configs or {}).items()]}


def batch(count: int, size: int = 10, **options) -> bytes:
    now = int(time.time() * 1000)
    return build_batch([(None, b"v" * size, (), now) for _ in range(count)], **options)


def produce(topic: str, partitions: dict[int, bytes], acks: int = -1,
            transactional_id: str | None = None) -> dict:
    return {"transactional_id": transactional_id, "acks": acks, "timeout_ms": 10000,
            "topic_data": [{"name": topic, "partition_data": [
                {"index": p, "records": r} for p, r in partitions.items()]}]}


def fetch(topic: str, partition: int, offset: int, epoch: int = -1) -> dict:
    return {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
                {"topic": topic, "partitions": [
                    {"partition": partition, "fetch_offset": offset, "current_leader_epoch": epoch,
                     "log_start_offset": -1, "last_fetched_epoch": -1,
                     "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""}


def list_offsets(topic: str, partition: int, timestamp: int, epoch: int = -1) -> dict:
    return {"replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
        {"partition_index": partition, "current_leader_epoch": epoch, "timestamp": timestamp,
         "max_num_offsets": 1}]}]}


def codes(response: dict, offsets: bool = False) -> list[int]:
    """Every error code (``error_code``, ``partition_error_code``) in the response, depth
    first in the order it lists them; with ``offsets``, ListOffsets' offsets too."""
    found = []

    def walk(value):
        if isinstance(value, dict):
            for key, item in value.items():
                if key.endswith("error_code") or (offsets and key == "offset"):
                    found.append(item)
                else:
                    walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
    walk(response)
    return found


def corrupt(records: bytes) -> bytes:
    """A batch whose CRC no longer matches: one byte of its last record flipped."""
    data = bytearray(records)
    data[-1] ^= 0xFF
    return bytes(data)


def with_magic(records: bytes, magic: int) -> bytes:
    data = bytearray(records)
    data[16] = magic
    return bytes(data)


def with_length(records: bytes, delta: int) -> bytes:
    """A batch whose length field disagrees with the bytes that follow."""
    length = struct.unpack_from(">i", records, 8)[0]
    return records[:8] + struct.pack(">i", length + delta) + records[12:]


# Each case: (api key, version, body built for a side). The same version goes to both.
Case = tuple[int, int, Callable[[Side], dict]]
CASES: dict[str, Case] = {
    # Metadata
    "metadata-unknown-topic": (ApiKey.METADATA, 9, lambda s: {
        "topics": [{"name": "no-such-topic"}], "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False}),
    "metadata-invalid-name": (ApiKey.METADATA, 9, lambda s: {
        "topics": [{"name": "bad name!"}], "allow_auto_topic_creation": True,
        "include_topic_authorized_operations": False}),
    # Produce
    "produce-unknown-topic": (ApiKey.PRODUCE, 8, lambda s: produce("no-such-topic", {0: batch(1)})),
    "produce-unknown-partition": (ApiKey.PRODUCE, 8, lambda s: produce(TOPIC, {7: batch(1)})),
    "produce-invalid-acks": (ApiKey.PRODUCE, 8, lambda s: produce(TOPIC, {0: batch(1)}, acks=5)),
    "produce-too-large": (ApiKey.PRODUCE, 8, lambda s: produce(SMALL, {0: batch(1, 5000)})),
    "produce-corrupt-crc": (ApiKey.PRODUCE, 8, lambda s: produce(TOPIC, {0: corrupt(batch(3))})),
    "produce-magic-1": (ApiKey.PRODUCE, 8, lambda s: produce(TOPIC, {0: with_magic(batch(1), 1)})),
    "produce-short-length": (ApiKey.PRODUCE, 8,
                             lambda s: produce(TOPIC, {0: with_length(batch(2), -5)})),
    "produce-transactional-without-transaction": (ApiKey.PRODUCE, 8, lambda s: produce(
        TOPIC, {0: batch(1, producer_id=s.producer_id()[0], producer_epoch=0, base_sequence=0,
                         is_transactional=True)})),
    "produce-idempotent-sequence-gap": (ApiKey.PRODUCE, 8, lambda s: produce(
        TOPIC, {0: batch(1, producer_id=s.producer_id()[0], producer_epoch=0,
                         base_sequence=5)})),
    "produce-unknown-producer-id": (ApiKey.PRODUCE, 8, lambda s: produce(
        TOPIC, {0: batch(1, producer_id=987654321, producer_epoch=0, base_sequence=3)})),
    "produce-transactional-id-not-initialised": (ApiKey.PRODUCE, 8, lambda s: produce(
        TOPIC, {0: batch(1, producer_id=987654321, producer_epoch=0, base_sequence=0,
                         is_transactional=True)}, transactional_id="never-initialised")),
    # Fetch
    "fetch-unknown-topic": (ApiKey.FETCH, 11, lambda s: fetch("no-such-topic", 0, 0)),
    "fetch-offset-past-end": (ApiKey.FETCH, 11, lambda s: fetch(TOPIC, 0, 1000)),
    "fetch-negative-offset": (ApiKey.FETCH, 11, lambda s: fetch(TOPIC, 0, -5)),
    "fetch-at-end": (ApiKey.FETCH, 11, lambda s: fetch(TOPIC, 1, 10)),
    "fetch-future-epoch": (ApiKey.FETCH, 11,
                           lambda s: fetch(TOPIC, 0, 0, s.leader_epoch(TOPIC) + 1)),
    "fetch-old-epoch": (ApiKey.FETCH, 11,
                        lambda s: fetch(TOPIC, 0, 0, s.leader_epoch(TOPIC) - 1)),
    # ListOffsets
    "list-offsets-unknown-topic": (ApiKey.LIST_OFFSETS, 7,
                                   lambda s: list_offsets("no-such-topic", 0, -1)),
    "list-offsets-unknown-partition": (ApiKey.LIST_OFFSETS, 7,
                                       lambda s: list_offsets(TOPIC, 9, -1)),
    "list-offsets-future-epoch": (ApiKey.LIST_OFFSETS, 7, lambda s: list_offsets(
        TOPIC, 0, -1, s.leader_epoch(TOPIC) + 1)),
    "list-offsets-bad-timestamp": (ApiKey.LIST_OFFSETS, 7,
                                   lambda s: list_offsets(TOPIC, 0, -7)),
    "list-offsets-bad-timestamp-v9": (ApiKey.LIST_OFFSETS, 9,
                                      lambda s: list_offsets(TOPIC, 0, -7)),
    "list-offsets-max-timestamp-v6": (ApiKey.LIST_OFFSETS, 6,
                                      lambda s: list_offsets(TOPIC, 0, -3)),
    "list-offsets-max-timestamp-v7": (ApiKey.LIST_OFFSETS, 7,
                                      lambda s: list_offsets(TOPIC, 0, -3)),
    "list-offsets-earliest-local-v7": (ApiKey.LIST_OFFSETS, 7,
                                       lambda s: list_offsets(TOPIC, 0, -4)),
    "list-offsets-earliest-local-v8": (ApiKey.LIST_OFFSETS, 8,
                                       lambda s: list_offsets(TOPIC, 0, -4)),
    "list-offsets-latest-tiered-v8": (ApiKey.LIST_OFFSETS, 8,
                                      lambda s: list_offsets(TOPIC, 0, -5)),
    "list-offsets-latest-tiered-v9": (ApiKey.LIST_OFFSETS, 9,
                                      lambda s: list_offsets(TOPIC, 0, -5)),
    # OffsetForLeaderEpoch
    "offset-for-unknown-epoch": (ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, lambda s: {
        "replica_id": -1, "topics": [{"topic": TOPIC, "partitions": [
            {"partition": 0, "current_leader_epoch": s.leader_epoch(TOPIC) + 3,
             "leader_epoch": 0}]}]}),
    # Topics
    "create-existing": (ApiKey.CREATE_TOPICS, 4, lambda s: {
        "topics": [create_topic(TOPIC, 1)], "timeout_ms": 5000, "validate_only": False}),
    "create-zero-partitions": (ApiKey.CREATE_TOPICS, 4, lambda s: {
        "topics": [create_topic("zero-partitions", 0)], "timeout_ms": 5000,
        "validate_only": True}),
    "create-too-many-replicas": (ApiKey.CREATE_TOPICS, 4, lambda s: {
        "topics": [create_topic("too-many", 1, replication=5)], "timeout_ms": 5000,
        "validate_only": True}),
    "create-invalid-name": (ApiKey.CREATE_TOPICS, 4, lambda s: {
        "topics": [create_topic("bad/name", 1)], "timeout_ms": 5000, "validate_only": True}),
    "create-unknown-config": (ApiKey.CREATE_TOPICS, 4, lambda s: {
        "topics": [create_topic("bad-config", 1, {"no.such.config": "1"})], "timeout_ms": 5000,
        "validate_only": True}),
    "create-bad-config-value": (ApiKey.CREATE_TOPICS, 4, lambda s: {
        "topics": [create_topic("bad-value", 1, {"retention.ms": "soon"})], "timeout_ms": 5000,
        "validate_only": True}),
    "delete-unknown-topic": (ApiKey.DELETE_TOPICS, 4, lambda s: {
        "topic_names": ["no-such-topic"], "timeout_ms": 5000}),
    "create-partitions-fewer": (ApiKey.CREATE_PARTITIONS, 1, lambda s: {
        "topics": [{"name": TOPIC, "count": 1, "assignments": None}], "timeout_ms": 5000,
        "validate_only": True}),
    "create-partitions-unknown-topic": (ApiKey.CREATE_PARTITIONS, 1, lambda s: {
        "topics": [{"name": "no-such-topic", "count": 3, "assignments": None}],
        "timeout_ms": 5000, "validate_only": True}),
    "delete-records-past-end": (ApiKey.DELETE_RECORDS, 2, lambda s: {
        "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "offset": 999}]}],
        "timeout_ms": 5000}),
    "describe-configs-unknown-topic": (ApiKey.DESCRIBE_CONFIGS, 4, lambda s: {
        "resources": [{"resource_type": 2, "resource_name": "no-such-topic",
                       "configuration_keys": None}],
        "include_synonyms": False, "include_documentation": False}),
    # Groups
    "join-bad-session-timeout": (ApiKey.JOIN_GROUP, 5, lambda s: {
        "group_id": "g-timeout", "session_timeout_ms": 1, "rebalance_timeout_ms": 1000,
        "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}]}),
    "join-no-protocols": (ApiKey.JOIN_GROUP, 5, lambda s: {
        "group_id": "g-none", "session_timeout_ms": 10000, "rebalance_timeout_ms": 1000,
        "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
        "protocols": []}),
    "heartbeat-unknown-group": (ApiKey.HEARTBEAT, 3, lambda s: {
        "group_id": "g-never", "generation_id": 1, "member_id": "m", "group_instance_id": None}),
    "sync-unknown-member": (ApiKey.SYNC_GROUP, 3, lambda s: {
        "group_id": "g-never", "generation_id": 1, "member_id": "m", "group_instance_id": None,
        "assignments": []}),
    "leave-unknown-group": (ApiKey.LEAVE_GROUP, 3, lambda s: {
        "group_id": "g-never", "members": [{"member_id": "m", "group_instance_id": None}]}),
    "commit-unknown-member": (ApiKey.OFFSET_COMMIT, 7, lambda s: {
        "group_id": "g-never", "generation_id_or_member_epoch": 3, "member_id": "m",
        "group_instance_id": None, "topics": [{"name": TOPIC, "partitions": [
            {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
             "committed_metadata": None}]}]}),
    "commit-simple-to-unknown-topic": (ApiKey.OFFSET_COMMIT, 7, lambda s: {
        "group_id": "g-simple", "generation_id_or_member_epoch": -1, "member_id": "",
        "group_instance_id": None, "topics": [{"name": "no-such-topic", "partitions": [
            {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
             "committed_metadata": None}]}]}),
    "fetch-offsets-unknown-group": (ApiKey.OFFSET_FETCH, 7, lambda s: {
        "group_id": "g-never", "topics": [{"name": TOPIC, "partition_indexes": [0]}],
        "require_stable": False}),
    "describe-unknown-group": (ApiKey.DESCRIBE_GROUPS, 5, lambda s: {
        "groups": ["g-never"], "include_authorized_operations": False}),
    "delete-unknown-group": (ApiKey.DELETE_GROUPS, 2, lambda s: {"groups_names": ["g-never"]}),
    # Transactions
    "init-producer-id-timeout-too-long": (ApiKey.INIT_PRODUCER_ID, 1, lambda s: {
        "transactional_id": f"t-long-{s.name}", "transaction_timeout_ms": 10**9}),
    "end-txn-unknown-transactional-id": (ApiKey.END_TXN, 1, lambda s: {
        "transactional_id": "t-never", "producer_id": 5, "producer_epoch": 0,
        "committed": True}),
    "add-partitions-wrong-epoch": (ApiKey.ADD_PARTITIONS_TO_TXN, 1, lambda s: (lambda pid: {
        "v3_and_below_transactional_id": f"t-epoch-{s.name}", "v3_and_below_producer_id": pid[0],
        "v3_and_below_producer_epoch": pid[1] + 1,
        "v3_and_below_topics": [{"name": TOPIC, "partitions": [0]}]})(
            s.producer_id(f"t-epoch-{s.name}"))),
    "add-partitions-unknown-topic": (ApiKey.ADD_PARTITIONS_TO_TXN, 1, lambda s: (lambda pid: {
        "v3_and_below_transactional_id": f"t-topic-{s.name}", "v3_and_below_producer_id": pid[0],
        "v3_and_below_producer_epoch": pid[1],
        "v3_and_below_topics": [{"name": "no-such-topic", "partitions": [0]},
                                {"name": TOPIC, "partitions": [0]}]})(
            s.producer_id(f"t-topic-{s.name}"))),
    "txn-offset-commit-without-transaction": (ApiKey.TXN_OFFSET_COMMIT, 2, lambda s: (
        lambda pid: {
            "transactional_id": f"t-offsets-{s.name}", "group_id": "g-txn",
            "producer_id": pid[0], "producer_epoch": pid[1], "topics": [
                {"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                "committed_leader_epoch": -1,
                                                "committed_metadata": None}]}]})(
            s.producer_id(f"t-offsets-{s.name}"))),
}

# Cases whose responses list topics in no defined order (Kafka answers from a map).
UNORDERED = {"add-partitions-unknown-topic"}
# case -> (pylog's codes, Kafka's codes, why they differ).
KNOWN_DIFFERENCES: dict[str, tuple[list[int], list[int], str]] = {}


@pytest.mark.parametrize("case", sorted(CASES))
def test_same_answer(sides, case):
    api_key, version, build = CASES[case]
    answers = [codes(side.call(api_key, build(side), version), offsets=True) for side in sides]
    if case in UNORDERED:
        answers = [sorted(answer) for answer in answers]
    if case in KNOWN_DIFFERENCES:
        pylog, kafka, why = KNOWN_DIFFERENCES[case]
        assert answers == [pylog, kafka], f"the known difference changed ({why})"
    else:
        assert answers[0] == answers[1], f"pylog answered {answers[0]}, Kafka {answers[1]}"


# -- group configs (resource type 32): whole responses, not only their codes -------------

GROUP_CONFIG = 32


def _group_configs_session(side: Side) -> list:
    """A group's configs through describe, set, bad values, delete and APPEND, each
    response reduced to what an admin tool shows (no documentation, no message wording
    beyond Kafka's)."""
    def describe(keys=None, group="dc-group") -> dict:
        response = side.call(ApiKey.DESCRIBE_CONFIGS, {"resources": [
            {"resource_type": GROUP_CONFIG, "resource_name": group, "configuration_keys": keys}],
            "include_synonyms": True, "include_documentation": False}, 4)
        [result] = response["results"]
        return {"error_code": result["error_code"], "configs": sorted(
            (c["name"], c["value"], c["config_source"], c["config_type"], c["read_only"],
             tuple((s["name"], s["value"], s["source"]) for s in c["synonyms"]))
            for c in result["configs"])}

    def alter(name: str, value: str | None, operation: int = 0, group="dc-group",
              validate_only: bool = False) -> tuple[int, str | None]:
        response = side.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, {"resources": [
            {"resource_type": GROUP_CONFIG, "resource_name": group, "configs": [
                {"name": name, "config_operation": operation, "value": value}]}],
            "validate_only": validate_only}, 1)
        [result] = response["responses"]
        return result["error_code"], result["error_message"]

    return [
        describe(),
        describe(group=""),
        alter("consumer.session.timeout.ms", "50000"),
        alter("share.record.lock.duration.ms", "20000", validate_only=True),
        describe(["consumer.session.timeout.ms", "share.record.lock.duration.ms"]),
        alter("consumer.session.timeout.ms", "1000"),
        alter("consumer.heartbeat.interval.ms", "abc"),
        alter("streams.num.standby.replicas", "3"),
        alter("share.isolation.level", "sometimes"),
        alter("share.auto.offset.reset", "by_duration:PT1H"),
        alter("no.such.config", "1"),
        alter("streams.rack.aware.assignment.tags", "a", operation=2),
        alter("consumer.session.timeout.ms", "50000", group=""),
        alter("consumer.session.timeout.ms", None, operation=1),
        describe(["consumer.session.timeout.ms", "share.auto.offset.reset"]),
    ]


def test_group_configs_as_kafka(sides):
    pylog, kafka = (_group_configs_session(side) for side in sides)
    for step, (ours, theirs) in enumerate(zip(pylog, kafka)):
        if isinstance(ours, tuple) and ours[0] == 0:
            ours, theirs = ours[0], theirs[0]  # Kafka's message is null or "" alike
        if isinstance(ours, dict):
            assert ours == theirs, f"step {step}"
        else:
            assert ours == theirs, f"step {step}: pylog {ours}, Kafka {theirs}"
