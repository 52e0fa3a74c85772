"""A standalone broker SIGKILLed in the middle of a transaction, and between EndTxn and
the markers: the coordinator reloads ``__transaction_state`` and finishes the job.

The broker's inter-broker listener (which the coordinator sends markers over) is first
advertised at a port where nothing listens, so a commit stays between its PrepareCommit
and its markers; the restarted broker advertises its real port."""

from __future__ import annotations

import pytest

from pylog.client import Admin
from pylog.testing.broker import HOST, BrokerProcess
from pylog.testing.process import free_port
from tests.transactions.clients import (
    END, describe, read_until_end, run_transaction, transactional)
from tests.transactions.conftest import SMALL_INTERNAL_TOPICS, wait_until


@pytest.fixture(scope="module")
def restartable(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("restart"), SMALL_INTERNAL_TOPICS,
                           extra_listeners=["INTERNAL"])
    broker.overrides.update({
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL"})
    yield broker
    broker.stop()


def advertise_internal(broker: BrokerProcess, port: int) -> None:
    broker.overrides["advertised.listeners"] = (f"PLAINTEXT://{HOST}:{broker.port},"
                                                f"INTERNAL://{HOST}:{port}")


def test_a_commit_between_end_txn_and_its_markers_completes_after_a_restart(restartable):
    broker = restartable
    advertise_internal(broker, free_port(HOST))  # markers cannot be delivered
    broker.start()
    with Admin(broker.bootstrap) as admin:
        admin.create_topic("restart-commit", num_partitions=1)
    producer = transactional(broker.bootstrap, "restart-commit")
    run_transaction(producer, "restart-commit", [b"r0", b"r1", END])  # EndTxn answered
    assert describe(broker.bootstrap, "restart-commit")["transaction_state"] == "PrepareCommit"

    broker.kill()
    advertise_internal(broker, broker.ports["INTERNAL"])
    broker.start()
    assert read_until_end(broker.bootstrap, "restart-commit", "read_committed") == \
        [b"r0", b"r1", END]
    wait_until(lambda: describe(broker.bootstrap, "restart-commit")["transaction_state"]
               == "CompleteCommit", message="CompleteCommit after the reload")


def test_an_open_transaction_is_aborted_after_a_restart(restartable):
    broker = restartable
    with Admin(broker.bootstrap) as admin:
        admin.create_topic("restart-abort", num_partitions=1)
    producer = transactional(broker.bootstrap, "restart-abort")
    producer.begin_transaction()
    for value in (b"x0", b"x1"):
        producer.produce("restart-abort", value=value, partition=0)
    producer.flush(30)
    assert describe(broker.bootstrap, "restart-abort")["transaction_state"] == "Ongoing"

    broker.kill()
    broker.start()
    producer.abort_transaction(60)
    run_transaction(producer, "restart-abort", [b"y0", END])
    assert read_until_end(broker.bootstrap, "restart-abort", "read_committed") == [b"y0", END]
    assert read_until_end(broker.bootstrap, "restart-abort", "read_uncommitted") == \
        [b"x0", b"x1", b"y0", END]
