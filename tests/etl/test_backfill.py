"""Backfill from a timestamp against a pylog broker: the window's partitions end with
exactly one copy, everything else is untouched, committed offsets do not move, and a
backfill that fails midway (in its tasks, then in its swap) reaches the same result."""

from __future__ import annotations

import shutil
from datetime import datetime, timezone

import pytest

from pylog.etl.errors import LoaderError
from pylog.etl.job import LoadRequest, run_load
from pylog.etl.state import StateStore
from pylog.testing.broker import broker_fixture
from tests.etl.helpers import assert_exactly_once, broker_records, events, produce, write_config

broker = broker_fixture(scope="module", overrides={"num.partitions": 2})

HOUR = 3_600_000
T07 = int(datetime(2026, 11, 20, 7, tzinfo=timezone.utc).timestamp() * 1000)


def test_backfill_window_exactly_once(spark, broker, tmp_path):
    topic = "clicks"
    config = write_config(tmp_path, broker.bootstrap, topic=topic, max_records_per_task=25)
    state = StateStore(config.state)
    produce(broker.bootstrap, topic, events(0, 120), 2, [T07 + i * (3 * HOUR // 120) for i in range(120)])
    run_load(config, spark, LoadRequest(run_id="s1"))
    committed = state.committed_offsets(topic)
    assert sum(committed.values()) == 120
    # Late records in hour 09, not loaded yet: the backfill must leave them to the scheduled load.
    produce(broker.bootstrap, topic, events(120, 20), 2, [T07 + 2 * HOUR + 59 * 60_000] * 20)
    held = broker_records(broker.bootstrap, topic)
    loaded = {k for k in held if k[2] < committed[k[1]]}

    table = tmp_path / "warehouse" / topic
    hour08 = sorted((table / "dt=2026-11-20" / "hr=08").glob("*.parquet"))
    hour08[0].unlink()  # damage the window: one file lost, another one copied
    shutil.copy(hour08[1], hour08[1].with_name("stray-copy.parquet"))
    outside = {p: p.stat().st_mtime_ns for p in table.rglob("*.parquet") if "hr=07" in str(p)}
    assert outside

    window = dict(since_ms=T07 + HOUR + 5 * 60_000, until_ms=T07 + 2 * HOUR + 30 * 60_000)
    with pytest.raises(LoaderError, match="injected failure"):
        run_load(config, spark, LoadRequest(run_id="b1", fault="fail_later_tasks", **window))
    with pytest.raises(LoaderError, match="injected failure at mid_swap"):
        run_load(config, spark, LoadRequest(run_id="b1", fault="mid_swap", **window))
    audits = run_load(config, spark, LoadRequest(run_id="b1", **window))

    audit = audits[-1]
    assert audit.kind == "backfill" and audit.window_ms == (T07 + HOUR, T07 + 3 * HOUR)
    assert set(audit.replaced_partitions) == {f"{topic} dt=2026-11-20/hr=08", f"{topic} dt=2026-11-20/hr=09"}
    assert state.committed_offsets(topic) == committed
    assert_exactly_once(spark, tmp_path / "warehouse", topic, loaded)
    assert {p: p.stat().st_mtime_ns for p in table.rglob("*.parquet") if "hr=07" in str(p)} == outside
    staging = tmp_path / "warehouse" / "_staging"
    left = sorted(str(p.relative_to(staging)) for p in staging.rglob("*.parquet")) \
        if staging.exists() else []
    assert not left, f"files left in staging: {left}"

    again = run_load(config, spark, LoadRequest(run_id="b1", **window))  # committed: nothing changes
    assert again[-1] == audit
    run_load(config, spark, LoadRequest(run_id="s2"))
    assert_exactly_once(spark, tmp_path / "warehouse", topic, held)
    assert [a.kind for a in state.list_audits(topic)] == ["scheduled", "backfill", "scheduled"]


def test_backfill_by_payload_event_time_includes_late_records(spark, broker, tmp_path):
    """Rows partitioned by a payload field: records logged after the window still count."""
    topic = "late"
    config = write_config(tmp_path, broker.bootstrap, topic=topic, event_time="field:ts",
                          max_event_lateness_seconds=1800)
    values = (events(0, 20, ts="2026-11-20T07:40:00Z") + events(20, 20, ts="2026-11-20T08:30:00Z")
              + events(40, 20, ts="2026-11-20T08:50:00Z") + events(60, 20, ts="2026-11-20T09:20:00Z"))
    log_times = [T07 + 40 * 60_000] * 20 + [T07 + 90 * 60_000] * 20 + [T07 + 2 * HOUR + 15 * 60_000] * 20 \
        + [T07 + 2 * HOUR + 20 * 60_000] * 20  # the 08:50 events were logged at 09:15
    produce(broker.bootstrap, topic, values, 2, log_times)
    run_load(config, spark, LoadRequest(run_id="s1"))
    held = broker_records(broker.bootstrap, topic)
    hour08 = tmp_path / "warehouse" / topic / "dt=2026-11-20" / "hr=08"
    for path in hour08.glob("*.parquet"):
        path.unlink()

    audits = run_load(config, spark, LoadRequest(run_id="b1", since_ms=T07 + HOUR, until_ms=T07 + 2 * HOUR))
    assert audits[-1].rows_written == 40
    assert audits[-1].replaced_partitions == (f"{topic} dt=2026-11-20/hr=08",)
    assert_exactly_once(spark, tmp_path / "warehouse", topic, held)
