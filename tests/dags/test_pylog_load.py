"""pylog_load end to end: a secured broker, ``airflow dags test`` spark-submitting the loader
on real Spark, then what analysts and operators see. One DAG run is shared by every test
here (Airflow and spark-submit are slow); the tests run in file order.

The source is a SASL_SSL broker (SCRAM, ACLs on) and the loader's settings, password
included, come only from the Airflow connection ``pylog_source`` (``AIRFLOW_CONN_*``, the
environment's secrets backend), so the DAGs, ``loader.yaml``, the state store, the
warehouse and every log are searched for the password at the end.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pytest

from pylog.etl.config import load_config
from pylog.etl.fs import Storage
from pylog.etl.state import StateStore
from pylog.orchestration.local_airflow import DagTestResult, LocalAirflow
from pylog.orchestration.sample_events import page_views, produce
from pylog.security.acls import AclOperation as Op, ResourceType
from pylog.testing.secured import SecuredBroker, allow
from pylog.warehouse.query import run_query
from pylog.warehouse.status import collect_status
from tests.dags.conftest import local_airflow, write_loader_config

pytestmark = pytest.mark.slow(minutes=2)

END_MS = int(datetime(2026, 11, 20, 12, tzinfo=timezone.utc).timestamp() * 1000)
EVENTS = 2400
LATER_EVENTS = 150


LOADER_PASSWORD = "dag-loader-Pa55-c81d"  # distinctive, so a grep cannot match by chance
ADMIN_PASSWORD = "dag-admin-Pa55-5e02"


@dataclass
class Loaded:
    broker: SecuredBroker
    config_path: Path
    airflow: LocalAirflow
    run: DagTestResult
    views: list


def admin_produce(broker: SecuredBroker, views: list) -> None:
    produce(broker.bootstrap, "page_views", views, partitions=3, security=broker.security("admin"))


@pytest.fixture(scope="module")
def loaded(module_dir):
    acls = (allow("loader", ResourceType.TOPIC, "page_views", Op.READ, Op.DESCRIBE)
            + allow("loader", ResourceType.GROUP, "pylog-loader.", Op.READ, prefixed=True))
    broker = SecuredBroker(module_dir / "secured", {"admin": ADMIN_PASSWORD,
                                                    "loader": LOADER_PASSWORD}, acls).start()
    connection = json.dumps({"conn_type": "kafka", "extra": {
        "bootstrap.servers": broker.bootstrap, **broker.client_settings("loader")}})
    with pytest.MonkeyPatch.context() as environment:
        # The CLI commands below (pylog status, query) reach the source the same way.
        environment.setenv("AIRFLOW_CONN_PYLOG_SOURCE", connection)
        try:
            views = page_views(EVENTS, END_MS, hours=6)
            admin_produce(broker, views)
            config_path = write_loader_config(module_dir, broker.bootstrap,
                                              {"airflow_conn_id": "pylog_source"})
            airflow = local_airflow(module_dir, config_path,
                                    AIRFLOW_CONN_PYLOG_SOURCE=connection)
            airflow.migrate()
            run = airflow.dags_test("pylog_load")
            yield Loaded(broker, config_path, airflow, run, views)
        finally:
            broker.stop()


def _pylog(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pylog.cli.main", *argv], capture_output=True,
                          text=True, timeout=300)


def _hour(ts_ms: int) -> str:
    return datetime.fromtimestamp(ts_ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:00")


def test_the_dag_run_succeeds_task_by_task(loaded):
    run = loaded.run
    assert run.state == "success", run.output[-5000:]
    assert run.task_states == {"plan_loads": "success", "load[0]": "success", "audit": "success",
                               "register_partitions": "success", "compact": "success"}
    assert f"--run-id {run.run_id} --topics page_views" in run.output
    assert "pylog.page_views at file://" in run.output and "created, 6 new partitions" in run.output


def test_the_table_holds_every_record_exactly_once(loaded):
    storage = Storage.from_uri(load_config(loaded.config_path).warehouse)
    [counts] = run_query(storage, "SELECT count(*) AS n, count(DISTINCT (_partition, _offset)) AS d "
                                  "FROM page_views").to_pylist()
    assert counts == {"n": EVENTS, "d": EVENTS}
    rows = run_query(storage, "SELECT user_id, url, referrer, duration_ms, epoch_ms(ts) AS ts_ms "
                              "FROM page_views").to_pylist()
    assert Counter(tuple(r.values()) for r in rows) == Counter(
        (v.user_id, v.url, v.referrer, v.duration_ms, v.ts_ms) for v in loaded.views)
    per_partition = run_query(storage, "SELECT _partition, min(_offset) AS lo, max(_offset) AS hi, "
                                       "count(*) AS n FROM page_views GROUP BY 1").to_pylist()
    assert all(p["lo"] == 0 and p["hi"] == p["n"] - 1 for p in per_partition)


def test_the_load_ran_under_the_airflow_run_id(loaded):
    state = StateStore(load_config(loaded.config_path).state)
    audit = state.latest_audit("page_views")
    assert audit.run_id == loaded.run.run_id
    assert (audit.records_fetched, audit.rows_written, audit.quarantined) == (EVENTS, EVENTS, 0)


def test_pylog_query_counts_page_views_per_hour(loaded):
    result = _pylog("query", "--config", str(loaded.config_path), "--format", "json",
                    "SELECT strftime(date_trunc('hour', ts), '%Y-%m-%d %H:00') AS hour, count(*) AS views "
                    "FROM page_views GROUP BY 1 ORDER BY 1")
    assert result.returncode == 0, result.stderr
    hours = {row["hour"]: row["views"] for row in map(json.loads, result.stdout.splitlines())}
    assert hours == Counter(_hour(v.ts_ms) for v in loaded.views)
    assert len(hours) == 6


def test_pylog_status_shows_the_committed_offsets_and_no_lag(loaded, tmp_path):
    page = tmp_path / "status.html"
    result = _pylog("status", "--config", str(loaded.config_path), "--html", str(page))
    assert result.returncode == 0, result.stderr
    html = page.read_text()
    assert 'id="partitions"' in html and 'id="runs"' in html and loaded.run.run_id in html
    lines = [line.split() for line in result.stdout.splitlines() if line.startswith("page_views ")]
    partitions = [l for l in lines if l[1] == "page_views"]
    assert len(partitions) == 3
    assert all(l[4] == l[5] and l[6] == "0" for l in partitions)  # latest == committed, lag 0
    [audit_line] = [l for l in lines if l[1] == loaded.run.run_id]
    assert audit_line[-1] == "ok" and str(EVENTS) in audit_line


def test_rerunning_the_load_of_the_same_dag_run_adds_nothing(loaded):
    config = load_config(loaded.config_path)
    storage = Storage.from_uri(config.warehouse)
    state = StateStore(config.state)
    files_before = sorted(p.name for p in Path(storage.join("page_views")).rglob("*.parquet"))
    committed_before = state.committed_offsets("page_views")
    admin_produce(loaded.broker, page_views(LATER_EVENTS, END_MS + 3_600_000, hours=1, seed=8))

    output = loaded.airflow.tasks_test("pylog_load", "load", loaded.run.run_id, map_index=0)

    assert f"--run-id {loaded.run.run_id}" in output
    assert loaded.airflow.task_states("pylog_load", loaded.run.run_id)["load[0]"] == "success", output[-5000:]
    [counts] = run_query(storage, "SELECT count(*) AS n, count(DISTINCT (_partition, _offset)) AS d "
                                  "FROM page_views").to_pylist()
    assert counts == {"n": EVENTS, "d": EVENTS}  # the run's plan was reused: the new records wait
    assert sorted(p.name for p in Path(storage.join("page_views")).rglob("*.parquet")) == files_before
    assert state.committed_offsets("page_views") == committed_before
    assert len(state.list_audits("page_views")) == 1
    assert sum(s.lag for s in collect_status(config)) == LATER_EVENTS


def test_the_audit_fails_when_counts_do_not_add_up_and_when_lag_exceeds_the_bound(loaded):
    """Both faults in one run of the audit task (it names every problem, and each Airflow
    command costs seconds): an audit entry that does not add up, and a lag bound below
    the lag of the records produced since the run."""
    lags = {p.partition: p.lag for s in collect_status(load_config(loaded.config_path)) for p in s.partitions}
    bound = max(lags.values()) - 1
    state = StateStore(load_config(loaded.config_path).state)
    [audit_file] = Path(state.storage.join("tables", "page_views", "audit")).glob("*.json")
    original = audit_file.read_text()
    tampered = json.loads(original)
    tampered["rows_written"] -= 1
    audit_file.write_text(json.dumps(tampered))
    try:
        # The bound as an Airflow Variable (AIRFLOW_VAR_*, the environment's secrets
        # backend): read at run time, it overrides PYLOG_MAX_LAG.
        output = loaded.airflow.tasks_test("pylog_load", "audit", loaded.run.run_id,
                                           env={"AIRFLOW_VAR_PYLOG_MAX_LAG": str(bound)})
    finally:
        audit_file.write_text(original)
    assert loaded.airflow.task_states("pylog_load", loaded.run.run_id)["audit"] == "failed"
    assert (f"rows written ({EVENTS - 1}) + quarantined (0) != records fetched ({EVENTS})") in output
    assert f"the run's files hold {EVENTS} rows, its audit entry says {EVENTS - 1}" in output
    lagging = [p for p, lag in lags.items() if lag > bound]
    assert lagging
    for partition in lagging:
        assert (f"partition {partition} of page_views lags {lags[partition]} offsets behind the log "
                f"(bound {bound})") in output


def test_the_backfill_dag_reloads_a_window_without_duplicates(loaded):
    config = load_config(loaded.config_path)
    storage = Storage.from_uri(config.warehouse)
    state = StateStore(config.state)
    committed_before = state.committed_offsets("page_views")
    hours_before = run_query(storage, "SELECT hr, count(*) AS n FROM page_views GROUP BY hr").to_pylist()

    run = loaded.airflow.dags_test("pylog_backfill", conf={
        "since": "2026-11-20T08:00:00Z", "until": "2026-11-20T10:00:00Z", "topics": "page_views"})

    assert run.state == "success", run.output[-5000:]
    assert run.task_states == {"backfill_arguments": "success", "backfill": "success", "audit": "success",
                               "register_partitions": "success"}
    audit = state.latest_audit("page_views")
    assert (audit.run_id, audit.kind) == (run.run_id, "backfill")
    assert sorted(p for p in audit.replaced_partitions if p.startswith("page_views ")) == [
        "page_views dt=2026-11-20/hr=08", "page_views dt=2026-11-20/hr=09"]
    assert audit.rows_written == sum(r["n"] for r in hours_before if r["hr"] in ("08", "09"))
    assert state.committed_offsets("page_views") == committed_before
    [counts] = run_query(storage, "SELECT count(*) AS n, count(DISTINCT (_partition, _offset)) AS d "
                                  "FROM page_views").to_pylist()
    assert counts == {"n": EVENTS, "d": EVENTS}
    assert sorted(run_query(storage, "SELECT hr, count(*) AS n FROM page_views GROUP BY hr").to_pylist(),
                  key=str) == sorted(hours_before, key=str)


def test_no_password_is_in_any_file_or_output_of_the_runs(loaded, module_dir):
    """The DAG runs, the loader, the audit and the status page saw the loader's password
    only through the connection: no file they wrote and nothing they printed holds it."""
    status = _pylog("status", "--config", str(loaded.config_path))
    assert status.returncode == 0, status.stderr
    outputs = [loaded.run.output, status.stdout, status.stderr]
    files = [p for p in module_dir.rglob("*") if p.is_file()]
    assert any(p.suffix == ".log" for p in files) and any(p.suffix == ".parquet" for p in files)
    for path in files:
        data = path.read_bytes()
        assert LOADER_PASSWORD.encode() not in data and ADMIN_PASSWORD.encode() not in data, path
    for text in outputs:
        assert LOADER_PASSWORD not in text and ADMIN_PASSWORD not in text
