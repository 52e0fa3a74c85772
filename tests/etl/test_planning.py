"""Planning asks the brokers in O(brokers) round trips, and plans what it planned before.

Three real brokers in a real ZooKeeper, each behind a counting proxy that it advertises
(:mod:`pylog.testing.counting_proxy`), so the test sees every request the planner's
consumer sent to each broker. The plans are checked against a reference model: start at
the committed offset (or the new-partition policy), end at the high watermark, split
every ``max_records_per_task`` offsets, ordered by leader.
"""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from pylog.client import SimpleConsumer
from pylog.etl.config import NewPartitionPolicy
from pylog.etl.model import OffsetsSnapshot
from pylog.etl.planner import plan_backfill, plan_scheduled, plan_scheduled_many, split_range, topic_offsets
from pylog.etl.state import StateStore
from pylog.protocol import ApiKey
from pylog.testing.zookeeper import zookeeper_fixture
from pylog.testing.counting_proxy import ProxiedCluster
from tests.etl.helpers import events, produce, write_config

zookeeper = zookeeper_fixture()

PARTITIONS = 6
TOPICS = [f"plan{i}" for i in range(5)]
MINUTE = 60_000
T0 = 1_763_625_600_000  # 2025-11-20T08:00Z
CLIENT = "planner"


def produced(topic_index: int) -> int:
    return 12 + 7 * topic_index  # records in topic plan<i>, record n to partition n % 6


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    local = ProxiedCluster(tmp_path_factory.mktemp("brokers"),
                           f"{zookeeper.connect_string}/plan-{uuid.uuid4().hex[:8]}").start()
    try:
        local.create_topics(TOPICS, PARTITIONS, batch=5)
        for i, topic in enumerate(TOPICS):
            n = produced(i)
            produce(local.bootstrap, topic, events(0, n), PARTITIONS, [T0 + k * MINUTE for k in range(n)])
        yield local
    finally:
        local.close()


def configs(tmp_path, cluster, **overrides):
    config = write_config(tmp_path, cluster.bootstrap, topic=TOPICS[0], max_records_per_task=2, **overrides)
    return [replace(config.topics[0], topic=t, table=t) for t in TOPICS], config


def expected_plan(cluster, topic: str, starts: dict[int, int], ends: dict[int, int], max_records: int):
    leaders = {p: m.leader for p, m in cluster.metadata(1, [topic]).topics[topic].partitions.items()}
    ranges = [r for p in sorted(starts)
              for r in split_range(topic, p, starts[p], ends[p], max_records, leaders[p])]
    return sorted(ranges, key=lambda r: (r.leader_id, r.topic, r.partition, r.start))


def high_watermarks(topic_index: int) -> dict[int, int]:
    n = produced(topic_index)
    return {p: len(range(p, n, PARTITIONS)) for p in range(PARTITIONS)}


def test_scheduled_plans_of_many_tables_cost_one_metadata_and_two_list_offsets_per_broker(cluster, tmp_path):
    topic_configs, config = configs(tmp_path, cluster)
    state = StateStore(config.state)
    committed = {p: 1 for p in range(PARTITIONS)}
    state.write_offsets(OffsetsSnapshot(TOPICS[1], TOPICS[1], "r0", 0, committed))
    with SimpleConsumer(cluster.bootstrap, client_id=CLIENT) as consumer:
        cluster.reset_counts()
        plans = plan_scheduled_many("r1", topic_configs, consumer, state)
        assert cluster.requests(ApiKey.LIST_OFFSETS, CLIENT) == {1: 2, 2: 2, 3: 2}
        assert sum(cluster.requests(ApiKey.METADATA, CLIENT).values()) == 1
        assert all(n <= 1 for n in cluster.requests(ApiKey.API_VERSIONS, CLIENT).values())

    for i, (topic, plan) in enumerate(zip(TOPICS, plans)):
        ends = high_watermarks(i)
        starts = committed if i == 1 else {p: 0 for p in range(PARTITIONS)}
        assert plan.table == topic and plan.start_offsets == starts and plan.end_offsets == ends
        assert list(plan.ranges) == expected_plan(cluster, topic, starts, ends, 2)
        assert plan.base_offsets == (committed if i == 1 else {})
        assert len(plan.notes) == (0 if i == 1 else PARTITIONS) and not plan.gaps

    # One table at a time (what the job does under each table's lock): the same plans,
    # at one Metadata and two ListOffsets per broker each.
    with SimpleConsumer(cluster.bootstrap, client_id=CLIENT) as consumer:
        for topic_config, batched in zip(topic_configs, plans):
            cluster.reset_counts()
            single = plan_scheduled("r1", topic_config, consumer, state)
            assert sum(cluster.requests(ApiKey.METADATA, CLIENT).values()) <= 1
            assert all(n <= 2 for n in cluster.requests(ApiKey.LIST_OFFSETS, CLIENT).values())
            assert replace(single, created_at_ms=0) == replace(batched, created_at_ms=0)


def test_a_stale_offsets_snapshot_is_looked_up_again(cluster, tmp_path):
    """A run committed past the snapshot the plans started from: the table's offsets are
    asked again rather than the committed offset taken for a truncated log."""
    topic_configs, config = configs(tmp_path, cluster)
    state = StateStore(config.state)
    with SimpleConsumer(cluster.bootstrap, client_id=CLIENT) as consumer:
        snapshot = topic_offsets(consumer, TOPICS)
        stale = {t: {p: replace(b, latest=0) for p, b in bounds.items()} for t, bounds in snapshot.items()}
        state.write_offsets(OffsetsSnapshot(TOPICS[2], TOPICS[2], "r0", 0, {p: 1 for p in range(PARTITIONS)}))
        plan = plan_scheduled("r2", topic_configs[2], consumer, state, stale)
        fresh = plan_scheduled("r2", topic_configs[3], consumer, state, stale)
    assert plan.end_offsets == high_watermarks(2)
    assert fresh.end_offsets == {p: 0 for p in range(PARTITIONS)}  # nothing forced a new look


def test_new_partitions_at_a_timestamp_are_looked_up_in_one_request_per_broker(cluster, tmp_path):
    policy = NewPartitionPolicy("timestamp", T0 + 30 * MINUTE)
    topic_configs, config = configs(tmp_path, cluster)
    topic_config = replace(topic_configs[4], new_partitions=policy)
    with SimpleConsumer(cluster.bootstrap, client_id=CLIENT) as consumer:
        consumer.partitions_for(TOPICS[4])
        cluster.reset_counts()
        plan = plan_scheduled("r3", topic_config, consumer, StateStore(config.state))
        assert cluster.requests(ApiKey.LIST_OFFSETS, CLIENT) == {1: 3, 2: 3, 3: 3}
    # Record k (timestamp T0 + k minutes) is offset k // 6 of partition k % 6.
    n = produced(4)
    assert plan.start_offsets == {p: min(k // PARTITIONS for k in range(30, n) if k % PARTITIONS == p)
                                  for p in range(PARTITIONS)}
    assert plan.end_offsets == high_watermarks(4)


def test_backfill_plan_costs_four_list_offsets_per_broker(cluster, tmp_path):
    topic_configs, config = configs(tmp_path, cluster)
    state = StateStore(config.state)
    committed = {p: 5 for p in range(PARTITIONS)}
    state.write_offsets(OffsetsSnapshot(TOPICS[3], TOPICS[3], "r0", 0, committed))
    with SimpleConsumer(cluster.bootstrap, client_id=CLIENT) as consumer:
        consumer.partitions_for(TOPICS[3])
        cluster.reset_counts()
        plan = plan_backfill("b1", topic_configs[3], consumer, state, (T0 + 6 * MINUTE, T0 + 24 * MINUTE))
        assert cluster.requests(ApiKey.LIST_OFFSETS, CLIENT) == {1: 4, 2: 4, 3: 4}
        assert sum(cluster.requests(ApiKey.METADATA, CLIENT).values()) == 0
    # Records 6..23 are offsets 1..3 of every partition; the committed offset caps nothing.
    assert plan.start_offsets == {p: 1 for p in range(PARTITIONS)}
    assert plan.end_offsets == {p: 4 for p in range(PARTITIONS)}
    assert list(plan.ranges) == expected_plan(cluster, TOPICS[3], plan.start_offsets, plan.end_offsets, 2)
