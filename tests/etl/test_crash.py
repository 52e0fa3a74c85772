"""SIGKILL of `pylog load` (spark-submit and its driver) at each step, then a rerun.

The killed run goes through the real wrapper and spark-submit in a session of its own;
the driver's PYLOG_FAULT hook SIGKILLs that whole process group at the chosen point.
The rerun uses the shared SparkSession: same run id, same plan, exactly-once result.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pylog.etl.errors import TableLockedError
from pylog.etl.job import LoadRequest, run_load
from pylog.etl.state import StateStore
from pylog.testing.spark import spark_env
from tests.etl.helpers import assert_exactly_once, broker_records, events, write_config

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def pylog_load(config_path: str, run_id: str, fault: str,
               master: str | None = "local[2]") -> subprocess.CompletedProcess:
    """``pylog load`` with the shipped conf/ (``master`` None: no --master, none in the env)."""
    env = spark_env()
    env.update(PYLOG_FAULT=fault, SPARK_CONF_DIR=str(REPO / "conf"))
    env.pop("MASTER", None)
    return subprocess.run(
        [sys.executable, "-m", "pylog.cli.main", "load", "--config", config_path, "--run-id", run_id,
         *(["--master", master] if master else [])],
        env=env, capture_output=True, text=True, timeout=300, start_new_session=True)


@pytest.mark.parametrize("fault", ["after_plan", "mid_tasks", "before_commit"])
def test_killed_load_then_rerun(spark, mock_cluster, tmp_path, fault):
    config = write_config(tmp_path, mock_cluster.bootstrap, max_records_per_task=40)
    mock_cluster.produce("ev", events(0, 400))
    held = broker_records(mock_cluster.bootstrap, "ev")
    state = StateStore(config.state)

    killed = pylog_load(config.path, "crash-1", fault)
    assert killed.returncode == -9, killed.stderr[-3000:]
    plan = state.read_plan("ev", "crash-1")
    assert plan is not None and len(plan.ranges) == 12  # 4 partitions x 100 records in 40s
    done = state.count_markers("ev", "crash-1")
    assert {"after_plan": done == 0, "mid_tasks": 0 < done < 12, "before_commit": done == 12}[fault]
    assert state.committed_offsets("ev") == {} and state.list_audits("ev") == []

    with pytest.raises(TableLockedError, match="crash-1"):  # its lock is still fresh
        run_load(config, spark, LoadRequest(run_id="someone-else"))

    if fault == "after_plan":
        # One rerun through the whole wrapper, as an operator would. It has no --master and
        # conf/spark-defaults.conf names none, so it runs on local[*,4]: every task fails its
        # first attempt here and is retried (plain local[*] would fail the job).
        rerun = pylog_load(config.path, "crash-1", "fail_first_attempt", master=None)
        assert rerun.returncode == 0, rerun.stderr[-3000:]
        summary = [line.split() for line in rerun.stdout.splitlines() if line.startswith("ev ")]
        assert ["ev", "total"] == summary[-1][:2] and summary[-1][-3:] == ["400", "400", "0"]
        markers = [state.read_marker("ev", "crash-1", r) for r in plan.ranges]
        assert len(markers) == 12 and [m.attempt for m in markers] == [1] * 12
        audits = state.list_audits("ev")
    else:
        audits = run_load(config, spark, LoadRequest(run_id="crash-1"))
    assert audits[0].records_fetched == 400 and audits[0].rows_written == 400
    assert sum(state.committed_offsets("ev").values()) == 400
    assert_exactly_once(spark, tmp_path / "warehouse", "ev", held)


def test_pylog_load_reports_a_bad_config_in_one_line(tmp_path):
    bad = tmp_path / "loader.yaml"
    bad.write_text("source: {bootstrap_servers: '127.0.0.1:9'}\nwarehouse: file:///tmp/w\n"
                   "state: file:///tmp/s\ntopics: {ev: {format: xml}}\n")
    result = subprocess.run([sys.executable, "-m", "pylog.cli.main", "load", "--config", str(bad)],
                            capture_output=True, text=True, timeout=60, env=spark_env())
    assert result.returncode == 1
    assert result.stderr.strip() == "pylog load: error: topics.ev.format: 'xml' is not one of json, raw"
    good = REPO / "conf" / "loader.yaml"
    for extra, message in ((["--since", "yesterday"], "--since: 'yesterday' is not an ISO-8601 time"),
                           (["--topics", "nope"], "topics: no topic 'nope' in the configuration")):
        result = subprocess.run([sys.executable, "-m", "pylog.cli.main", "load", "--config", str(good), *extra],
                                capture_output=True, text=True, timeout=60, env=spark_env())
        assert result.returncode == 1 and result.stderr.startswith(f"pylog load: error: {message}")
        assert len(result.stderr.strip().splitlines()) == 1


def test_killed_mid_publish_then_rerun(spark, mock_cluster, tmp_path):
    """SIGKILL after the offsets committed and one staged file was published: the rerun
    replays the publish journal and the table ends exactly once."""
    config = write_config(tmp_path, mock_cluster.bootstrap, max_records_per_task=40)
    mock_cluster.produce("ev", events(0, 400))
    held = broker_records(mock_cluster.bootstrap, "ev")
    state = StateStore(config.state)

    killed = pylog_load(config.path, "crash-1", "mid_publish")
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert sum(state.committed_offsets("ev").values()) == 400  # past the commit point ...
    assert not state.is_committed("ev", "crash-1") and state.pending_run("ev") == "crash-1"  # ... not done
    journal = state.read_publish("ev", "crash-1")
    warehouse = tmp_path / "warehouse"
    assert len(journal) >= 12 and len(list((warehouse / "ev").rglob("*.parquet"))) == 1
    assert len(list((warehouse / "_staging" / "crash-1").rglob("*.parquet"))) == len(journal) - 1
    with pytest.raises(TableLockedError, match="crash-1"):  # its lock is still fresh
        run_load(config, spark, LoadRequest(run_id="someone-else"))

    [audit] = run_load(config, spark, LoadRequest(run_id="crash-1"))
    assert audit.records_fetched == 400 and audit.rows_written == 400
    assert state.is_committed("ev", "crash-1") and state.pending_run("ev") is None
    assert sum(state.committed_offsets("ev").values()) == 400
    assert not (warehouse / "_staging" / "crash-1").exists()
    assert_exactly_once(spark, warehouse, "ev", held)
