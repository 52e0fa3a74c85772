"""The loader against a three-broker cluster: tasks grouped by leader, exactly once."""

from __future__ import annotations

import pytest

from pylog.client import Admin
from pylog.etl.job import LoadRequest, run_load
from pylog.etl.state import StateStore
from pylog.testing.spark import local_spark
from tests.cluster.cluster_helpers import LocalCluster
from tests.cluster.conftest import wait_until
from tests.etl.helpers import assert_exactly_once, broker_records, events, produce, write_config


@pytest.fixture
def cluster(tmp_path, zk_connect):
    local = LocalCluster(tmp_path / "brokers", zk_connect).start()
    yield local
    local.close()


def test_loads_exactly_once_from_three_brokers_across_a_broker_crash(cluster, tmp_path):
    spark = local_spark()
    with Admin(cluster.bootstrap()) as admin:
        admin.create_topic("ev", num_partitions=6)
    wait_until(lambda: cluster.leaders(1, "ev") == {p: 1 + p % 3 for p in range(6)},
               message="leaders of ev")
    produce(cluster.bootstrap(), "ev", events(0, 240), partitions=6)
    config = write_config(tmp_path, cluster.bootstrap(1), max_records_per_task=25)

    first = run_load(config, spark, LoadRequest(run_id="r1"))
    assert first[0].records_fetched == 240 and first[0].rows_written == 240
    plan = StateStore(config.state).read_plan("ev", "r1")
    assert {(r.partition, r.leader_id) for r in plan.ranges} == {(p, 1 + p % 3) for p in range(6)}
    assert [r.leader_id for r in plan.ranges] == sorted(r.leader_id for r in plan.ranges)
    assert_exactly_once(spark, tmp_path / "warehouse", "ev", broker_records(cluster.bootstrap(), "ev"))

    cluster.brokers[2].kill()
    wait_until(lambda: cluster.leaders(1, "ev")[1] == -1, message="partition 1 offline")
    cluster.brokers[2].start()
    wait_until(lambda: -1 not in cluster.leaders(1, "ev").values(), message="leaders back")
    produce(cluster.bootstrap(), "ev", events(240, 60), partitions=6)
    second = run_load(config, spark, LoadRequest(run_id="r2", fault="fail_first_attempt"))
    assert second[0].records_fetched == 60
    held = broker_records(cluster.bootstrap(), "ev")
    assert len(held) == 300
    assert_exactly_once(spark, tmp_path / "warehouse", "ev", held)
