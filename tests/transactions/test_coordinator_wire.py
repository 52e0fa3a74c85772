"""The transaction coordinator's APIs on the wire, against a standalone broker: errors,
epochs and fencing, DescribeTransactions/ListTransactions, markers of a deleted topic,
and the expiry of idle transactional ids."""

from __future__ import annotations

from pylog.client.connection import BrokerConnection
from pylog.protocol import ApiKey
from pylog.testing.broker import BrokerProcess
from tests.transactions.conftest import SMALL_INTERNAL_TOPICS, call, init_producer, wait_until

INVALID_REQUEST, INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE = 42, 47, 48
INVALID_PRODUCER_ID_MAPPING, INVALID_TRANSACTION_TIMEOUT = 49, 50
UNKNOWN_TOPIC, OPERATION_NOT_ATTEMPTED, PRODUCER_FENCED, NOT_FOUND = 3, 55, 90, 105


def add_partitions(conn, transactional_id, producer_id, epoch, topics, version=3):
    response = call(conn, ApiKey.ADD_PARTITIONS_TO_TXN, version, {
        "v3_and_below_transactional_id": transactional_id,
        "v3_and_below_producer_id": producer_id, "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
    return {(t["name"], p["partition_index"]): p["partition_error_code"]
            for t in response["results_by_topic_v3_and_below"]
            for p in t["results_by_partition"]}


def end_txn(conn, transactional_id, producer_id, epoch, commit, version=3):
    return call(conn, ApiKey.END_TXN, version, {
        "transactional_id": transactional_id, "producer_id": producer_id,
        "producer_epoch": epoch, "committed": commit})["error_code"]


def test_init_producer_id_checks_its_arguments(conn):
    def init(transactional_id, timeout_ms):
        return call(conn, ApiKey.INIT_PRODUCER_ID, 4, {
            "transactional_id": transactional_id, "transaction_timeout_ms": timeout_ms})

    assert init("w-timeout", 0)["error_code"] == INVALID_TRANSACTION_TIMEOUT
    assert init("w-timeout", 60001)["error_code"] == INVALID_TRANSACTION_TIMEOUT
    assert init("", 1000)["error_code"] == INVALID_REQUEST
    idempotent = [init(None, 1000) for _ in range(2)]
    assert [r["error_code"] for r in idempotent] == [0, 0]
    assert idempotent[0]["producer_id"] != idempotent[1]["producer_id"]
    assert idempotent[0]["producer_epoch"] == 0


def test_epochs_fence_older_producers_by_version(conn):
    call(conn, ApiKey.CREATE_TOPICS, 4, {"topics": [
        {"name": "wire-fence", "num_partitions": 2, "replication_factor": 1,
         "assignments": [], "configs": []}], "timeout_ms": 5000, "validate_only": False})
    first = init_producer(conn, "w-fence")
    assert first["error_code"] == 0 and first["producer_epoch"] == 0
    second = init_producer(conn, "w-fence")
    producer_id = first["producer_id"]
    assert (second["producer_id"], second["producer_epoch"]) == (producer_id, 1)

    topics = {"wire-fence": [0]}
    assert add_partitions(conn, "w-fence", producer_id, 0, topics, version=1) == {
        ("wire-fence", 0): INVALID_PRODUCER_EPOCH}
    assert add_partitions(conn, "w-fence", producer_id, 0, topics, version=3) == {
        ("wire-fence", 0): PRODUCER_FENCED}
    assert add_partitions(conn, "w-fence", producer_id + 1, 1, topics) == {
        ("wire-fence", 0): INVALID_PRODUCER_ID_MAPPING}
    assert end_txn(conn, "w-fence", producer_id, 0, True, version=1) == INVALID_PRODUCER_EPOCH
    assert end_txn(conn, "w-fence", producer_id, 1, True) == INVALID_TXN_STATE  # nothing open
    assert add_partitions(conn, "w-fence", producer_id, 1, {"wire-fence": [0], "nope": [0]}) \
        == {("wire-fence", 0): OPERATION_NOT_ATTEMPTED, ("nope", 0): UNKNOWN_TOPIC}

    # KIP-360: a producer naming an id and epoch that are not current is fenced.
    stale = init_producer(conn, "w-fence", producer_id=producer_id + 7, producer_epoch=1)
    assert stale["error_code"] == PRODUCER_FENCED
    stale = init_producer(conn, "w-fence", version=3, producer_id=producer_id + 7,
                          producer_epoch=1)
    assert stale["error_code"] == INVALID_PRODUCER_EPOCH
    # ...while one naming the current ones gets the next epoch, and its retry the same one.
    bumped = init_producer(conn, "w-fence", producer_id=producer_id, producer_epoch=1)
    assert (bumped["error_code"], bumped["producer_epoch"]) == (0, 2)
    retried = init_producer(conn, "w-fence", producer_id=producer_id, producer_epoch=1)
    assert (retried["error_code"], retried["producer_epoch"]) == (0, 2)


def test_describe_and_list_an_open_transaction(conn):
    call(conn, ApiKey.CREATE_TOPICS, 4, {"topics": [
        {"name": "wire-describe", "num_partitions": 2, "replication_factor": 1,
         "assignments": [], "configs": []}], "timeout_ms": 5000, "validate_only": False})
    producer = init_producer(conn, "w-describe", timeout_ms=45000)
    producer_id, epoch = producer["producer_id"], producer["producer_epoch"]
    assert add_partitions(conn, "w-describe", producer_id, epoch,
                          {"wire-describe": [1, 0]}) == {("wire-describe", 1): 0,
                                                          ("wire-describe", 0): 0}

    described = call(conn, ApiKey.DESCRIBE_TRANSACTIONS, 0,
                     {"transactional_ids": ["w-describe", "w-unknown"]})["transaction_states"]
    by_id = {d["transactional_id"]: d for d in described}
    assert by_id["w-unknown"]["error_code"] == NOT_FOUND
    found = by_id["w-describe"]
    assert (found["error_code"], found["transaction_state"], found["producer_id"],
            found["producer_epoch"], found["transaction_timeout_ms"]) == (
        0, "Ongoing", producer_id, epoch, 45000)
    assert found["transaction_start_time_ms"] > 0
    assert found["topics"] == [{"topic": "wire-describe", "partitions": [0, 1]}]

    listed = call(conn, ApiKey.LIST_TRANSACTIONS, 1, {
        "state_filters": ["Ongoing", "Bogus"], "producer_id_filters": [producer_id],
        "duration_filter": -1})
    assert listed["error_code"] == 0 and listed["unknown_state_filters"] == ["Bogus"]
    assert listed["transaction_states"] == [{"transactional_id": "w-describe",
                                             "producer_id": producer_id,
                                             "transaction_state": "Ongoing"}]
    long_running = call(conn, ApiKey.LIST_TRANSACTIONS, 1, {
        "state_filters": [], "producer_id_filters": [producer_id],
        "duration_filter": 3_600_000})
    assert long_running["transaction_states"] == []


def test_markers_for_a_deleted_topic_are_dropped(conn):
    call(conn, ApiKey.CREATE_TOPICS, 4, {"topics": [
        {"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [],
         "configs": []} for name in ("wire-kept", "wire-deleted")],
        "timeout_ms": 5000, "validate_only": False})
    producer = init_producer(conn, "w-deleted")
    producer_id, epoch = producer["producer_id"], producer["producer_epoch"]
    assert set(add_partitions(conn, "w-deleted", producer_id, epoch,
                              {"wire-kept": [0], "wire-deleted": [0]}).values()) == {0}
    call(conn, ApiKey.DELETE_TOPICS, 4, {"topic_names": ["wire-deleted"], "timeout_ms": 5000})
    assert end_txn(conn, "w-deleted", producer_id, epoch, True) == 0

    def state() -> str:
        return call(conn, ApiKey.DESCRIBE_TRANSACTIONS, 0, {
            "transactional_ids": ["w-deleted"]})["transaction_states"][0]["transaction_state"]

    wait_until(lambda: state() == "CompleteCommit", message="CompleteCommit without the topic")


def test_a_transaction_whose_every_topic_is_gone_still_ends(conn):
    """Its markers are dropped at once, so its Complete state is written from inside the
    write of its Prepare state: once by its producer's EndTxn, once by the coordinator's
    abort of a transaction open past its timeout; the coordinator goes on working after."""
    call(conn, ApiKey.CREATE_TOPICS, 4, {"topics": [
        {"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [],
         "configs": []} for name in ("wire-gone-ended", "wire-gone-timed-out")],
        "timeout_ms": 5000, "validate_only": False})

    def state(transactional_id: str) -> str:
        return call(conn, ApiKey.DESCRIBE_TRANSACTIONS, 0, {
            "transactional_ids": [transactional_id]})["transaction_states"][0]["transaction_state"]

    opened = {}
    for transactional_id, topic, timeout_ms in (("w-gone-ended", "wire-gone-ended", 30000),
                                                ("w-gone-timed-out", "wire-gone-timed-out", 1000)):
        producer = init_producer(conn, transactional_id, timeout_ms=timeout_ms)
        opened[transactional_id] = producer["producer_id"], producer["producer_epoch"]
        assert add_partitions(conn, transactional_id, *opened[transactional_id],
                              {topic: [0]}) == {(topic, 0): 0}
        call(conn, ApiKey.DELETE_TOPICS, 4, {"topic_names": [topic], "timeout_ms": 5000})
    assert end_txn(conn, "w-gone-ended", *opened["w-gone-ended"], False) == 0
    wait_until(lambda: state("w-gone-ended") == "CompleteAbort", message="the ended one aborted")
    wait_until(lambda: state("w-gone-timed-out") == "CompleteAbort",
               message="the timed-out one aborted by the coordinator")
    for transactional_id, (producer_id, epoch) in opened.items():
        again = init_producer(conn, transactional_id)
        assert (again["error_code"], again["producer_id"]) == (0, producer_id)
        assert again["producer_epoch"] > epoch
    assert init_producer(conn, "w-gone-next")["error_code"] == 0


def test_an_idle_transactional_id_expires(tmp_path):
    settings = dict(SMALL_INTERNAL_TOPICS, **{
        "transactional.id.expiration.ms": 1000,
        "transaction.remove.expired.transaction.cleanup.interval.ms": 200})
    with BrokerProcess(tmp_path, settings) as broker:
        connection = BrokerConnection(broker.host, broker.port, timeout_s=30)
        try:
            first = init_producer(connection, "w-expiring")
            assert first["error_code"] == 0

            def described() -> int:
                return call(connection, ApiKey.DESCRIBE_TRANSACTIONS, 0, {
                    "transactional_ids": ["w-expiring"]})["transaction_states"][0]["error_code"]

            wait_until(lambda: described() == NOT_FOUND, message="the id to expire")
            again = init_producer(connection, "w-expiring")
            assert (again["error_code"], again["producer_epoch"]) == (0, 0)
            assert again["producer_id"] != first["producer_id"]  # a new id, not a bump
        finally:
            connection.close()
