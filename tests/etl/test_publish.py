"""Scheduled loads write under the run's staging directory and the commit publishes them:
a load that fails after its tasks wrote leaves every reader (``pylog tables``, ``pylog
query``, Spark, DuckDB) on the old table until its rerun commits."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from pylog.cli.main import main
from pylog.etl.errors import BadRecordThresholdError
from pylog.etl.fs import Storage
from pylog.etl.job import LoadRequest, run_load
from pylog.etl.state import StateStore
from pylog.warehouse.query import run_query
from pylog.warehouse.tables import describe_table
from tests.etl.helpers import assert_exactly_once, broker_records, duckdb_keys, events, table_keys, write_config

HOUR = 3_600_000
T07 = int(datetime(2026, 11, 20, 7, tzinfo=timezone.utc).timestamp() * 1000)


def _readers(spark, tmp_path, config, capsys) -> dict[str, object]:
    """What each reader sees of table ev: rows and hour partitions."""
    storage = Storage.from_uri(config.warehouse)
    info = describe_table(storage, "ev")
    assert main(["tables", "--partitions", "--config", config.path, "ev"]) == 0
    printed = capsys.readouterr().out
    return {
        "tables": (info.rows, tuple(p.name for p in info.partitions)),
        "tables_cli": printed.splitlines()[2].split()[3],
        "query": run_query(storage, "SELECT count(*) AS n FROM ev").column("n")[0].as_py(),
        "spark": len(table_keys(spark, tmp_path / "warehouse", "ev")),
        "duckdb": len(duckdb_keys(tmp_path / "warehouse", "ev")),
        "quarantine": run_query(storage, "SELECT count(*) AS n FROM ev_quarantine").column("n")[0].as_py()
        if (tmp_path / "warehouse" / "ev_quarantine").exists() else 0,
    }


def test_a_failed_load_is_invisible_until_its_rerun_commits(spark, mock_cluster, tmp_path, capsys):
    config = write_config(tmp_path, mock_cluster.bootstrap, max_records_per_task=30)
    mock_cluster.produce("ev", events(0, 100), timestamps=[T07 + 60_000] * 100)
    run_load(config, None, LoadRequest(run_id="r1"))
    before = _readers(spark, tmp_path, config, capsys)
    assert before["tables"] == (100, ("dt=2026-11-20/hr=07",)) and before["tables_cli"] == "100"
    assert before["query"] == before["spark"] == before["duckdb"] == 100

    # The next hour brings 20 records and 2 that cannot be decoded: over max_bad_records 0.
    mock_cluster.produce("ev", events(100, 20) + [b"not json"] * 2, timestamps=[T07 + HOUR + 60_000] * 22)
    with pytest.raises(BadRecordThresholdError, match="2 of 22 records"):
        run_load(config, None, LoadRequest(run_id="r2"))
    state = StateStore(config.state)
    assert state.pending_run("ev") == "r2" and state.count_markers("ev", "r2") > 0  # the tasks wrote
    assert any((tmp_path / "warehouse" / "_staging" / "r2").rglob("*.parquet"))
    assert _readers(spark, tmp_path, config, capsys) == before
    assert state.latest_audit("ev").run_id == "r1" and sum(state.committed_offsets("ev").values()) == 100

    config = write_config(tmp_path, mock_cluster.bootstrap, max_records_per_task=30, max_bad_records=5,
                          max_bad_ratio=0.5)
    [audit] = run_load(config, None, LoadRequest(run_id="r2"))
    assert (audit.records_fetched, audit.rows_written, audit.quarantined) == (22, 20, 2)
    after = _readers(spark, tmp_path, config, capsys)
    assert after["tables"] == (120, ("dt=2026-11-20/hr=07", "dt=2026-11-20/hr=08"))
    assert after["query"] == after["spark"] == after["duckdb"] == 120 and after["quarantine"] == 2
    assert not any((tmp_path / "warehouse" / "_staging").rglob("*.parquet"))
    held = broker_records(mock_cluster.bootstrap, "ev")
    bad = {k for k, v in held.items() if v == b"not json"}
    assert_exactly_once(spark, tmp_path / "warehouse", "ev", held, quarantined=bad)
