"""The loader on a real HDFS: Hadoop's own NameNode and two DataNodes (replication 2).

Tables and state live on ``hdfs://`` (hdfs-native); the rows are read back by Spark's own
Hadoop client, a reader that shares no code with the loader's. Faults are real: `pylog
load` and `pylog compact` SIGKILLed at each step, the NameNode SIGKILLed and restarted
during a load, a DataNode SIGKILLed during a load.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pytest

from pylog.etl.compact import compact_tables
from pylog.etl.fs import Storage
from pylog.etl.job import LoadRequest, run_load
from pylog.etl.state import StateStore
from pylog.testing.hdfs import hdfs_fixture
from pylog.testing.process import free_port
from pylog.testing.spark import spark_env
from tests.etl.helpers import broker_records, events, write_config

pytestmark = pytest.mark.slow(minutes=2)

hdfs = hdfs_fixture(datanodes=2)

HOUR, MINUTE = 3_600_000, 60_000
T07 = int(datetime(2026, 11, 20, 7, tzinfo=timezone.utc).timestamp() * 1000)


def hdfs_config(tmp_path: Path, hdfs, bootstrap: str, **overrides):
    """A loader config whose warehouse and state are in a fresh directory of the HDFS."""
    root = f"/pylog-{uuid.uuid4().hex[:8]}"
    return write_config(tmp_path, bootstrap, warehouse=hdfs.uri(f"{root}/warehouse"),
                        state=hdfs.uri(f"{root}/state"), **overrides)


def spark_keys(spark, uri: str) -> list[tuple[str, int, int]]:
    """(_topic, _partition, _offset) of every row, read by Spark's Hadoop client."""
    frame = spark.read.parquet(uri)
    return [(r[0], r[1], r[2]) for r in frame.select("_topic", "_partition", "_offset").collect()]


def assert_exactly_once(spark, config, table: str, expected) -> None:
    keys = spark_keys(spark, f"{config.warehouse}/{table}")
    duplicates = [k for k, n in Counter(keys).items() if n > 1]
    assert not duplicates, f"duplicated rows: {duplicates[:5]}"
    assert set(keys) == set(expected), (f"missing {sorted(set(expected) - set(keys))[:5]}, "
                                        f"extra {sorted(set(keys) - set(expected))[:5]}")


def pylog(command: str, config_path: str, *args: str, fault: str = "", timeout: float = 300,
          **env: str) -> subprocess.CompletedProcess:
    environment = spark_env()
    environment.update(PYLOG_FAULT=fault, **env)
    return subprocess.run([sys.executable, "-m", "pylog.cli.main", command, "--config", config_path, *args],
                          env=environment, capture_output=True, text=True, timeout=timeout,
                          start_new_session=True)


def files_under(storage: Storage, path: str) -> list[str]:
    found = []
    for name in storage.list_dir(path):
        child = storage.child(path, name)
        found += [child] if name.endswith(".parquet") else files_under(storage, child)
    return found


def test_scheduled_loads_rerun_and_backfill(spark, mock_cluster, tmp_path, hdfs):
    config = hdfs_config(tmp_path, hdfs, mock_cluster.bootstrap, max_records_per_task=40)
    mock_cluster.produce("ev", events(0, 160), timestamps=[T07 + i * (2 * HOUR // 160) for i in range(160)])
    [first] = run_load(config, spark, LoadRequest(run_id="r1"))
    assert first.records_fetched == first.rows_written == 160
    mock_cluster.produce("ev", events(160, 40), timestamps=[T07 + HOUR + 30 * MINUTE] * 40)
    [second] = run_load(config, spark, LoadRequest(run_id="r2"))
    assert second.records_fetched == 40
    held = broker_records(mock_cluster.bootstrap, "ev")
    assert_exactly_once(spark, config, "ev", held)
    state = StateStore(config.state)
    assert sum(state.committed_offsets("ev").values()) == 200
    assert [a.run_id for a in state.list_audits("ev")] == ["r1", "r2"]

    warehouse = Storage.from_uri(config.warehouse)
    before = {path: warehouse.size(path) for path in files_under(warehouse, warehouse.join("ev"))}
    assert run_load(config, spark, LoadRequest(run_id="r2")) == [second]  # a rerun changes nothing
    assert {path: warehouse.size(path) for path in files_under(warehouse, warehouse.join("ev"))} == before

    # A backfill of hour 08 that fails in its swap, then finishes on its rerun.
    window = dict(since_ms=T07 + HOUR + MINUTE, until_ms=T07 + 2 * HOUR - MINUTE)
    with pytest.raises(Exception, match="injected failure at mid_swap"):
        run_load(config, spark, LoadRequest(run_id="b1", fault="mid_swap", **window))
    audit = run_load(config, spark, LoadRequest(run_id="b1", **window))[-1]
    assert audit.kind == "backfill" and audit.replaced_partitions == ("ev dt=2026-11-20/hr=08",)
    assert_exactly_once(spark, config, "ev", held)
    assert not files_under(warehouse, warehouse.join("_staging"))


@pytest.mark.parametrize("fault", ["mid_tasks", "mid_publish"])
def test_killed_driver_then_rerun(spark, mock_cluster, tmp_path, hdfs, fault):
    config = hdfs_config(tmp_path, hdfs, mock_cluster.bootstrap, max_records_per_task=50)
    mock_cluster.produce("ev", events(0, 400))
    held = broker_records(mock_cluster.bootstrap, "ev")
    killed = pylog("load", config.path, "--run-id", "crash-1", "--master", "local[2]", fault=fault)
    assert killed.returncode == -9, killed.stderr[-3000:]
    state = StateStore(config.state)
    assert state.pending_run("ev") == "crash-1"
    [audit] = run_load(config, spark, LoadRequest(run_id="crash-1"))
    assert audit.records_fetched == audit.rows_written == 400
    assert state.is_committed("ev", "crash-1") and state.pending_run("ev") is None
    assert_exactly_once(spark, config, "ev", held)


@pytest.mark.parametrize("fault", ["compact_before_journal", "compact_mid_swap"])
def test_compaction_killed_then_finished(spark, mock_cluster, tmp_path, hdfs, fault):
    config = hdfs_config(tmp_path, hdfs, mock_cluster.bootstrap, max_records_per_task=5)
    mock_cluster.produce("ev", events(0, 80), timestamps=[T07 + 10 * MINUTE] * 40 + [T07 + HOUR + 10 * MINUTE] * 40)
    run_load(config, spark, LoadRequest(run_id="s1"))
    run_load(config, spark, LoadRequest(run_id="s2"))  # an empty run: s1's files may be compacted
    held = broker_records(mock_cluster.bootstrap, "ev")
    warehouse = Storage.from_uri(config.warehouse)
    assert len(files_under(warehouse, warehouse.join("ev"))) == 16

    killed = pylog("compact", config.path, fault=fault, timeout=120)
    assert killed.returncode == -9, killed.stderr[-3000:]
    [finished] = compact_tables(config)  # takes the dead compaction's lock over and finishes it
    assert len(finished.partitions) == 2
    assert_exactly_once(spark, config, "ev", held)
    names = [Storage.name(p) for p in files_under(warehouse, warehouse.join("ev"))]
    assert len(names) == 2 and all(n.startswith("compacted-") for n in names)
    for area in ("_staging", "_trash"):
        assert not files_under(warehouse, warehouse.join(area))


def load_while(spark, config, run_id: str, fault_action) -> BaseException | None:
    """Run a load in a thread; once its first done marker exists, call ``fault_action``.
    Returns what the load raised (None when it finished)."""
    outcome: list[BaseException | None] = []

    def load():
        try:
            run_load(config, spark, LoadRequest(run_id=run_id))
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 -- reported to the test
            outcome.append(exc)

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    state = StateStore(config.state)
    deadline = time.monotonic() + 120
    while not state.count_markers("ev", run_id) and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert thread.is_alive(), f"the load ended before the fault: {outcome}"
    fault_action()
    thread.join(300)
    assert not thread.is_alive(), "the load hangs after the fault"
    return outcome[0]


def test_namenode_restarted_mid_load(spark, mock_cluster, tmp_path, hdfs):
    config = hdfs_config(tmp_path, hdfs, mock_cluster.bootstrap, max_records_per_task=10)
    mock_cluster.produce("ev", events(0, 300))
    held = broker_records(mock_cluster.bootstrap, "ev")
    error = load_while(spark, config, "nn", hdfs.restart_namenode)
    if error is not None:  # the run failed cleanly: its rerun finishes it
        run_load(config, spark, LoadRequest(run_id="nn"))
    assert StateStore(config.state).is_committed("ev", "nn")
    assert_exactly_once(spark, config, "ev", held)


def test_datanode_killed_mid_load(spark, mock_cluster, tmp_path, hdfs):
    config = hdfs_config(tmp_path, hdfs, mock_cluster.bootstrap, max_records_per_task=10)
    mock_cluster.produce("ev", events(0, 300))
    held = broker_records(mock_cluster.bootstrap, "ev")
    try:
        error = load_while(spark, config, "dn", lambda: hdfs.kill_datanode(1))
        if error is not None:
            run_load(config, spark, LoadRequest(run_id="dn"))  # on the one DataNode left
        assert StateStore(config.state).is_committed("ev", "dn")
        assert_exactly_once(spark, config, "ev", held)
    finally:
        hdfs.start_datanode(1)


def test_bad_input_is_one_line_and_publishes_nothing(mock_cluster, tmp_path, hdfs):
    mock_cluster.produce("ev", events(0, 20))
    unreachable = write_config(tmp_path, mock_cluster.bootstrap, warehouse="hdfs://127.0.0.1:9/w",
                               state="hdfs://127.0.0.1:9/s")
    result = pylog("load", unreachable.path, timeout=120)
    assert result.returncode == 1, result.stderr[-3000:]
    assert result.stderr.strip().splitlines() == [
        "pylog load: error: hdfs://127.0.0.1:9/s: cannot reach the NameNode at 127.0.0.1:9 (Connection refused)"]

    root = Storage.from_uri(hdfs.uri("/"))
    root.makedirs("/locked")
    root.client.set_permission("/locked", 0o700)  # root's; the load runs as another user
    refused = write_config(tmp_path, mock_cluster.bootstrap, warehouse=hdfs.uri("/locked/warehouse"),
                           state=hdfs.uri("/locked/state"))
    result = pylog("load", refused.path, timeout=120, HADOOP_USER_NAME="analyst")
    assert result.returncode == 1, result.stderr[-3000:]
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("pylog load: error: HDFS /locked/") and "Permission denied: user=analyst" in line
    assert root.list_dir("/locked") == []  # no plan, no lock, no file

    root.write_atomic("/a-file", b"not a directory")
    wrong = write_config(tmp_path, mock_cluster.bootstrap, warehouse=hdfs.uri("/a-file/warehouse"),
                         state=hdfs.uri("/a-file/state"))
    result = pylog("load", wrong.path, timeout=120)
    assert result.returncode == 1, result.stderr[-3000:]
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("pylog load: error: HDFS /a-file/"), line
    assert root.read_bytes("/a-file") == b"not a directory"

    # A Spark master that refuses connections: one line too, and no run begun.
    good = hdfs_config(tmp_path, hdfs, mock_cluster.bootstrap)
    master = f"spark://127.0.0.1:{free_port()}"
    result = pylog("load", good.path, "--master", master, timeout=120)
    assert result.returncode == 1, result.stderr[-3000:]
    assert result.stderr.strip().splitlines() == [
        f"pylog load: error: --master: cannot reach the Spark master {master} "
        f"({master.removeprefix('spark://')}: Connection refused)"]
    state = Storage.from_uri(good.state)
    assert files_under(state, state.root) == [] and state.list_dir(state.root) == []


def test_webhdfs_warehouse_and_state(spark, mock_cluster, tmp_path, hdfs):
    root = f"/webhdfs-{uuid.uuid4().hex[:8]}"
    config = write_config(tmp_path, mock_cluster.bootstrap, warehouse=hdfs.webhdfs_uri(f"{root}/warehouse"),
                          state=hdfs.webhdfs_uri(f"{root}/state"), max_records_per_task=40)
    mock_cluster.produce("ev", events(0, 100))
    [audit] = run_load(config, spark, LoadRequest(run_id="w1"))
    assert audit.rows_written == 100
    keys = spark_keys(spark, hdfs.uri(f"{root}/warehouse/ev"))
    assert sorted(keys) == sorted(broker_records(mock_cluster.bootstrap, "ev"))
