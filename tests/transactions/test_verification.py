"""Transaction verification (KIP-890 part 1) on the wire, against a standalone broker: a
transactional batch whose partition is not in its producer's transaction is refused
(INVALID_TXN_STATE) instead of opening a transaction nobody ends, and so is a
TxnOffsetCommit that AddOffsetsToTxn never announced; AddPartitionsToTxn v4/v5 with
``verify_only`` answers brokers. A broker started with
``transaction.partition.verification.enable=false`` shows the hanging transaction that
verification prevents."""

from __future__ import annotations

import time

import pytest

from pylog.client.connection import BrokerConnection
from pylog.protocol import ApiKey
from pylog.records import build_batch
from pylog.testing.broker import BrokerProcess
from tests.transactions.conftest import SMALL_INTERNAL_TOPICS, call, init_producer, wait_until
from tests.transactions.test_coordinator_wire import add_partitions, end_txn

INVALID_TXN_STATE, INVALID_PRODUCER_ID_MAPPING, TRANSACTION_ABORTABLE = 48, 49, 120
PRODUCER_FENCED, CLUSTER_AUTHORIZATION_FAILED = 90, 31
READ_COMMITTED = 1


def create_topic(conn, name: str, partitions: int = 2) -> None:
    response = call(conn, ApiKey.CREATE_TOPICS, 4, {"topics": [
        {"name": name, "num_partitions": partitions, "replication_factor": 1,
         "assignments": [], "configs": []}], "timeout_ms": 5000, "validate_only": False})
    assert response["topics"][0]["error_code"] in (0, 36)


def produce(conn, topic: str, partition: int, transactional_id: str | None, producer_id: int,
            epoch: int, sequence: int, value: bytes = b"v", timeout_ms: int = 10000
            ) -> tuple[int, int]:
    """(error code, base offset) of one transactional batch, acks=all."""
    batch = build_batch([(None, value, (), int(time.time() * 1000))], producer_id=producer_id,
                        producer_epoch=epoch, base_sequence=sequence, is_transactional=True)
    response = call(conn, ApiKey.PRODUCE, 9, {
        "transactional_id": transactional_id, "acks": -1, "timeout_ms": timeout_ms,
        "topic_data": [{"name": topic, "partition_data": [
            {"index": partition, "records": batch}]}]})
    result = response["responses"][0]["partition_responses"][0]
    return result["error_code"], result["base_offset"]


def offsets(conn, topic: str, partition: int) -> tuple[int, int]:
    """(log end offset, last stable offset) of a partition."""
    def latest(isolation: int) -> int:
        response = call(conn, ApiKey.LIST_OFFSETS, 5, {
            "replica_id": -1, "isolation_level": isolation, "topics": [
                {"name": topic, "partitions": [
                    {"partition_index": partition, "current_leader_epoch": -1,
                     "timestamp": -1}]}]})
        return response["topics"][0]["partitions"][0]["offset"]
    return latest(0), latest(READ_COMMITTED)


def committed_transaction(conn, transactional_id: str, topic: str) -> tuple[int, int]:
    """A producer whose transaction wrote one batch to partition 0 and was committed (its
    markers written): (producer id, epoch)."""
    producer = init_producer(conn, transactional_id)
    producer_id, epoch = producer["producer_id"], producer["producer_epoch"]
    assert add_partitions(conn, transactional_id, producer_id, epoch, {topic: [0]}) == {
        (topic, 0): 0}
    assert produce(conn, topic, 0, transactional_id, producer_id, epoch, 0)[0] == 0
    assert end_txn(conn, transactional_id, producer_id, epoch, True) == 0

    def state() -> str:
        return call(conn, ApiKey.DESCRIBE_TRANSACTIONS, 0, {
            "transactional_ids": [transactional_id]})["transaction_states"][0][
                "transaction_state"]

    wait_until(lambda: state() == "CompleteCommit", message="the commit's markers")
    wait_until(lambda: len(set(offsets(conn, topic, 0))) == 1, message="a stable partition")
    return producer_id, epoch


def test_a_late_batch_after_its_commit_cannot_open_a_hanging_transaction(conn):
    create_topic(conn, "verify-late")
    producer_id, epoch = committed_transaction(conn, "v-late", "verify-late")
    end_before = offsets(conn, "verify-late", 0)[0]
    # The same producer's batch, delayed past the commit (or sent without adding the
    # partition): no transaction of the coordinator holds the partition.
    assert produce(conn, "verify-late", 0, "v-late", producer_id, epoch, 1) == (
        INVALID_TXN_STATE, -1)
    assert offsets(conn, "verify-late", 0) == (end_before, end_before)
    # Its next transaction, properly begun, is taken.
    assert add_partitions(conn, "v-late", producer_id, epoch, {"verify-late": [0, 1]}) == {
        ("verify-late", 0): 0, ("verify-late", 1): 0}
    assert produce(conn, "verify-late", 0, "v-late", producer_id, epoch, 1) == (0, end_before)
    assert produce(conn, "verify-late", 1, "v-late", producer_id, epoch, 0)[0] == 0
    assert end_txn(conn, "v-late", producer_id, epoch, False) == 0


def test_a_batch_of_an_unknown_producer_is_refused(conn):
    create_topic(conn, "verify-unknown")
    producer = init_producer(conn, "v-known")
    # A transactional id nobody initialised, or a producer id that is not the id's.
    assert produce(conn, "verify-unknown", 0, "v-never-initialised", producer["producer_id"],
                   0, 0)[0] == INVALID_PRODUCER_ID_MAPPING
    assert produce(conn, "verify-unknown", 0, "v-known", producer["producer_id"] + 1000,
                   0, 0)[0] == INVALID_PRODUCER_ID_MAPPING
    assert offsets(conn, "verify-unknown", 0) == (0, 0)


def test_txn_offset_commit_needs_add_offsets_to_txn(conn):
    create_topic(conn, "verify-offsets")
    producer = init_producer(conn, "v-offsets")
    producer_id, epoch = producer["producer_id"], producer["producer_epoch"]
    assert add_partitions(conn, "v-offsets", producer_id, epoch, {"verify-offsets": [0]}) == {
        ("verify-offsets", 0): 0}

    def commit() -> int:
        response = call(conn, ApiKey.TXN_OFFSET_COMMIT, 3, {
            "transactional_id": "v-offsets", "group_id": "v-group",
            "producer_id": producer_id, "producer_epoch": epoch, "generation_id": -1,
            "member_id": "", "group_instance_id": None, "topics": [
                {"name": "verify-offsets", "partitions": [
                    {"partition_index": 0, "committed_offset": 7,
                     "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
        return response["topics"][0]["partitions"][0]["error_code"]

    call(conn, ApiKey.FIND_COORDINATOR, 3, {"key": "v-group", "key_type": 0})
    assert wait_until(lambda: (lambda c: c if c not in (14, 15, 16) else None)(commit()),
                      message="a coordinator's answer") == INVALID_TXN_STATE
    assert call(conn, ApiKey.ADD_OFFSETS_TO_TXN, 3, {
        "transactional_id": "v-offsets", "producer_id": producer_id, "producer_epoch": epoch,
        "group_id": "v-group"})["error_code"] == 0
    assert commit() == 0
    assert end_txn(conn, "v-offsets", producer_id, epoch, True) == 0


def verify_only(conn, version: int, transactional_id: str, producer_id: int, epoch: int,
                partitions: list[int], topic: str) -> dict:
    return call(conn, ApiKey.ADD_PARTITIONS_TO_TXN, version, {"transactions": [
        {"transactional_id": transactional_id, "producer_id": producer_id,
         "producer_epoch": epoch, "verify_only": True,
         "topics": [{"name": topic, "partitions": partitions}]}]})


@pytest.mark.parametrize("version, not_added", [(4, INVALID_TXN_STATE),
                                                (5, TRANSACTION_ABORTABLE)])
def test_add_partitions_to_txn_verify_only_answers_brokers(conn, version, not_added):
    create_topic(conn, "verify-brokers")
    transactional_id = f"v-brokers-{version}"
    producer = init_producer(conn, transactional_id)
    producer_id, epoch = producer["producer_id"], producer["producer_epoch"]
    assert add_partitions(conn, transactional_id, producer_id, epoch,
                          {"verify-brokers": [0]}) == {("verify-brokers", 0): 0}

    def answer(**overrides) -> dict:
        args = dict(transactional_id=transactional_id, producer_id=producer_id, epoch=epoch)
        args.update(overrides)
        response = verify_only(conn, version, args["transactional_id"], args["producer_id"],
                               args["epoch"], [0, 1], "verify-brokers")
        assert response["error_code"] == 0
        (result,) = response["results_by_transaction"]
        assert result["transactional_id"] == args["transactional_id"]
        return {p["partition_index"]: p["partition_error_code"]
                for t in result["topic_results"] for p in t["results_by_partition"]}

    assert answer() == {0: 0, 1: not_added}
    assert answer(epoch=epoch - 1 if epoch else epoch + 1) == {0: PRODUCER_FENCED,
                                                               1: PRODUCER_FENCED}
    assert answer(producer_id=producer_id + 1000) == {0: INVALID_PRODUCER_ID_MAPPING,
                                                      1: INVALID_PRODUCER_ID_MAPPING}
    assert answer(transactional_id="v-nobody") == {0: INVALID_PRODUCER_ID_MAPPING,
                                                   1: INVALID_PRODUCER_ID_MAPPING}
    # Verifying adds nothing.
    assert answer() == {0: 0, 1: not_added}
    assert end_txn(conn, transactional_id, producer_id, epoch, False) == 0


def test_without_verification_a_late_batch_hangs_the_partition(tmp_path):
    """What verification prevents: the same late batch, taken by a broker that does not
    verify, opens a transaction no coordinator knows, and read_committed readers of the
    partition stop at it."""
    broker = BrokerProcess(tmp_path, overrides={
        **SMALL_INTERNAL_TOPICS, "transaction.partition.verification.enable": "false"}).start()
    try:
        conn = BrokerConnection(broker.host, broker.port, timeout_s=30)
        create_topic(conn, "hang")
        producer_id, epoch = committed_transaction(conn, "v-hang", "hang")
        end_before = offsets(conn, "hang", 0)[0]
        assert produce(conn, "hang", 0, "v-hang", producer_id, epoch, 1) == (0, end_before)
        assert offsets(conn, "hang", 0) == (end_before + 1, end_before)
        conn.close()
    finally:
        broker.stop()
