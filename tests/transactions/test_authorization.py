"""Transactions with ACLs on: a SASL_SSL broker whose markers go out as its own super user,
and a client allowed to write one transactional id and one topic."""

from __future__ import annotations

import time

import confluent_kafka
import pytest

from pylog.client import Admin
from pylog.client.connection import BrokerConnection
from pylog.protocol import ApiKey
from pylog.security.acls import AclOperation as Op, ResourceType
from pylog.testing.secured import SecuredBroker, allow
from tests.transactions.clients import END, run_transaction

PASSWORDS = {"admin": "admin-Secret-1", "app": "app-Secret-1"}
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED = 53, 29
GROUP_AUTHORIZATION_FAILED = 30


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    acls = (allow("app", ResourceType.TRANSACTIONAL_ID, "app-tx", Op.WRITE, Op.DESCRIBE)
            + allow("app", ResourceType.TOPIC, "allowed", Op.WRITE, Op.READ, Op.DESCRIBE)
            + allow("app", ResourceType.TOPIC, "refused", Op.DESCRIBE)
            + allow("app", ResourceType.GROUP, "app-reader", Op.READ))
    broker = SecuredBroker(tmp_path_factory.mktemp("secured-txn"), PASSWORDS, acls, overrides={
        "inter.broker.listener.name": "SASL_SSL",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config":
            f'username="admin" password="{PASSWORDS["admin"]}"',
        "transaction.state.log.num.partitions": 2})
    with broker:
        with Admin(broker.bootstrap, security=broker.security("admin")) as admin:
            admin.create_topic("allowed", num_partitions=1)
            admin.create_topic("refused", num_partitions=1)
        yield broker


def producer(broker: SecuredBroker, transactional_id: str) -> confluent_kafka.Producer:
    return confluent_kafka.Producer({**broker.client_settings("app"),
                                     "bootstrap.servers": broker.bootstrap,
                                     "transactional.id": transactional_id, "log_level": 2})


def test_an_allowed_transaction_commits_over_sasl_ssl(secured):
    app = producer(secured, "app-tx")
    app.init_transactions(60)
    run_transaction(app, "allowed", [b"ok", END])
    reader = confluent_kafka.Consumer({**secured.client_settings("app"),
                                       "bootstrap.servers": secured.bootstrap,
                                       "group.id": "app-reader",
                                       "isolation.level": "read_committed", "log_level": 2})
    reader.assign([confluent_kafka.TopicPartition("allowed", 0,
                                                  confluent_kafka.OFFSET_BEGINNING)])
    values = []
    try:
        while END not in values:
            message = reader.poll(1.0)
            if message is not None and not message.error():
                values.append(message.value())
    finally:
        reader.close()
    assert values == [b"ok", END]


def test_refused_ids_and_topics(secured):
    other = producer(secured, "someone-else")
    with pytest.raises(confluent_kafka.KafkaException) as raised:
        other.init_transactions(30)
    assert raised.value.args[0].code() == \
        confluent_kafka.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

    host, port = secured.bootstrap.rsplit(":", 1)
    connection = BrokerConnection(host, int(port), security=secured.security("app"))
    try:
        init = connection.request(ApiKey.INIT_PRODUCER_ID, {
            "transactional_id": "app-tx", "transaction_timeout_ms": 30000}, 4)
        added = connection.request(ApiKey.ADD_PARTITIONS_TO_TXN, {
            "v3_and_below_transactional_id": "app-tx",
            "v3_and_below_producer_id": init["producer_id"],
            "v3_and_below_producer_epoch": init["producer_epoch"],
            "v3_and_below_topics": [{"name": "allowed", "partitions": [0]},
                                    {"name": "refused", "partitions": [0]}]}, 3)
        codes = {t["name"]: t["results_by_partition"][0]["partition_error_code"]
                 for t in added["results_by_topic_v3_and_below"]}
        assert codes == {"allowed": 55, "refused": TOPIC_AUTHORIZATION_FAILED}
        described = connection.request(ApiKey.DESCRIBE_TRANSACTIONS, {
            "transactional_ids": ["app-tx", "someone-else"]}, 0)["transaction_states"]
        assert {d["transactional_id"]: d["error_code"] for d in described} == {
            "app-tx": 0, "someone-else": TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
        end = connection.request(ApiKey.END_TXN, {
            "transactional_id": "someone-else", "producer_id": init["producer_id"],
            "producer_epoch": init["producer_epoch"], "committed": True}, 3)
        assert end["error_code"] == TRANSACTIONAL_ID_AUTHORIZATION_FAILED

        def txn_offset_commit(transactional_id: str, group_id: str) -> dict:
            answer = connection.request(ApiKey.TXN_OFFSET_COMMIT, {
                "transactional_id": transactional_id, "group_id": group_id,
                "producer_id": init["producer_id"], "producer_epoch": init["producer_epoch"],
                "topics": [{"name": name, "partitions": [
                    {"partition_index": 0, "committed_offset": 1}]}
                    for name in ("allowed", "refused")]}, 3)
            return {t["name"]: t["partitions"][0]["error_code"] for t in answer["topics"]}

        assert txn_offset_commit("someone-else", "app-reader") == {
            "allowed": TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            "refused": TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
        assert txn_offset_commit("app-tx", "not-my-group") == {
            "allowed": GROUP_AUTHORIZATION_FAILED, "refused": GROUP_AUTHORIZATION_FAILED}
        assert connection.request(ApiKey.ADD_OFFSETS_TO_TXN, {
            "transactional_id": "app-tx", "producer_id": init["producer_id"],
            "producer_epoch": init["producer_epoch"], "group_id": "app-reader"},
            3)["error_code"] == 0
        assert txn_offset_commit("app-tx", "app-reader") == {
            "allowed": 0, "refused": TOPIC_AUTHORIZATION_FAILED}
    finally:
        connection.close()


def test_a_broker_whose_only_listener_is_secured_writes_its_own_markers(tmp_path):
    """A standalone broker serving only SASL_SSL, with no inter-broker credentials: the
    markers for its own partitions are written in-process, so the transaction completes
    and the next one commits too."""
    acls = (allow("app", ResourceType.TRANSACTIONAL_ID, "solo-tx", Op.WRITE, Op.DESCRIBE)
            + allow("app", ResourceType.TOPIC, "solo", Op.WRITE, Op.READ, Op.DESCRIBE)
            + allow("app", ResourceType.GROUP, "solo-reader", Op.READ))
    broker = SecuredBroker(tmp_path / "solo", PASSWORDS, acls, overrides={
        "transaction.state.log.num.partitions": 1})
    with broker:
        with Admin(broker.bootstrap, security=broker.security("admin")) as admin:
            admin.create_topic("solo", num_partitions=1)
        app = producer(broker, "solo-tx")
        app.init_transactions(60)
        run_transaction(app, "solo", [b"first"])
        run_transaction(app, "solo", [b"second", END])
        reader = confluent_kafka.Consumer({**broker.client_settings("app"),
                                           "bootstrap.servers": broker.bootstrap,
                                           "group.id": "solo-reader",
                                           "isolation.level": "read_committed",
                                           "log_level": 2})
        reader.assign([confluent_kafka.TopicPartition("solo", 0,
                                                      confluent_kafka.OFFSET_BEGINNING)])
        values, deadline = [], time.monotonic() + 60
        try:
            while END not in values and time.monotonic() < deadline:
                message = reader.poll(1.0)
                if message is not None and not message.error():
                    values.append(message.value())
        finally:
            reader.close()
        assert values == [b"first", b"second", END]
