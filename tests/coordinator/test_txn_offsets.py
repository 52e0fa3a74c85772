"""Transactional offset commits (TxnOffsetCommit) in the group coordinator.

The replay of a ``__consumer_offsets`` partition is checked against the live group's
rules (a reload must find what was served). The rest runs against a real broker
subprocess: TxnOffsetCommit on the wire, then WriteTxnMarkers COMMIT or ABORT to the
group's ``__consumer_offsets`` partition; confluent-kafka's and kafka-python's
``committed()`` see the offsets only after COMMIT, never after ABORT; the same holds after
a SIGKILL and a restart, for committed, aborted and still-open transactions.

The tests play the transaction coordinator themselves (no AddOffsetsToTxn), so their
brokers do not verify TxnOffsetCommit with one
(``transaction.partition.verification.enable=false``; see
tests/transactions/test_verification.py).
"""

from __future__ import annotations

import random
import time

import pytest
from confluent_kafka import (
    OFFSET_INVALID, Consumer, KafkaError, KafkaException, Producer, TopicPartition)
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition

from pylog.broker.config import BrokerConfig
from pylog.broker.server import Broker
from pylog.coordinator.codes import (
    FENCED_INSTANCE_ID, ILLEGAL_GENERATION, INVALID_GROUP_ID, UNKNOWN_MEMBER_ID,
    UNKNOWN_TOPIC_OR_PARTITION, UNSTABLE_OFFSET_COMMIT)
from pylog.coordinator.group import Group, StoredOffset
from pylog.coordinator.records import (
    CONTROL_ABORT, CONTROL_COMMIT, OffsetValue, offset_key, offset_value)
from pylog.coordinator.replay import OffsetsReplay
from pylog.errors import InvalidProducerEpochError
from pylog.coordinator.store import OFFSETS_TOPIC
from pylog.protocol import ApiKey
from pylog.records.header import CONTROL_BIT, TRANSACTIONAL_BIT, BatchHeader
from pylog.records.record import Record
from pylog.testing.broker import BrokerProcess
from pylog.testing.zookeeper import zk_chroot_fixture, zookeeper_fixture
from tests.cluster.cluster_helpers import LocalCluster
from tests.broker.wire import WireClient, create_body
from tests.coordinator.members import (
    Member, commit, form_group, list_groups, wait_for_coordinator, wait_until)

GROUP = "g"
UNVERIFIED = {"transaction.partition.verification.enable": "false"}


# -- replay against the live rules ------------------------------------------------------------

def _header(base_offset: int, count: int, producer_id: int = -1,
            control: bool = False) -> BatchHeader:
    attributes = 0 if producer_id < 0 else TRANSACTIONAL_BIT | (CONTROL_BIT if control else 0)
    return BatchHeader(base_offset, 0, 0, 2, 0, attributes, count - 1, 0, 0, producer_id,
                       0, -1, count)


def _control_key(kind: int) -> bytes:
    return kind.to_bytes(2, "big", signed=True).rjust(4, b"\0")


def _offset_records(base_offset: int, entries) -> list[Record]:
    return [Record(base_offset + i, 0, offset_key(GROUP, topic, partition),
                   None if value is None else offset_value(value))
            for i, ((topic, partition), value) in enumerate(entries)]


def test_replay_finds_what_the_live_group_served():
    """Random histories of plain commits, tombstones, transactional commits and markers
    (several producers, transactions interleaved), written in log order: the live group
    applies each plain commit when it is replicated, which may be after a later marker;
    the replay reads the log in order. Both end with the same committed and pending
    offsets."""
    rng = random.Random(7)
    partitions = [("orders", p) for p in range(3)]
    for _ in range(300):
        live = Group(GROUP, 0)
        replay = OffsetsReplay()
        deferred: list = []  # plain commits written but not yet replicated
        log_offset = 0
        for _ in range(rng.randrange(1, 25)):
            kind = rng.choice(["plain", "tombstone", "txn", "txn", "commit", "abort"])
            key = rng.choice(partitions)
            producer_id = rng.randrange(3)
            value = OffsetValue(rng.randrange(1000), -1, "", 0)
            if kind == "plain":
                deferred.append((key, StoredOffset(value, log_offset)))
                replay.apply(_header(log_offset, 1), _offset_records(log_offset, [(key, value)]))
            elif kind == "tombstone":
                for pending_key, stored in deferred:  # the tombstone waits for them
                    live.commit_offset(pending_key, stored)
                deferred.clear()
                live.drop_offsets([key], written_before=log_offset)
                replay.apply(_header(log_offset, 1), _offset_records(log_offset, [(key, None)]))
            elif kind == "txn":
                live.pending_txn_offsets.setdefault(producer_id, {})[key] = StoredOffset(
                    value, log_offset)
                replay.apply(_header(log_offset, 1, producer_id),
                             _offset_records(log_offset, [(key, value)]))
            else:
                commit = kind == "commit"
                if rng.random() < 0.5:  # some plain commits are replicated before the marker
                    for pending_key, stored in deferred:
                        live.commit_offset(pending_key, stored)
                    deferred.clear()
                live.complete_txn(producer_id, commit, log_offset)
                replay.apply(_header(log_offset, 1, producer_id, control=True),
                             [Record(log_offset, 0, _control_key(
                                 CONTROL_COMMIT if commit else CONTROL_ABORT), b"\0" * 6)])
            log_offset += 1
        for pending_key, stored in deferred:
            live.commit_offset(pending_key, stored)
        assert live.offsets == replay.committed.get(GROUP, {})
        assert live.pending_txn_offsets == replay.pending_by_group().get(GROUP, {})


def test_replay_keeps_open_transactions_pending_per_producer():
    replay = OffsetsReplay()
    a, b = ("orders", 0), ("orders", 1)
    plain = OffsetValue(10, -1, "", 0)
    replay.apply(_header(0, 1), _offset_records(0, [(a, plain)]))
    replay.apply(_header(1, 2, producer_id=7),
                 _offset_records(1, [(a, OffsetValue(20, -1, "", 0)),
                                     (b, OffsetValue(21, -1, "", 0))]))
    replay.apply(_header(3, 1, producer_id=8),
                 _offset_records(3, [(b, OffsetValue(30, -1, "", 0))]))
    replay.apply(_header(4, 1, producer_id=8, control=True),
                 [Record(4, 0, _control_key(CONTROL_ABORT), b"\0" * 6)])
    assert replay.committed[GROUP] == {a: StoredOffset(plain, 0)}
    assert replay.pending_by_group().get(GROUP, {}) == {7: {a: StoredOffset(OffsetValue(20, -1, "", 0), 1),
                                            b: StoredOffset(OffsetValue(21, -1, "", 0), 1)}}
    assert replay.group_ids() == {GROUP}


# -- on the wire, against a broker subprocess ---------------------------------------------------

UNSTABLE = UNSTABLE_OFFSET_COMMIT
INVALID_PRODUCER_EPOCH = InvalidProducerEpochError.errno
TOPIC = "orders"
TXN_COMMIT_V = 3
FETCH_STABLE_V = 7


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = BrokerProcess(tmp_path_factory.mktemp("txn-offsets"), {
        "offsets.topic.num.partitions": 1, "offsets.topic.replication.factor": 1,
        "group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 1000,
        "transaction.state.log.num.partitions": 1,
        "transaction.state.log.replication.factor": 1, "transaction.state.log.min.isr": 1,
        **UNVERIFIED})
    process.start()
    try:
        with WireClient(process.bootstrap) as wire:
            wait_for_coordinator(wire, 1)
            created = wire.call(ApiKey.CREATE_TOPICS, 4, create_body(TOPIC, 4))
            assert created["topics"][0]["error_code"] == 0, created
        yield process
    finally:
        process.stop()


@pytest.fixture
def wire(broker):
    with WireClient(broker.bootstrap) as client:
        yield client


def new_producer(wire: WireClient) -> tuple[int, int]:
    """A fresh producer id and epoch (InitProducerId without a transactional id)."""
    response = wire.call(ApiKey.INIT_PRODUCER_ID, 1, {"transactional_id": None,
                                                      "transaction_timeout_ms": 60000})
    assert response["error_code"] == 0, response
    return response["producer_id"], response["producer_epoch"]


def txn_commit(wire: WireClient, group: str, producer: tuple[int, int],
               offsets: dict[int, int], version: int = TXN_COMMIT_V, generation: int = -1,
               member_id: str = "", instance_id: str | None = None,
               topic: str = TOPIC) -> dict[int, int]:
    """TxnOffsetCommit of ``{partition: offset}``; returns {partition: error code}."""
    producer_id, producer_epoch = producer
    body = {"transactional_id": f"txn-{producer_id}", "group_id": group,
            "producer_id": producer_id, "producer_epoch": producer_epoch,
            "generation_id": generation, "member_id": member_id,
            "group_instance_id": instance_id, "topics": [{"name": topic, "partitions": [
                {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1,
                 "committed_metadata": f"txn {producer_id}"} for p, o in offsets.items()]}]}
    response = wire.call(ApiKey.TXN_OFFSET_COMMIT, version, body)
    return {p["partition_index"]: p["error_code"]
            for t in response["topics"] for p in t["partitions"]}


def end_txn(wire: WireClient, producer: tuple[int, int], commit: bool) -> None:
    """WriteTxnMarkers, as the transaction coordinator sends it, to ``__consumer_offsets``
    (one partition: every group's)."""
    producer_id, producer_epoch = producer
    response = wire.call(ApiKey.WRITE_TXN_MARKERS, 1, {"markers": [{
        "producer_id": producer_id, "producer_epoch": producer_epoch,
        "transaction_result": commit, "coordinator_epoch": 0,
        "topics": [{"name": OFFSETS_TOPIC, "partition_indexes": [0]}]}]})
    errors = [p["error_code"] for m in response["markers"] for t in m["topics"]
              for p in t["partitions"]]
    assert errors == [0], response


def fetch_stable(wire: WireClient, group: str, partitions) -> dict[int, tuple[int, int]]:
    """OffsetFetch v7 with require_stable: {partition: (offset, error code)}."""
    response = wire.call(ApiKey.OFFSET_FETCH, FETCH_STABLE_V, {
        "group_id": group, "require_stable": True,
        "topics": [{"name": TOPIC, "partition_indexes": list(partitions)}]})
    assert response["error_code"] == 0, response
    return {p["partition_index"]: (p["committed_offset"], p["error_code"])
            for t in response["topics"] for p in t["partitions"]}


def settled(wire: WireClient, group: str, partitions) -> dict[int, int]:
    """The committed offsets once no partition is unstable (markers are applied by the
    coordinator's own thread, just after WriteTxnMarkers is answered)."""
    found = wait_until(lambda: (lambda r: r if all(e == 0 for _, e in r.values()) else None)(
        fetch_stable(wire, group, partitions)), what=f"stable offsets of {group}")
    return {p: offset for p, (offset, _) in found.items()}


def rdkafka_committed(broker, group: str, partitions, timeout_s: float = 20.0,
                      topic: str = TOPIC) -> dict:
    """confluent-kafka's committed() (read_committed: it asks for stable offsets and
    retries while they are not); -1001 means none."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in partitions],
                                   timeout=timeout_s)
        return {tp.partition: tp.offset for tp in found}
    finally:
        consumer.close()


def kafka_python_committed(broker, group: str, partitions, topic: str = TOPIC) -> dict:
    """kafka-python's committed() (no require_stable): None means none."""
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group,
                             enable_auto_commit=False)
    try:
        return {p: consumer.committed(KafkaTopicPartition(topic, p)) for p in partitions}
    finally:
        consumer.close()


def test_offsets_of_a_transaction_show_only_once_it_commits(broker, wire):
    group = "txn-visible"
    first = new_producer(wire)
    assert txn_commit(wire, group, first, {0: 5, 1: 6}) == {0: 0, 1: 0}
    assert fetch_stable(wire, group, [0, 1]) == {0: (-1, UNSTABLE), 1: (-1, UNSTABLE)}
    assert kafka_python_committed(broker, group, [0, 1]) == {0: None, 1: None}
    # librdkafka retries an unstable offset until the transaction ends or it gives up.
    with pytest.raises(KafkaException) as waited:
        rdkafka_committed(broker, group, [0], timeout_s=1.0)
    assert waited.value.args[0].code() == KafkaError._TIMED_OUT

    end_txn(wire, first, commit=True)
    assert settled(wire, group, [0, 1]) == {0: 5, 1: 6}
    assert rdkafka_committed(broker, group, [0, 1]) == {0: 5, 1: 6}
    assert kafka_python_committed(broker, group, [0, 1]) == {0: 5, 1: 6}

    second = new_producer(wire)
    assert txn_commit(wire, group, second, {0: 9}) == {0: 0}
    assert fetch_stable(wire, group, [0, 1]) == {0: (-1, UNSTABLE), 1: (6, 0)}
    assert kafka_python_committed(broker, group, [0]) == {0: 5}
    end_txn(wire, second, commit=False)
    assert settled(wire, group, [0, 1]) == {0: 5, 1: 6}
    assert rdkafka_committed(broker, group, [0, 1]) == {0: 5, 1: 6}
    assert kafka_python_committed(broker, group, [0, 1]) == {0: 5, 1: 6}


def test_members_are_checked_from_version_3(broker, wire):
    group = "txn-members"
    member = Member(wire, group)
    form_group([member])
    producer = new_producer(wire)
    generation = member.generation
    assert txn_commit(wire, group, producer, {0: 1}, generation=generation + 1,
                      member_id=member.member_id) == {0: ILLEGAL_GENERATION}
    assert txn_commit(wire, group, producer, {0: 1}, generation=generation,
                      member_id="someone-else") == {0: UNKNOWN_MEMBER_ID}
    assert txn_commit(wire, group, producer, {0: 1}, generation=generation,
                      member_id=member.member_id, instance_id="not-static") == {
        0: UNKNOWN_MEMBER_ID}
    assert txn_commit(wire, "", producer, {0: 1}) == {0: INVALID_GROUP_ID}
    assert txn_commit(wire, group, producer, {0: 1}, topic="no-such-topic") == {
        0: UNKNOWN_TOPIC_OR_PARTITION}
    assert fetch_stable(wire, group, [0]) == {0: (-1, 0)}  # nothing refused is pending
    # A member's commit, and before v3 (no member fields) a producer's outside the group.
    assert txn_commit(wire, group, producer, {0: 1}, generation=generation,
                      member_id=member.member_id) == {0: 0}
    assert txn_commit(wire, group, new_producer(wire), {1: 2}, version=2) == {1: 0}
    assert fetch_stable(wire, group, [0, 1]) == {0: (-1, UNSTABLE), 1: (-1, UNSTABLE)}
    assert member.leave() == 0


def test_static_members_are_fenced(broker, wire):
    group = "txn-static"
    member = Member(wire, group, instance_id="static-1")
    form_group([member])
    assert txn_commit(wire, group, new_producer(wire), {0: 1}, generation=member.generation,
                      member_id="an-older-incarnation", instance_id="static-1") == {
        0: FENCED_INSTANCE_ID}
    assert member.leave() == 0


def test_a_producer_commits_in_several_transactions_and_an_older_epoch_is_fenced(
        broker, wire):
    group = "txn-epochs"
    producer_id, epoch = new_producer(wire)
    for offset in (1, 2):  # one producer, one epoch, one transaction after the other
        assert txn_commit(wire, group, (producer_id, epoch), {0: offset}) == {0: 0}
        end_txn(wire, (producer_id, epoch), commit=True)
        assert settled(wire, group, [0]) == {0: offset}
    assert txn_commit(wire, group, (producer_id, epoch + 1), {0: 3}) == {0: 0}
    assert txn_commit(wire, group, (producer_id, epoch), {1: 4}) == {1: INVALID_PRODUCER_EPOCH}
    end_txn(wire, (producer_id, epoch + 1), commit=True)
    assert settled(wire, group, [0, 1]) == {0: 3, 1: -1}


def test_consume_transform_produce_commits_only_with_its_transactions(broker, wire):
    """confluent-kafka's consume-transform-produce loop: a group member reads, a
    transactional producer writes the transformed records and sends the consumer's
    positions with ``send_offsets_to_transaction``. The group's committed offsets move
    with the committed transaction only; an aborted one leaves them where they were."""
    source, sink, group = "ctp-in", "ctp-out", "ctp"
    for topic in (source, sink):
        created = wire.call(ApiKey.CREATE_TOPICS, 4, create_body(topic, 1))
        assert created["topics"][0]["error_code"] == 0, created
    feeder = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for n in range(9):
        feeder.produce(source, value=f"order {n}".encode(), partition=0)
    assert feeder.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", "session.timeout.ms": 6000})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "ctp-1",
                         "transaction.timeout.ms": 30000})
    producer.init_transactions(30)
    consumer.subscribe([source])

    def transform(count: int, commit: bool) -> None:
        producer.begin_transaction()
        taken = 0
        while taken < count:
            message = consumer.poll(1.0)
            if message is None or message.error():
                continue
            producer.produce(sink, value=message.value().upper(), partition=0)
            taken += 1
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), 30)
        (producer.commit_transaction if commit else producer.abort_transaction)(30)

    try:
        transform(3, commit=False)
        assert rdkafka_committed(broker, group, [0], topic=source) == {0: OFFSET_INVALID}
        consumer.seek(TopicPartition(source, 0, 0))  # redo the aborted work
        transform(3, commit=True)
        assert rdkafka_committed(broker, group, [0], topic=source) == {0: 3}
        transform(3, commit=False)
        assert rdkafka_committed(broker, group, [0], topic=source) == {0: 3}
        assert kafka_python_committed(broker, group, [0], topic=source) == {0: 3}
    finally:
        consumer.close()


class WallClock:
    """Epoch milliseconds that move only when the test says (retention is in minutes)."""

    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def test_pending_offsets_outlive_retention_and_go_with_their_group(tmp_path):
    """An offset with a transaction's offset pending does not expire, and a group with
    only pending offsets stays, until the transaction ends; deleting the group drops them,
    also for a reload that reads the transaction's COMMIT after the group's tombstones.
    In-process broker on an injected wall clock, so a minute of retention passes at once."""
    start_ms = int(time.time() * 1000)  # records as recent as the log's own clock
    wall = WallClock(start_ms)

    def start() -> Broker:
        config = BrokerConfig.from_mapping({
            "listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path / "logs"),
            "offsets.topic.num.partitions": "1", "offsets.retention.minutes": "1",
            "offsets.retention.check.interval.ms": "20", **UNVERIFIED})
        return Broker(config, wall_ms=wall).start()

    in_process = start()
    try:
        with WireClient("%s:%d" % in_process.address) as wire:
            wait_for_coordinator(wire, 1)
            created = wire.call(ApiKey.CREATE_TOPICS, 4, create_body(TOPIC, 2))
            assert created["topics"][0]["error_code"] == 0, created
            kept, doomed = new_producer(wire), new_producer(wire)
            assert commit(wire, "tool", {(TOPIC, 0): 5, (TOPIC, 1): 6}) == {
                (TOPIC, 0): 0, (TOPIC, 1): 0}
            wall.now_ms = start_ms + 50_000  # the transactions commit offsets 50 s later
            assert txn_commit(wire, "tool", kept, {0: 7}) == {0: 0}
            assert txn_commit(wire, "pending-only", kept, {0: 3}) == {0: 0}
            assert txn_commit(wire, "deleted", doomed, {1: 4}) == {1: 0}

            wall.now_ms = start_ms + 70_000  # past the retention of the plain commits
            wait_until(lambda: fetch_stable(wire, "tool", [1]) == {1: (-1, 0)},
                       what="the plain offset to expire")
            assert fetch_stable(wire, "tool", [0]) == {0: (-1, UNSTABLE)}
            assert "pending-only" in list_groups(wire)
            end_txn(wire, kept, commit=True)
            assert settled(wire, "tool", [0, 1]) == {0: 7, 1: -1}
            assert settled(wire, "pending-only", [0]) == {0: 3}

            response = wire.call(ApiKey.DELETE_GROUPS, 2, {"groups_names": ["deleted"]})
            assert response["results"][0]["error_code"] == 0, response
            end_txn(wire, doomed, commit=True)
            assert settled(wire, "deleted", [1]) == {1: -1}
    finally:
        in_process.stop()
    in_process = start()
    try:
        with WireClient("%s:%d" % in_process.address) as wire:
            wait_for_coordinator(wire, 1)
            assert fetch_stable(wire, "deleted", [1]) == {1: (-1, 0)}
            assert fetch_stable(wire, "tool", [0, 1]) == {0: (7, 0), 1: (-1, 0)}
    finally:
        in_process.stop()


def test_committed_aborted_and_open_transactions_survive_a_crash(broker, wire):
    """Four partitions of one group: a committed transaction (0), an aborted one over a
    plain commit (1), one still open (2), and a committed one overtaken by a plain commit
    written after it (3). The broker is killed and restarts from its log."""
    group = "txn-reload"
    committed, aborted, still_open, overtaken = (new_producer(wire) for _ in range(4))
    assert txn_commit(wire, group, committed, {0: 11}) == {0: 0}
    end_txn(wire, committed, commit=True)
    assert commit(wire, group, {(TOPIC, 1): 20}) == {(TOPIC, 1): 0}
    assert txn_commit(wire, group, aborted, {1: 22}) == {1: 0}
    end_txn(wire, aborted, commit=False)
    assert txn_commit(wire, group, still_open, {2: 33}) == {2: 0}
    assert txn_commit(wire, group, overtaken, {3: 50}) == {3: 0}
    assert commit(wire, group, {(TOPIC, 3): 45}) == {(TOPIC, 3): 0}
    end_txn(wire, overtaken, commit=True)
    expected = {0: (11, 0), 1: (20, 0), 2: (-1, UNSTABLE), 3: (45, 0)}
    wait_until(lambda: fetch_stable(wire, group, range(4)) == expected,
               what="the markers applied")

    broker.kill()
    broker.start()
    with WireClient(broker.bootstrap) as after:
        wait_for_coordinator(after, 1)
        assert fetch_stable(after, group, range(4)) == expected
        assert rdkafka_committed(broker, group, [0, 1, 3]) == {0: 11, 1: 20, 3: 45}
        assert kafka_python_committed(broker, group, range(4)) == {
            0: 11, 1: 20, 2: None, 3: 45}
        end_txn(after, still_open, commit=True)  # the transaction ends after the restart
        assert settled(after, group, range(4)) == {0: 11, 1: 20, 2: 33, 3: 45}


zookeeper = zookeeper_fixture()
zk_connect = zk_chroot_fixture()


def group_coordinator(cluster: LocalCluster, via: int, group: str) -> int:
    """The broker id coordinating ``group`` (asking broker ``via``) once it has loaded
    the group's partition."""
    def found():
        with WireClient(cluster.brokers[via].bootstrap) as wire:
            answer = wire.call(ApiKey.FIND_COORDINATOR, 4, {
                "key_type": 0, "coordinator_keys": [group]})["coordinators"][0]
        if answer["error_code"] or not cluster.brokers[answer["node_id"]].alive():
            return None
        with WireClient(cluster.brokers[answer["node_id"]].bootstrap) as wire:
            loaded = fetch_stable_or_error(wire, group) is not None
        return answer["node_id"] if loaded else None

    return wait_until(found, timeout_s=60, what=f"a coordinator of {group}")


def fetch_stable_or_error(wire: WireClient, group: str):
    response = wire.call(ApiKey.OFFSET_FETCH, FETCH_STABLE_V, {
        "group_id": group, "require_stable": True,
        "topics": [{"name": TOPIC, "partition_indexes": [0]}]})
    return None if response["error_code"] else response


def test_a_new_coordinator_loads_pending_offsets_and_settles_them(tmp_path, zk_connect):
    """Three brokers, ``__consumer_offsets`` replicated three times. The coordinator is
    SIGKILLed with one transaction committed and one open; the next leader of the group's
    partition loads both from its replica, takes more offsets of the open transaction
    from the same producer, and commits it when its marker arrives."""
    group = "txn-failover"
    cluster = LocalCluster(tmp_path, zk_connect, extra={
        "offsets.topic.num.partitions": 1, "offsets.topic.replication.factor": 3,
        "default.replication.factor": 3, "min.insync.replicas": 2,
        "transaction.state.log.num.partitions": 1, **UNVERIFIED}).start()
    try:
        with WireClient(cluster.bootstrap(1)) as wire:
            created = wire.call(ApiKey.CREATE_TOPICS, 4, create_body(TOPIC, 3))
            assert created["topics"][0]["error_code"] == 0, created
        first = group_coordinator(cluster, 1, group)
        with WireClient(cluster.brokers[first].bootstrap) as wire:
            committed, still_open = new_producer(wire), new_producer(wire)
            assert txn_commit(wire, group, committed, {0: 10}) == {0: 0}
            end_txn(wire, committed, commit=True)
            assert txn_commit(wire, group, still_open, {1: 20}) == {1: 0}
            assert settled(wire, group, [0]) == {0: 10}
        cluster.brokers[first].kill()
        survivors = [b for b in cluster.brokers if b != first]
        second = group_coordinator(cluster, survivors[0], group)
        assert second in survivors
        with WireClient(cluster.brokers[second].bootstrap) as wire:
            assert fetch_stable(wire, group, [0, 1]) == {0: (10, 0), 1: (-1, UNSTABLE)}
            assert txn_commit(wire, group, still_open, {2: 30}) == {2: 0}
            end_txn(wire, still_open, commit=True)
            assert settled(wire, group, [0, 1, 2]) == {0: 10, 1: 20, 2: 30}
    finally:
        cluster.close()

