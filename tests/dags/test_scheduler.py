"""The DAGs under Airflow's own scheduler: api-server, scheduler and dag-processor as real
processes, LocalExecutor, the metadata database on a private Postgres, against a real
pylog broker with a file:// warehouse.

pylog_load runs on a 10-second schedule for three intervals in a row, with page views
produced while it runs. The second run's load is killed once, after its Spark tasks wrote
their files and before it committed the offsets (``PYLOG_FAULT=before_commit``), and
Airflow retries it: try 2 reuses the run's plan. Then pylog_backfill is triggered through
the REST API with its conf. After each, every record in the broker is in the table
exactly once. The tests share one Airflow and run in file order.
"""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from pylog.errors import ConfigError
from pylog.etl.config import load_config
from pylog.etl.state import StateStore
from pylog.orchestration.sample_events import page_views, produce
from pylog.orchestration.settings import from_environment
from pylog.testing.airflow import ScheduledAirflow
from pylog.testing.broker import BrokerProcess
from pylog.testing.postgres import postgres_fixture
from tests.dags.conftest import DAGS, write_loader_config
from tests.etl.helpers import broker_records, duckdb_keys

pytestmark = pytest.mark.slow(minutes=2)

END_MS = int(datetime(2026, 11, 20, 12, tzinfo=timezone.utc).timestamp() * 1000)
BATCHES = (600, 200, 200)  # the first before the DAG is unpaused, the others during runs 1 and 2
INTERVALS = len(BATCHES)
FAULTED_RUN = 2  # the scheduled run whose first load attempt is killed before its commit
TERMINAL = {"success", "failed", "upstream_failed", "skipped", "removed"}

postgres = postgres_fixture()


@dataclass
class Scheduled:
    airflow: ScheduledAirflow
    broker: BrokerProcess
    config_path: Path


def write_fault_wrapper(directory: Path, fault: str, run_ordinal: int) -> Path:
    """A ``spark-submit`` that runs the real one with ``PYLOG_FAULT=fault`` on the first
    try of pylog_load's load in its ``run_ordinal``-th DAG run, and plainly otherwise.

    The task's try and run come from the ``AIRFLOW_CTX_*`` variables Airflow sets for a
    task. The faulted spark-submit gets a session of its own, so the driver's kill of its
    process group ends spark-submit and its JVM, not the Airflow task around them.
    """
    directory.mkdir(parents=True, exist_ok=True)
    real = Path(sys.executable).parent / "spark-submit"
    wrapper = directory / "spark-submit"
    wrapper.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import os, subprocess, sys
        REAL, SEEN = {str(real)!r}, {str(directory / "runs-seen")!r}
        env = os.environ
        first_load_try = (env.get("AIRFLOW_CTX_DAG_ID"), env.get("AIRFLOW_CTX_TASK_ID"),
                          env.get("AIRFLOW_CTX_TRY_NUMBER")) == ("pylog_load", "load", "1")
        if first_load_try:
            os.makedirs(SEEN, exist_ok=True)
            open(os.path.join(SEEN, env["AIRFLOW_CTX_DAG_RUN_ID"].replace("/", "_")), "w").close()
            if len(os.listdir(SEEN)) == {run_ordinal}:
                print("fault wrapper: spark-submit with PYLOG_FAULT={fault}", file=sys.stderr, flush=True)
                faulted = dict(env, PYLOG_FAULT={fault!r})
                code = subprocess.Popen([REAL, *sys.argv[1:]], env=faulted, start_new_session=True).wait()
                print(f"fault wrapper: spark-submit exited with {{code}}", file=sys.stderr, flush=True)
                sys.exit(1 if code else 0)
        os.execv(REAL, [REAL, *sys.argv[1:]])
        """))
    wrapper.chmod(0o755)
    return wrapper


def write_spark_conf(directory: Path) -> Path:
    """conf/'s Spark settings plus what starts a driver faster on two busy cores: no UI,
    the client JIT only and the serial GC (roughly halves a short job's wall time here)."""
    directory.mkdir(parents=True, exist_ok=True)
    shipped = (DAGS.parent / "conf" / "spark-defaults.conf").read_text()
    shutil.copy(DAGS.parent / "conf" / "log4j2.properties", directory / "log4j2.properties")
    (directory / "spark-defaults.conf").write_text(
        shipped + "\nspark.ui.enabled false\n"
        "spark.driver.extraJavaOptions -XX:TieredStopAtLevel=1 -XX:+UseSerialGC\n")
    return directory


@pytest.fixture(scope="module")
def scheduled(module_dir, postgres):
    broker = BrokerProcess(module_dir / "broker").start()
    try:
        config_path = write_loader_config(module_dir, broker.bootstrap)
        wrapper = write_fault_wrapper(module_dir / "bin", "before_commit", FAULTED_RUN)
        env = {"PYLOG_LOADER_CONFIG": str(config_path),
               "PYLOG_METASTORE_DIR": str(module_dir / "metastore"),
               "PYLOG_LOAD_SCHEDULE": "10s",
               "PYLOG_RETRY_DELAY": "2s",
               "SPARK_CONF_DIR": str(write_spark_conf(module_dir / "spark-conf")),
               "PATH": os.pathsep.join([str(wrapper.parent), str(Path(sys.executable).parent),
                                        os.environ.get("PATH", "")])}
        began = time.monotonic()
        airflow = ScheduledAirflow(module_dir / "airflow", DAGS, postgres, env).start()
        print(f"airflow up in {time.monotonic() - began:.1f}s: "
              + ", ".join(f"{name} {s:.1f}s" for name, s in airflow.timings.items()))
        try:
            yield Scheduled(airflow, broker, config_path)
        finally:
            airflow.stop()
    finally:
        broker.stop()


def batch(index: int) -> list:
    """The page views of batch ``index``: two hours, each batch an hour later than the one before."""
    return page_views(BATCHES[index], END_MS + index * 3_600_000, hours=2, seed=index)


def produce_batch(broker: BrokerProcess, index: int) -> None:
    produce(broker.bootstrap, "page_views", batch(index), partitions=3)


def assert_exactly_once(scheduled: Scheduled) -> None:
    keys = duckdb_keys(scheduled.config_path.parent / "warehouse", "page_views")
    duplicates = [k for k, n in Counter(keys).items() if n > 1]
    assert not duplicates, f"duplicated rows: {duplicates[:5]}"
    assert set(keys) == set(broker_records(scheduled.broker.bootstrap, "page_views"))
    assert len(keys) == sum(BATCHES)


def wait_until_quiet(airflow: ScheduledAirflow, dag_id: str, timeout: float = 180.0) -> None:
    """Until no task instance of the DAG is queued or running (a paused DAG's run that the
    scheduler had already started keeps its unstarted tasks scheduled, and no more)."""
    deadline = time.monotonic() + timeout
    while True:
        busy = [(run.run_id, ti.task_id, ti.state) for run in airflow.dag_runs(dag_id) if not run.finished
                for ti in airflow.task_instances(dag_id, run.run_id) if ti.state in ("queued", "running")]
        if not busy:
            return
        assert time.monotonic() < deadline, f"{dag_id} still busy after {timeout:.0f}s: {busy}"
        time.sleep(1)


def test_the_schedule_and_the_retry_delay_can_be_seconds():
    """What this module's DAG runs rely on, checked without Airflow."""
    settings = from_environment(DAGS.parent, {"PYLOG_LOAD_SCHEDULE": "10s", "PYLOG_RETRY_DELAY": "2s"})
    assert (settings.schedule, settings.retry_delay) == (timedelta(seconds=10), timedelta(seconds=2))
    defaults = from_environment(DAGS.parent, {})
    assert (defaults.schedule, defaults.retry_delay) == ("@hourly", timedelta(minutes=1))
    assert from_environment(DAGS.parent, {"PYLOG_LOAD_SCHEDULE": "*/15 * * * *"}).schedule == "*/15 * * * *"
    assert from_environment(DAGS.parent, {"PYLOG_LOAD_SCHEDULE": "none"}).schedule is None
    with pytest.raises(ConfigError, match="PYLOG_RETRY_DELAY"):
        from_environment(DAGS.parent, {"PYLOG_RETRY_DELAY": "soon"})


@pytest.mark.timeout(1200)
def test_the_scheduler_loads_interval_after_interval_and_retries_a_killed_load(scheduled):
    airflow = scheduled.airflow
    produce_batch(scheduled.broker, 0)
    airflow.unpause("pylog_load")

    # Each further batch goes in while a run is under way: that run or the next loads it.
    for ordinal in range(1, INTERVALS):
        airflow.wait_for_runs("pylog_load", lambda runs: len(runs) >= ordinal
                              and runs[ordinal - 1].state in ("running", "success"))
        produce_batch(scheduled.broker, ordinal)
    runs = airflow.wait_for_runs("pylog_load", lambda runs: len(runs) >= INTERVALS
                                 and all(r.finished for r in runs[:INTERVALS])
                                 or any(r.state == "failed" for r in runs), timeout=720)
    airflow.set_paused("pylog_load", True)
    wait_until_quiet(airflow, "pylog_load")

    runs = runs[:INTERVALS]
    assert [(r.state, r.run_type) for r in runs] == [("success", "scheduled")] * INTERVALS, runs
    for earlier, later in zip(runs, runs[1:]):  # max_active_runs=1: one after the other
        assert earlier.end_date <= later.start_date, (earlier, later)
    for ordinal, run in enumerate(runs, start=1):
        tries = airflow.task_tries("pylog_load", run.run_id, "load", map_index=0)
        states = {ti.task_id: ti.state for ti in airflow.task_instances("pylog_load", run.run_id)}
        assert states == {"plan_loads": "success", "load": "success", "audit": "success",
                          "register_partitions": "success", "compact": "success"}, (run, states)
        if ordinal == FAULTED_RUN:
            assert [(t.try_number, t.state) for t in tries] == [(1, "failed"), (2, "success")], tries
            assert tries[0].end_date <= tries[1].start_date
            first = airflow.task_log("pylog_load", run.run_id, "load", 1, map_index=0)
            # The driver's own last words may die with its JVM; the wrapper outlives both.
            assert "fault wrapper: spark-submit exited with -9" in first, first[-3000:]
        else:
            assert [(t.try_number, t.state) for t in tries] == [(1, "success")], tries

    assert_exactly_once(scheduled)
    state = StateStore(load_config(scheduled.config_path).state)
    audited = {a.run_id: a for a in state.list_audits("page_views")}
    assert set(audited) >= {r.run_id for r in runs}
    assert sum(audited[r.run_id].rows_written for r in runs) == sum(BATCHES)


def test_the_backfill_dag_triggered_through_the_rest_api_reloads_a_window_exactly_once(scheduled):
    airflow = scheduled.airflow
    config = load_config(scheduled.config_path)
    state = StateStore(config.state)
    committed_before = state.committed_offsets("page_views")
    conf = {"since": "2026-11-20T10:00:00Z", "until": "2026-11-20T12:00:00Z", "topics": "page_views"}
    since_ms, until_ms = END_MS - 2 * 3_600_000, END_MS
    in_window = sum(since_ms <= v.ts_ms < until_ms for i in range(INTERVALS) for v in batch(i))
    airflow.unpause("pylog_backfill")

    run_id = airflow.trigger("pylog_backfill", conf)
    run = airflow.wait_for_run("pylog_backfill", run_id, timeout=300)

    states = {ti.task_id: ti.state for ti in airflow.task_instances("pylog_backfill", run_id)}
    assert (run.state, run.run_type, run.conf) == ("success", "manual", conf), states
    assert states == {"backfill_arguments": "success", "backfill": "success", "audit": "success",
                      "register_partitions": "success"}
    audit = state.latest_audit("page_views")
    assert (audit.run_id, audit.kind) == (run_id, "backfill")
    assert sorted(p for p in audit.replaced_partitions if p.startswith("page_views ")) == [
        "page_views dt=2026-11-20/hr=10", "page_views dt=2026-11-20/hr=11"]
    assert audit.rows_written == in_window
    assert state.committed_offsets("page_views") == committed_before
    assert_exactly_once(scheduled)
