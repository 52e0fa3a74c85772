"""The post-load audit against loads run by the loader itself (its tasks in this process,
spark=None), from a real broker subprocess: fast, without Airflow or a JVM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pylog.etl.config import load_config
from pylog.etl.fs import Storage
from pylog.etl.job import LoadRequest, run_load
from pylog.etl.state import StateStore
from pylog.orchestration.audit import AuditFailedError, audit_run, enforce
from pylog.orchestration.sample_events import page_views, produce
from pylog.testing.broker import BrokerProcess
from tests.dags.conftest import write_loader_config

END_MS = 1_795_176_000_000  # 2026-11-20T12:00:00Z


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    directory = tmp_path_factory.mktemp("audit")
    broker = BrokerProcess(directory / "broker").start()
    try:
        produce(broker.bootstrap, "page_views", page_views(600, END_MS, hours=3), partitions=2)
        config_path = write_loader_config(directory, broker.bootstrap)
        config = load_config(config_path)
        run_load(config, None, LoadRequest(run_id="run-1"))
        yield broker, config
    finally:
        broker.stop()


def test_a_committed_run_passes(loaded):
    _, config = loaded
    [check] = audit_run(config, "run-1", max_lag=0)
    assert check.ok, check.problems
    assert (check.entry.records_fetched, check.rows_in_table, check.max_partition_lag) == (600, 600, 0)
    enforce([check])


def test_a_run_that_never_committed_fails(loaded):
    _, config = loaded
    [check] = audit_run(config, "no-such-run")
    assert check.problems == ("table page_views: run 'no-such-run' has no audit entry (it did not commit)",)
    with pytest.raises(AuditFailedError, match="did not commit"):
        enforce([check])


def test_a_table_missing_rows_fails_even_when_the_entry_adds_up(loaded):
    _, config = loaded
    [victim] = sorted(Path(Storage.from_uri(config.warehouse).root).glob("page_views/dt=*/hr=*/*.parquet"))[:1]
    data = victim.read_bytes()
    victim.unlink()
    try:
        [check] = audit_run(config, "run-1")
    finally:
        victim.write_bytes(data)
    assert len(check.problems) == 1
    assert "the run's files hold" in check.problems[0] and "its audit entry says 600" in check.problems[0]


def test_lag_above_the_bound_fails_and_names_the_partition(loaded):
    broker, config = loaded
    counts = produce(broker.bootstrap, "page_views", page_views(40, END_MS + 3_600_000, hours=1, seed=3))
    [check] = audit_run(config, "run-1", max_lag=min(counts.values()) - 1)
    assert check.max_partition_lag == max(counts.values())
    assert {p for p in counts} == {int(problem.split("partition ")[1].split()[0]) for problem in check.problems}
    [check] = audit_run(config, "run-1", max_lag=max(counts.values()))
    assert check.ok


def test_per_partition_counts_are_checked_too(loaded):
    _, config = loaded
    state = StateStore(config.state)
    [audit_file] = Path(state.storage.join("tables", "page_views", "audit")).glob("*.json")
    original = audit_file.read_text()
    entry = json.loads(original)
    moved = 5  # the totals still add up; two partitions do not
    entry["partitions"][0]["rows_written"] -= moved
    entry["partitions"][1]["rows_written"] += moved
    audit_file.write_text(json.dumps(entry))
    try:
        [check] = audit_run(config, "run-1")
    finally:
        audit_file.write_text(original)
    assert [p.split(":")[1].strip() for p in check.problems] == ["partition 0", "partition 1"]
