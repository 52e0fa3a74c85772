"""The loader against a three-broker cluster: tasks grouped by leader, exactly once."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

import pytest

from pylog.client import Admin
from pylog.etl.errors import LoaderError
from pylog.etl.job import LoadRequest, run_load
from pylog.etl.state import StateStore
from pylog.testing.spark import local_spark
from tests.cluster.cluster_helpers import LocalCluster
from tests.cluster.conftest import wait_until
from tests.etl.helpers import assert_exactly_once, broker_records, events, produce, write_config


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    connect = f"{zookeeper.connect_string}/loader-{uuid.uuid4().hex[:8]}"
    local = LocalCluster(tmp_path_factory.mktemp("brokers"), connect).start()
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


HOUR = 3_600_000
T07 = int(datetime(2026, 11, 20, 7, tzinfo=timezone.utc).timestamp() * 1000)


def test_backfill_by_timestamp_through_the_cluster(cluster, tmp_path):
    spark = local_spark()
    with Admin(cluster.bootstrap()) as admin:
        admin.create_topic("clicks", num_partitions=3)
    wait_until(lambda: -1 not in cluster.leaders(2, "clicks").values(), message="leaders")
    produce(cluster.bootstrap(), "clicks", events(0, 90), 3,
            [T07 + i * (3 * HOUR // 90) for i in range(90)])
    config = write_config(tmp_path, cluster.bootstrap(3), topic="clicks",
                          max_records_per_task=20)
    run_load(config, spark, LoadRequest(run_id="s1"))
    state = StateStore(config.state)
    committed = state.committed_offsets("clicks")
    assert sum(committed.values()) == 90
    hour08 = sorted((tmp_path / "warehouse" / "clicks" / "dt=2026-11-20" / "hr=08").glob(
        "*.parquet"))
    hour08[0].unlink()  # damage the window; the backfill restores it from the brokers

    audits = run_load(config, spark, LoadRequest(
        run_id="b1", since_ms=T07 + HOUR + 60_000, until_ms=T07 + 2 * HOUR - 60_000))
    assert audits[-1].kind == "backfill"
    assert set(audits[-1].replaced_partitions) == {"clicks dt=2026-11-20/hr=08"}
    assert state.committed_offsets("clicks") == committed
    assert_exactly_once(spark, tmp_path / "warehouse", "clicks",
                        broker_records(cluster.bootstrap(), "clicks"))


def test_tasks_find_a_leader_that_moved_after_planning(cluster, tmp_path):
    spark = local_spark()
    with Admin(cluster.bootstrap()) as admin:
        admin.create_topic("moves", num_partitions=3)
    wait_until(lambda: -1 not in cluster.leaders(1, "moves").values(), message="leaders")
    produce(cluster.bootstrap(), "moves", events(0, 90), partitions=3)
    config = write_config(tmp_path, cluster.bootstrap(1), topic="moves", max_records_per_task=15)
    with pytest.raises(LoaderError, match="injected failure"):
        run_load(config, spark, LoadRequest(run_id="m1", fault="fail_later_tasks"))
    plan = StateStore(config.state).read_plan("moves", "m1")
    assert {r.leader_id for r in plan.ranges} == {1, 2, 3}

    old_port = cluster.ports[2]
    cluster.move(2)  # same broker id and data, another address
    wait_until(lambda: cluster.metadata(1).brokers.get(2) is not None
               and cluster.metadata(1).brokers[2].port == cluster.ports[2] != old_port
               and -1 not in cluster.leaders(1, "moves").values(),
               message="broker 2 back at its new address")
    audits = run_load(config, spark, LoadRequest(run_id="m1"))  # the same plan, finished
    assert_exactly_once(spark, tmp_path / "warehouse", "moves",
                        broker_records(cluster.bootstrap(), "moves"))
