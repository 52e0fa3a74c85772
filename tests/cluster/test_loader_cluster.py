"""The loader against a three-broker cluster: tasks grouped by leader, exactly once.

The loader issue's cases run here against three broker processes whose topics have
replication factor 3 (``min.insync.replicas`` 2): a clean and an incremental load with a
task failing its first attempt, a backfill, a moved leader, the driver SIGKILLed (through
``pylog load`` and spark-submit) at each fault point and rerun, a retention gap under
``fail`` and ``earliest``, quarantine with its threshold, and the leader of a partition
SIGKILLed while a load reads it.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pytest

from pylog.client import Admin, SimpleConsumer
from pylog.etl.errors import BadRecordThresholdError, LoaderError, RetentionGapError
from pylog.etl.job import LoadRequest, run_load
from pylog.etl.state import StateStore
from pylog.testing.spark import local_spark, spark_env
from tests.cluster.cluster_helpers import LocalCluster
from tests.cluster.conftest import wait_until
from tests.etl.helpers import assert_exactly_once, broker_records, events, produce, write_config

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    connect = f"{zookeeper.connect_string}/loader-{uuid.uuid4().hex[:8]}"
    local = LocalCluster(tmp_path_factory.mktemp("brokers"), connect, extra={
        "log.retention.check.interval.ms": 100, "default.replication.factor": 3,
        "min.insync.replicas": 2, "replica.fetch.wait.max.ms": 200}).start()
    yield local
    local.close()


def create_replicated_topic(cluster: LocalCluster, topic: str, partitions: int,
                            configs: dict[str, str] | None = None) -> None:
    """``topic`` with the cluster's default replication factor (3)."""
    with Admin(cluster.bootstrap()) as admin:
        admin.create_topic(topic, num_partitions=partitions, replication_factor=-1,
                           configs=configs)


def in_sync(cluster: LocalCluster, topic: str, via: int = 1) -> bool:
    """Every partition of ``topic`` has a leader and all three replicas in its ISR."""
    found = cluster.metadata(via, [topic]).topics.get(topic)
    return found is not None and all(p.leader >= 0 and len(p.isr) == 3
                                     for p in found.partitions.values())


def test_loads_exactly_once_from_three_brokers_across_a_broker_crash(cluster, tmp_path):
    spark = local_spark()
    create_replicated_topic(cluster, "ev", 6)
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
    wait_until(lambda: cluster.leaders(1, "ev")[1] not in (-1, 2),
               message="partition 1 led by another replica")
    cluster.brokers[2].start()
    wait_until(lambda: in_sync(cluster, "ev"), timeout=30, message="broker 2 back in the ISR")
    produce(cluster.bootstrap(), "ev", events(240, 60), partitions=6)
    second = run_load(config, spark, LoadRequest(run_id="r2", fault="fail_first_attempt"))
    assert second[0].records_fetched == 60
    state = StateStore(config.state)
    retried = [state.read_marker("ev", "r2", r) for r in state.read_plan("ev", "r2").ranges]
    assert retried and [m.attempt for m in retried] == [1] * len(retried)  # done on the retry
    held = broker_records(cluster.bootstrap(), "ev")
    assert len(held) == 300
    assert_exactly_once(spark, tmp_path / "warehouse", "ev", held)


HOUR = 3_600_000
T07 = int(datetime(2026, 11, 20, 7, tzinfo=timezone.utc).timestamp() * 1000)


def test_backfill_by_timestamp_through_the_cluster(cluster, tmp_path):
    spark = local_spark()
    create_replicated_topic(cluster, "clicks", 3)
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
    create_replicated_topic(cluster, "moves", 3)
    wait_until(lambda: -1 not in cluster.leaders(1, "moves").values(), message="leaders")
    produce(cluster.bootstrap(), "moves", events(0, 90), partitions=3)
    config = write_config(tmp_path, cluster.bootstrap(1), topic="moves", max_records_per_task=15)
    with pytest.raises(LoaderError, match="injected failure"):
        run_load(config, spark, LoadRequest(run_id="m1", fault="fail_later_tasks"))
    plan = StateStore(config.state).read_plan("moves", "m1")
    assert {r.leader_id for r in plan.ranges} == {1, 2, 3}

    old_port = cluster.ports[2]
    cluster.move(2)  # same broker id and data, another address
    def back_at_new_address() -> bool:
        registered = cluster.metadata(1).brokers.get(2)  # one snapshot: it may still move
        return (registered is not None and registered.port == cluster.ports[2] != old_port
                and -1 not in cluster.leaders(1, "moves").values())
    wait_until(back_at_new_address, message="broker 2 back at its new address")
    audits = run_load(config, spark, LoadRequest(run_id="m1"))  # the same plan, finished
    assert audits[-1].run_id == "m1" and audits[-1].ranges == plan.ranges
    assert audits[-1].records_fetched == 90
    assert_exactly_once(spark, tmp_path / "warehouse", "moves",
                        broker_records(cluster.bootstrap(), "moves"))


REPO = Path(__file__).resolve().parents[2]


def create_spread_topic(cluster: LocalCluster, topic: str, configs: dict[str, str] | None = None) -> None:
    """``topic`` with 3 partitions, partition p led by broker 1 + p (one per broker)."""
    create_replicated_topic(cluster, topic, 3, configs)
    wait_until(lambda: cluster.leaders(1, topic) == {p: 1 + p for p in range(3)},
               message=f"leaders of {topic}")


@pytest.mark.parametrize("fault", ["after_plan", "mid_tasks", "before_commit"])
def test_killed_load_then_rerun_through_the_cluster(cluster, tmp_path, fault):
    """SIGKILL of ``pylog load`` (spark-submit, its JVM and driver) at a fault point, then rerun."""
    spark = local_spark()
    topic = f"crash_{fault}"
    create_spread_topic(cluster, topic)
    produce(cluster.bootstrap(), topic, events(0, 120), partitions=3)
    config = write_config(tmp_path, cluster.bootstrap(2), topic=topic, max_records_per_task=20)
    state = StateStore(config.state)

    env = spark_env()
    env.update(PYLOG_FAULT=fault, SPARK_CONF_DIR=str(REPO / "conf"))
    killed = subprocess.run(
        [sys.executable, "-m", "pylog.cli.main", "load", "--config", config.path, "--run-id", "c1",
         "--master", "local[2]"],
        env=env, capture_output=True, text=True, timeout=300, start_new_session=True)
    assert killed.returncode == -9, killed.stderr[-3000:]
    plan = state.read_plan(topic, "c1")
    assert plan is not None and len(plan.ranges) == 6  # 3 partitions x 40 records in 20s
    assert {r.leader_id for r in plan.ranges} == {1, 2, 3}
    done = state.count_markers(topic, "c1")
    assert {"after_plan": done == 0, "mid_tasks": 0 < done < 6, "before_commit": done == 6}[fault]
    assert state.committed_offsets(topic) == {} and state.list_audits(topic) == []

    audits = run_load(config, spark, LoadRequest(run_id="c1"))
    assert audits[0].records_fetched == 120 and audits[0].rows_written == 120
    assert state.committed_offsets(topic) == {0: 40, 1: 40, 2: 40}
    assert_exactly_once(spark, tmp_path / "warehouse", topic, broker_records(cluster.bootstrap(), topic))


def log_starts_past(bootstrap: str, topic: str, offset: int, partitions: int, timeout_s: float = 60):
    """Each partition's log start once retention moved it past ``offset`` and it settled."""
    deadline = time.monotonic() + timeout_s
    history: list[tuple[int, ...]] = []
    with SimpleConsumer(bootstrap) as consumer:
        while True:
            history.append(tuple(consumer.earliest_offset(topic, p) for p in range(partitions)))
            if min(history[-1]) > offset and len(history) >= 5 and len(set(history[-5:])) == 1:
                return dict(enumerate(history[-1]))
            if time.monotonic() > deadline:
                raise AssertionError(f"retention did not move every log start past {offset}: {history[-1]}")
            time.sleep(0.3)


def test_retention_gap_fail_then_earliest_through_the_cluster(cluster, tmp_path):
    spark = local_spark()
    topic = "trimmed"
    create_spread_topic(cluster, topic, {"segment.bytes": "2048", "retention.bytes": "8192"})
    produce(cluster.bootstrap(), topic, events(0, 90), 3)
    config = write_config(tmp_path, cluster.bootstrap(3), topic=topic)
    run_load(config, spark, LoadRequest(run_id="r1"))
    first = broker_records(cluster.bootstrap(), topic)
    state = StateStore(config.state)
    assert state.committed_offsets(topic) == {0: 30, 1: 30, 2: 30}

    produce(cluster.bootstrap(), topic, events(90, 1800), 3, flush_every=60)
    starts = log_starts_past(cluster.bootstrap(), topic, 30, 3)

    with pytest.raises(RetentionGapError) as info:
        run_load(config, spark, LoadRequest(run_id="r2"))
    found = re.search(rf"topic {topic} partition (\d): records \[30, (\d+)\)", str(info.value))
    assert found and int(found[2]) == starts[int(found[1])], str(info.value)
    assert state.committed_offsets(topic) == {0: 30, 1: 30, 2: 30}

    lenient = write_config(tmp_path, cluster.bootstrap(3), topic=topic, on_retention_gap="earliest")
    audits = run_load(lenient, spark, LoadRequest(run_id="r3"))
    assert sorted((g.partition, g.start, g.end) for g in audits[-1].gaps) == [
        (p, 30, starts[p]) for p in range(3)]
    held = broker_records(cluster.bootstrap(), topic)
    assert audits[-1].records_fetched == len(held) == sum(630 - starts[p] for p in range(3))
    assert state.committed_offsets(topic) == {0: 630, 1: 630, 2: 630}
    assert_exactly_once(spark, tmp_path / "warehouse", topic, set(first) | set(held))


def test_quarantine_and_threshold_through_the_cluster(cluster, tmp_path):
    spark = local_spark()
    topic = "bad"
    create_spread_topic(cluster, topic)
    values = events(0, 90)
    bad_indexes = {4, 20, 61}  # partitions 1, 2 and 1
    for i in bad_indexes:
        values[i] = b"{not json" if i != 61 else b'{"user": "x", "n": "not a number"}'
    produce(cluster.bootstrap(), topic, values, 3)
    held = broker_records(cluster.bootstrap(), topic)
    bad_keys = {(topic, i % 3, i // 3) for i in bad_indexes}
    assert {held[k] for k in bad_keys} == {values[i] for i in bad_indexes}

    strict = write_config(tmp_path, cluster.bootstrap(1), topic=topic, max_bad_records=2,
                          max_bad_ratio=1.0, max_records_per_task=10)
    with pytest.raises(BadRecordThresholdError, match="3 of 90"):
        run_load(strict, spark, LoadRequest(run_id="q1"))
    assert StateStore(strict.state).committed_offsets(topic) == {}

    relaxed = write_config(tmp_path, cluster.bootstrap(1), topic=topic, max_bad_records=3,
                           max_bad_ratio=0.5, max_records_per_task=10)
    audits = run_load(relaxed, spark, LoadRequest(run_id="q1"))  # the same run id, now committed
    assert audits[0].quarantined == 3 and audits[0].rows_written == 87
    assert_exactly_once(spark, tmp_path / "warehouse", topic, held, quarantined=bad_keys)
    quarantine = spark.read.parquet(str(tmp_path / "warehouse" / f"{topic}_quarantine")).collect()
    assert {(r["_topic"], r["_partition"], r["_offset"]) for r in quarantine} == bad_keys
    assert {bytes(r["_value"]) for r in quarantine} == {values[i] for i in bad_indexes}
    assert all(r["_error"] for r in quarantine)


def test_load_goes_on_while_the_leader_of_a_partition_is_killed(cluster, tmp_path):
    """SIGKILL, just after the plan is written, of the broker leading the partition whose
    ranges run first: the tasks' retries, or else a rerun of the same run id, read from
    the replica the controller elects, and the table holds every record once."""
    spark = local_spark()
    topic = "failover"
    create_spread_topic(cluster, topic)
    produce(cluster.bootstrap(), topic, events(0, 90), partitions=3)
    wait_until(lambda: in_sync(cluster, topic), timeout=30, message="every replica in the ISR")
    held = broker_records(cluster.bootstrap(), topic)
    assert len(held) == 90
    config = write_config(tmp_path, cluster.bootstrap(), topic=topic, max_records_per_task=5)
    state = StateStore(config.state)
    outcome: dict[str, object] = {}

    def load() -> None:
        try:
            outcome["audits"] = run_load(config, spark, LoadRequest(run_id="f1"))
        except LoaderError as exc:  # map tasks failed: the operator reruns the run id
            outcome["error"] = exc

    thread = threading.Thread(target=load, name="load")
    thread.start()
    plan = wait_until(lambda: state.read_plan(topic, "f1"), timeout=120, message="the plan")
    partition, victim = plan.ranges[0].partition, plan.ranges[0].leader_id  # tasks in plan order
    cluster.brokers[victim].kill()
    survivors = [b for b in cluster.brokers if b != victim]
    try:
        unread = [r for r in plan.ranges
                  if r.partition == partition and state.read_marker(topic, "f1", r) is None]
        assert unread, f"partition {partition} was read before its leader was killed"
        thread.join(300)
        assert not thread.is_alive(), "the load did not finish"
        wait_until(lambda: cluster.leaders(survivors[0], topic)[partition] in survivors,
                   timeout=30, message=f"another replica leading partition {partition}")
        if "error" in outcome:
            print(f"load f1 failed ({outcome['error']}); rerunning it", flush=True)
            audits = run_load(config, spark, LoadRequest(run_id="f1"))
        else:
            audits = outcome["audits"]
        assert audits[-1].records_fetched == 90 and audits[-1].rows_written == 90
        assert state.committed_offsets(topic) == {0: 30, 1: 30, 2: 30}
        assert broker_records(cluster.bootstrap(*survivors), topic) == held
        assert_exactly_once(spark, tmp_path / "warehouse", topic, held)
    finally:
        thread.join(300)
        cluster.brokers[victim].start()
        wait_until(lambda: in_sync(cluster, topic, via=survivors[0]), timeout=60,
                   message=f"broker {victim} back in the ISR")
