"""pylog's transactional Producer on a SASL_SSL pylog broker with ACLs: a transactional id
the user may not write is a fatal error, a topic it may not write an abortable one."""

from __future__ import annotations

import pytest

from pylog import errors
from pylog.client import Admin, SimpleConsumer
from pylog.client.producer import Producer, TransactionAbortableError
from pylog.security.acls import AclOperation as Op, ResourceType
from pylog.testing.secured import SecuredBroker, allow
from tests.client.test_transactional_producer import read_all, settled

PASSWORDS = {"admin": "admin-Secret-1", "app": "app-Secret-1"}
TIMEOUT = 30


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    acls = (allow("app", ResourceType.TRANSACTIONAL_ID, "app-tx", Op.WRITE, Op.DESCRIBE)
            + allow("app", ResourceType.TOPIC, "allowed", Op.WRITE, Op.READ, Op.DESCRIBE)
            + allow("app", ResourceType.TOPIC, "refused", Op.DESCRIBE))
    broker = SecuredBroker(tmp_path_factory.mktemp("secured-txn-client"), PASSWORDS, acls, overrides={
        "inter.broker.listener.name": "SASL_SSL",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config":
            f'username="admin" password="{PASSWORDS["admin"]}"',
        "transaction.state.log.num.partitions": 1})
    with broker:
        with Admin(broker.bootstrap, security=broker.security("admin")) as admin:
            admin.create_topic("allowed", num_partitions=1)
            admin.create_topic("refused", num_partitions=1)
        yield broker


def app_producer(broker: SecuredBroker, transactional_id: str) -> Producer:
    return Producer(broker.bootstrap, security=broker.security("app"), transactional_id=transactional_id,
                    linger_ms=5, max_block_ms=TIMEOUT * 1000)


def test_a_transactional_id_the_user_may_not_write_is_fatal(secured):
    with app_producer(secured, "other-tx") as producer:
        with pytest.raises(errors.TransactionalIdAuthorizationFailedError, match="other-tx"):
            producer.init_transactions(TIMEOUT)
        for call in (lambda: producer.init_transactions(TIMEOUT), producer.begin_transaction):
            with pytest.raises(errors.TransactionalIdAuthorizationFailedError, match="can only be closed"):
                call()


def test_a_topic_the_user_may_not_write_makes_the_transaction_abortable(secured):
    with app_producer(secured, "app-tx") as producer:
        producer.init_transactions(TIMEOUT)
        producer.begin_transaction()
        refused = producer.send("refused", b"not allowed", partition=0)
        assert isinstance(refused.exception(TIMEOUT), errors.TopicAuthorizationFailedError)
        with pytest.raises(TransactionAbortableError, match="TOPIC_AUTHORIZATION_FAILED"):
            producer.commit_transaction(TIMEOUT)
        producer.abort_transaction(TIMEOUT)

        producer.begin_transaction()
        producer.send("allowed", b"allowed", partition=0)
        producer.commit_transaction(TIMEOUT)
    with SimpleConsumer(secured.bootstrap, security=secured.security("admin"),
                        isolation_level="read_committed") as reader:
        committed = [b"allowed"]
        assert settled(lambda: read_all(reader, "allowed", 0), committed) == committed
