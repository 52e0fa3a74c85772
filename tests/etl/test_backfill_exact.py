"""A backfill replaces by offset range: whatever the timestamps, every record the table
held and the backfill did not re-read stays, and every re-read record ends up once.
A scheduled plan made before another run committed is never committed, and committed
offsets never move backwards."""

from __future__ import annotations

import shutil
from datetime import datetime, timezone

import pytest

from pylog.client import SimpleConsumer
from pylog.etl.errors import LoaderError
from pylog.etl.freshness import StalePlanError
from pylog.etl.job import LoadRequest, run_load
from pylog.etl.planner import plan_scheduled
from pylog.etl.state import StateStore
from pylog.testing.broker import broker_fixture
from tests.etl.helpers import (assert_exactly_once, broker_records, duckdb_keys, events, produce,
                               write_config)

broker = broker_fixture(scope="module", overrides={"num.partitions": 2})

MINUTE, HOUR = 60_000, 3_600_000
T07 = int(datetime(2026, 11, 20, 7, tzinfo=timezone.utc).timestamp() * 1000)
T08, T09, T10, T11 = T07 + HOUR, T07 + 2 * HOUR, T07 + 3 * HOUR, T07 + 4 * HOUR


def test_log_time_not_monotonic(spark, broker, tmp_path):
    """Records after the offset at ``until`` whose CreateTime is in the window survive once."""
    topic = "nonmono"
    config = write_config(tmp_path, broker.bootstrap, topic=topic, max_records_per_task=7)
    state = StateStore(config.state)
    times = ([T07 + 10 * MINUTE] * 10 + [T08 + 10 * MINUTE] * 10 + [T09 + 10 * MINUTE] * 10
             + [T08 + 50 * MINUTE] * 10)  # the last ten were logged after the 09:10 ones
    produce(broker.bootstrap, topic, events(0, 40), 2, times)
    run_load(config, spark, LoadRequest(run_id="s1"))
    held = broker_records(broker.bootstrap, topic)
    committed = state.committed_offsets(topic)
    warehouse = tmp_path / "warehouse"

    window = dict(since_ms=T08, until_ms=T09)
    with pytest.raises(LoaderError, match="injected failure at before_swap_journal"):
        run_load(config, spark, LoadRequest(run_id="b1", fault="before_swap_journal", **window))
    audits = run_load(config, spark, LoadRequest(run_id="b1", **window))  # merges again
    assert audits[-1].rows_written == 10  # offsets at 08:00 .. 09:00 hold the first ten of hour 08
    assert_exactly_once(spark, warehouse, topic, held)
    assert state.committed_offsets(topic) == committed

    # It re-reads the late hour-08 records too (they follow 09:10 in the log); they are out
    # of this window, so their copies in hour 08 stay as they are.
    audits = run_load(config, spark, LoadRequest(run_id="b2", since_ms=T09, until_ms=T10))
    assert audits[-1].records_fetched == 20 and audits[-1].rows_written == 10
    assert_exactly_once(spark, warehouse, topic, held)


def test_window_hour_without_backfill_rows(spark, broker, tmp_path):
    """A window hour the backfill writes nothing to still loses the rows it re-read."""
    topic = "strays"
    config = write_config(tmp_path, broker.bootstrap, topic=topic)
    produce(broker.bootstrap, topic, events(0, 20), 2, [T08 + 10 * MINUTE] * 10 + [T09 + 10 * MINUTE] * 10)
    run_load(config, spark, LoadRequest(run_id="s1"))
    held = broker_records(broker.bootstrap, topic)
    day = tmp_path / "warehouse" / topic / "dt=2026-11-20"
    (day / "hr=10").mkdir()  # damage: a copy of hour 09's rows in hour 10, which holds no record
    shutil.copy(sorted((day / "hr=09").glob("*.parquet"))[0], day / "hr=10" / "stray-copy.parquet")

    audits = run_load(config, spark, LoadRequest(run_id="b1", since_ms=T09, until_ms=T11))
    assert_exactly_once(spark, tmp_path / "warehouse", topic, held)
    assert not (day / "hr=10").exists()
    assert audits[-1].rows_written == 10
    assert f"{topic} dt=2026-11-20/hr=10" in audits[-1].replaced_partitions


def test_late_payload_event_outside_lateness_margin(spark, broker, tmp_path):
    """Scheduled loads put any late event in its hour; a backfill must not drop the ones
    logged later than ``max_event_lateness_seconds``."""
    topic = "verylate"
    config = write_config(tmp_path, broker.bootstrap, topic=topic, event_time="field:ts",
                          max_event_lateness_seconds=1800)
    values = (events(0, 10, ts="2026-11-20T07:30:00Z") + events(10, 10, ts="2026-11-20T08:20:00Z")
              + events(20, 10, ts="2026-11-20T09:10:00Z") + events(30, 10, ts="2026-11-20T08:40:00Z"))
    log_times = ([T07 + 30 * MINUTE] * 10 + [T08 + 20 * MINUTE] * 10 + [T09 + 10 * MINUTE] * 10
                 + [T11] * 10)  # the 08:40 events were logged at 11:00, 2h20 late
    produce(broker.bootstrap, topic, values, 2, log_times)
    run_load(config, spark, LoadRequest(run_id="s1"))
    held = broker_records(broker.bootstrap, topic)

    audits = run_load(config, spark, LoadRequest(run_id="b1", since_ms=T08, until_ms=T09))
    assert audits[-1].rows_written == 10
    assert audits[-1].replaced_partitions == (f"{topic} dt=2026-11-20/hr=08",)
    assert_exactly_once(spark, tmp_path / "warehouse", topic, held)


def test_quarantined_record_that_now_decodes(spark, broker, tmp_path):
    """A record quarantined by an earlier load that decodes now: after the backfill it is
    in the table and no longer in the quarantine table."""
    topic = "requar"
    config = write_config(tmp_path, broker.bootstrap, topic=topic, event_time="field:ts",
                          max_bad_records=5, max_bad_ratio=1.0)
    values = events(0, 9, ts="2026-11-20T08:15:00Z") + [b'{"user": "u9", "n": 9}']  # no ts
    produce(broker.bootstrap, topic, values, 2, [T08 + 15 * MINUTE] * 10)
    audits = run_load(config, spark, LoadRequest(run_id="s1"))
    assert audits[-1].quarantined == 1
    held = broker_records(broker.bootstrap, topic)
    bad = {k for k, v in held.items() if b'"ts"' not in v}
    assert len(bad) == 1 and set(duckdb_keys(tmp_path / "warehouse", f"{topic}_quarantine")) == bad

    # The table is now partitioned by log time, so the record without "ts" decodes.
    config = write_config(tmp_path, broker.bootstrap, topic=topic, event_time="log_timestamp",
                          max_bad_records=5, max_bad_ratio=1.0)
    audits = run_load(config, spark, LoadRequest(run_id="b1", since_ms=T08, until_ms=T09))
    assert_exactly_once(spark, tmp_path / "warehouse", topic, held)
    assert not list((tmp_path / "warehouse" / f"{topic}_quarantine").rglob("*.parquet"))
    assert audits[-1].quarantined == 0 and audits[-1].rows_written == 10
    assert f"{topic}_quarantine dt=2026-11-20/hr=08" in audits[-1].replaced_partitions


def test_stale_plan_is_not_committed(spark, broker, tmp_path):
    """Plans made before another run committed: one with nothing to read (committing it
    would move the offsets back), one with ranges (its files would duplicate rows)."""
    topic = "stale"
    config = write_config(tmp_path, broker.bootstrap, topic=topic)
    topic_config = config.select([topic])[0]
    state = StateStore(config.state)
    produce(broker.bootstrap, topic, events(0, 20), 2, [T08] * 20)
    run_load(config, spark, LoadRequest(run_id="s1"))
    with SimpleConsumer([broker.bootstrap]) as consumer:
        empty = plan_scheduled("a-empty", topic_config, consumer, state)
        produce(broker.bootstrap, topic, events(20, 20), 2, [T08] * 20)
        ranged = plan_scheduled("a-ranged", topic_config, consumer, state)
    assert not empty.ranges and ranged.ranges
    for plan in (empty, ranged):  # planned, then abandoned before it ran
        state.write_plan(plan)
        state.clear_pending(plan.table, plan.run_id)
    run_load(config, spark, LoadRequest(run_id="s2"))
    committed = state.committed_offsets(topic)
    held = broker_records(broker.bootstrap, topic)
    assert sum(committed.values()) == 40

    with pytest.raises(StalePlanError, match="'s2' has committed since"):
        run_load(config, spark, LoadRequest(run_id="a-empty"))
    with pytest.raises(LoaderError, match="StalePlanError: .*plan is stale"):
        run_load(config, spark, LoadRequest(run_id="a-ranged"))
    assert state.committed_offsets(topic) == committed
    assert not state.is_committed(topic, "a-empty") and not state.is_committed(topic, "a-ranged")
    assert_exactly_once(spark, tmp_path / "warehouse", topic, held)

    produce(broker.bootstrap, topic, events(40, 10), 2, [T09] * 10)
    run_load(config, spark, LoadRequest(run_id="s3"))
    assert sum(state.committed_offsets(topic).values()) == 50
    assert_exactly_once(spark, tmp_path / "warehouse", topic, broker_records(broker.bootstrap, topic))
