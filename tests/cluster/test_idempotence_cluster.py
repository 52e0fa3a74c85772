"""Idempotent producing in a three-broker cluster: producer ids unique across brokers
(blocks in ZooKeeper), and a new leader that still recognises a batch its predecessor
wrote, because followers build the producer state from the leader's batches."""

from __future__ import annotations

import json

import pytest

from pylog.client.admin import Admin
from pylog.client.connection import BrokerConnection
from pylog.protocol import ApiKey
from pylog.records import build_batch
from tests.cluster.cluster_helpers import LocalCluster
from tests.cluster.conftest import wait_until

TOPIC = "idempotent"


@pytest.fixture
def cluster(tmp_path, zk_connect):
    cluster = LocalCluster(tmp_path, zk_connect, extra={
        "replica.lag.time.max.ms": 2000, "replica.fetch.wait.max.ms": 100,
        "default.replication.factor": 3, "min.insync.replicas": 2,
        "auto.leader.rebalance.enable": "false"}).start()
    try:
        yield cluster
    finally:
        cluster.close()


def call(cluster: LocalCluster, broker_id: int, api_key: int, version: int, body: dict) -> dict:
    connection = BrokerConnection("127.0.0.1", cluster.ports[broker_id], timeout_s=15)
    try:
        connection.connect()
        return connection.request(api_key, body, version)
    finally:
        connection.close()


def init_producer_id(cluster: LocalCluster, broker_id: int) -> int:
    response = call(cluster, broker_id, ApiKey.INIT_PRODUCER_ID, 1,
                    {"transactional_id": None, "transaction_timeout_ms": 60000})
    assert response["error_code"] == 0
    return response["producer_id"]


def produce(cluster: LocalCluster, broker_id: int, records: bytes) -> dict:
    body = {"transactional_id": None, "acks": -1, "timeout_ms": 10000, "topic_data": [
        {"name": TOPIC, "partition_data": [{"index": 0, "records": records}]}]}
    return call(cluster, broker_id, ApiKey.PRODUCE, 8, body)["responses"][0]["partition_responses"][0]


def isr_and_leader(cluster: LocalCluster, via: int):
    """(leader, ISR) of partition 0 as broker ``via`` lists it; (-1, ()) until it does."""
    topic = cluster.metadata(via, [TOPIC]).topics.get(TOPIC)
    partition = None if topic is None else topic.partitions.get(0)
    return (-1, ()) if partition is None else (partition.leader, partition.isr)


def test_producer_ids_are_unique_across_brokers(cluster, zk_client):
    ids = [init_producer_id(cluster, broker_id) for broker_id in (1, 2, 3, 1)]
    assert len(set(ids)) == 4
    data, _ = zk_client.get("/latest_producer_id_block")
    block = json.loads(data)
    assert block["version"] == 1 and int(block["block_end"]) - int(block["block_start"]) == 999
    assert {i // 1000 for i in ids} == {0, 1, 2}  # one block per broker


def test_a_new_leader_answers_a_retried_batch_with_its_original_offsets(cluster):
    with Admin(cluster.bootstrap()) as admin:
        admin.create_topic(TOPIC, 1, 3, {})
    wait_until(lambda: len(isr_and_leader(cluster, 1)[1]) == 3, message="three replicas in sync")
    leader = isr_and_leader(cluster, 1)[0]
    pid = init_producer_id(cluster, leader)
    batches = [build_batch([(None, b"v%d" % i, (), 1_700_000_000_000)], producer_id=pid,
                           producer_epoch=0, base_sequence=i) for i in range(3)]
    offsets = [produce(cluster, leader, b)["base_offset"] for b in batches]
    assert offsets == [0, 1, 2]
    cluster.brokers[leader].kill()
    others = [b for b in cluster.brokers if b != leader]
    new_leader = wait_until(lambda: next((lead for lead, _ in [isr_and_leader(cluster, others[0])]
                                          if lead in others), None), message="a new leader")
    retried = wait_until(lambda: (lambda r: r if r["error_code"] == 0 else None)(
        produce(cluster, new_leader, batches[1])), message="the new leader to take the batch")
    assert retried["base_offset"] == 1
    following = produce(cluster, new_leader, build_batch(
        [(None, b"v3", (), 1_700_000_000_000)], producer_id=pid, producer_epoch=0, base_sequence=3))
    assert (following["error_code"], following["base_offset"]) == (0, 3)
