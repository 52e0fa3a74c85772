"""Scheduled loads end to end on the shared SparkSession: the exactly-once invariant."""

from __future__ import annotations

import pytest

from pylog.etl.errors import BadRecordThresholdError, LoaderError
from pylog.etl.job import LoadRequest, run_load
from pylog.etl.state import StateStore
from tests.etl.helpers import assert_exactly_once, broker_records, events, write_config


def test_mock_cluster_clean_incremental_and_rerun(spark, mock_cluster, tmp_path):
    """librdkafka's mock cluster as the source: clean load, new records only, rerun no-op."""
    config = write_config(tmp_path, mock_cluster.bootstrap, max_records_per_task=40)
    mock_cluster.produce("ev", events(0, 200))
    first = run_load(config, spark, LoadRequest(run_id="r1"))
    held = broker_records(mock_cluster.bootstrap, "ev")
    assert len(held) == 200 and first[0].records_fetched == 200 and first[0].rows_written == 200
    assert_exactly_once(spark, tmp_path / "warehouse", "ev", held)
    state = StateStore(config.state)
    assert sum(state.committed_offsets("ev").values()) == 200

    mock_cluster.produce("ev", events(200, 60))
    second = run_load(config, spark, LoadRequest(run_id="r2"))
    assert second[0].records_fetched == 60
    held = broker_records(mock_cluster.bootstrap, "ev")
    assert_exactly_once(spark, tmp_path / "warehouse", "ev", held)

    files_before = sorted(p.stat().st_mtime_ns for p in (tmp_path / "warehouse").rglob("*.parquet"))
    again = run_load(config, spark, LoadRequest(run_id="r2"))
    assert again[0] == second[0]
    assert sorted(p.stat().st_mtime_ns for p in (tmp_path / "warehouse").rglob("*.parquet")) == files_before
    assert [a.run_id for a in state.list_audits("ev")] == ["r1", "r2"]
    assert_exactly_once(spark, tmp_path / "warehouse", "ev", held)


def test_task_failing_first_attempt_is_retried(spark, mock_cluster, tmp_path):
    config = write_config(tmp_path, mock_cluster.bootstrap, max_records_per_task=30)
    mock_cluster.produce("ev", events(0, 120))
    audits = run_load(config, spark, LoadRequest(run_id="retry", fault="fail_first_attempt"))
    assert audits[0].rows_written == 120
    state = StateStore(config.state)
    plan = state.read_plan("ev", "retry")
    markers = [state.read_marker("ev", "retry", r) for r in plan.ranges]
    assert len(markers) == 4 and all(m is not None for m in markers)
    assert [m.attempt for m in markers] == [1] * 4  # every range failed once, done on the retry
    assert_exactly_once(spark, tmp_path / "warehouse", "ev", broker_records(mock_cluster.bootstrap, "ev"))


def test_quarantine_offsets_and_threshold(spark, mock_cluster, tmp_path):
    values = events(0, 80)
    bad_indexes = {5, 17, 42}
    for i in bad_indexes:
        values[i] = b"{not json" if i != 42 else b'{"user": "x", "n": "not a number"}'
    mock_cluster.produce("ev", values)
    held = broker_records(mock_cluster.bootstrap, "ev")
    bad_keys = {k for k, v in held.items() if v in {values[i] for i in bad_indexes}}
    assert len(bad_keys) == 3

    strict = write_config(tmp_path, mock_cluster.bootstrap, max_bad_records=2, max_bad_ratio=1.0)
    with pytest.raises(BadRecordThresholdError, match="3 of 80"):
        run_load(strict, spark, LoadRequest(run_id="q1"))
    assert StateStore(strict.state).committed_offsets("ev") == {}

    relaxed = write_config(tmp_path, mock_cluster.bootstrap, max_bad_records=3, max_bad_ratio=0.5)
    audits = run_load(relaxed, spark, LoadRequest(run_id="q1"))  # the same run id, now committed
    assert audits[0].quarantined == 3 and audits[0].rows_written == 77
    assert_exactly_once(spark, tmp_path / "warehouse", "ev", held, quarantined=bad_keys)
    quarantine = spark.read.parquet(str(tmp_path / "warehouse" / "ev_quarantine")).collect()
    assert {(r["_topic"], r["_partition"], r["_offset"]) for r in quarantine} == bad_keys
    assert {bytes(r["_value"]) for r in quarantine} == {values[i] for i in bad_indexes}
    assert all(r["_error"] for r in quarantine)


def test_table_lock_refuses_a_second_live_run(spark, mock_cluster, tmp_path):
    config = write_config(tmp_path, mock_cluster.bootstrap)
    mock_cluster.produce("ev", events(0, 10))
    StateStore(config.state).acquire_lock("ev", "other-run", "backfill", timeout_s=30)
    with pytest.raises(LoaderError, match="locked by backfill run 'other-run'"):
        run_load(config, spark, LoadRequest(run_id="mine"))


def test_new_partitions_latest_then_raw_payloads(spark, mock_cluster, tmp_path):
    """new_partitions: latest skips what is there; raw tables keep key and value bytes."""
    config = write_config(tmp_path, mock_cluster.bootstrap, topic="rawev", format="raw", schema=None,
                          new_partitions="latest", partitioning=["dt"])
    mock_cluster.produce("rawev", [bytes([i, 0, 255]) for i in range(20)])
    first = run_load(config, spark, LoadRequest(run_id="n1"))
    assert first[0].records_fetched == 0
    assert sum(StateStore(config.state).committed_offsets("rawev").values()) == 20
    assert any("is new" in note for note in first[0].notes)

    mock_cluster.produce("rawev", [b"\x00not json\xff" + bytes([i]) for i in range(12)])
    second = run_load(config, spark, LoadRequest(run_id="n2"))
    assert second[0].rows_written == 12 and second[0].quarantined == 0
    held = broker_records(mock_cluster.bootstrap, "rawev")
    new = {k: v for k, v in held.items() if v.startswith(b"\x00not json")}
    assert_exactly_once(spark, tmp_path / "warehouse", "rawev", set(new), dt_only=True)
    rows = spark.read.parquet(str(tmp_path / "warehouse" / "rawev")).collect()
    assert {(r["_partition"], r["_offset"]): bytes(r["value"]) for r in rows} == {
        (p, o): v for (_, p, o), v in new.items()}


def test_new_run_id_finishes_a_failed_run_first(spark, mock_cluster, tmp_path):
    """A run that failed after writing some files is finished by the next run, not duplicated."""
    config = write_config(tmp_path, mock_cluster.bootstrap, max_records_per_task=30)
    mock_cluster.produce("ev", events(0, 100))
    with pytest.raises(LoaderError, match="injected failure"):
        run_load(config, spark, LoadRequest(run_id="a1", fault="fail_later_tasks"))
    state = StateStore(config.state)
    assert state.pending_run("ev") == "a1" and state.count_markers("ev", "a1") == 1
    # Its files wait in the run's staging directory: readers see none of them.
    assert any((tmp_path / "warehouse" / "_staging" / "a1" / "ev").rglob("*.parquet"))
    assert not any((tmp_path / "warehouse" / "ev").rglob("*.parquet"))

    mock_cluster.produce("ev", events(100, 40))
    audits = run_load(config, spark, LoadRequest(run_id="a2"))
    assert [a.run_id for a in audits] == ["a1", "a2"]
    assert [a.records_fetched for a in audits] == [100, 40]
    assert state.pending_run("ev") is None
    assert_exactly_once(spark, tmp_path / "warehouse", "ev", broker_records(mock_cluster.bootstrap, "ev"))
