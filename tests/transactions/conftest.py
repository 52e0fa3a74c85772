"""A standalone broker for the transaction tests, and raw requests through pylog's own
client connection."""

from __future__ import annotations


import pytest

from pylog.client.connection import BrokerConnection
from pylog.protocol import ApiKey
from pylog.testing.broker import broker_fixture
from pylog.testing.waiting import wait_until

# Few partitions of the internal topics: each one is loaded at start.
SMALL_INTERNAL_TOPICS = {"transaction.state.log.num.partitions": 4,
                         "offsets.topic.num.partitions": 4,
                         "transaction.max.timeout.ms": 60000,
                         "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500,
                         "group.initial.rebalance.delay.ms": 0,
                         "num.partitions": 2}

broker = broker_fixture(scope="package", overrides=SMALL_INTERNAL_TOPICS)

RETRIABLE = {14, 15, 16, 51}  # load in progress, not available, not coordinator, concurrent


@pytest.fixture
def conn(broker):
    connection = BrokerConnection(broker.host, broker.port, timeout_s=30)
    yield connection
    connection.close()


def call(connection: BrokerConnection, api_key: int, version: int, body: dict) -> dict:
    return connection.request(api_key, body, version)


def init_producer(connection: BrokerConnection, transactional_id: str,
                  timeout_ms: int = 30000, version: int = 4, **expected) -> dict:
    """InitProducerId, retried while the coordinator is loading or busy."""
    call(connection, ApiKey.FIND_COORDINATOR, 3, {"key": transactional_id, "key_type": 1})
    body = {"transactional_id": transactional_id, "transaction_timeout_ms": timeout_ms,
            "producer_id": expected.get("producer_id", -1),
            "producer_epoch": expected.get("producer_epoch", -1)}
    return wait_until(
        lambda: (lambda r: r if r["error_code"] not in RETRIABLE else None)(
            call(connection, ApiKey.INIT_PRODUCER_ID, version, body)),
        message=f"InitProducerId of {transactional_id}")
