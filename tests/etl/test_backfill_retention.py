"""A backfill over a window whose oldest records retention already deleted: the table's
copies of those records are kept (the backfill cannot re-read them)."""

from __future__ import annotations

from datetime import datetime, timezone

from pylog.etl.job import LoadRequest, run_load
from pylog.etl.state import StateStore
from pylog.testing.broker import broker_fixture
from tests.etl.helpers import assert_exactly_once, broker_records, events, produce, write_config
from tests.etl.test_retention import wait_for_log_start_past

broker = broker_fixture(scope="module", overrides={
    "num.partitions": 1, "log.segment.bytes": 2048, "log.retention.bytes": 8192,
    "log.retention.check.interval.ms": 100})

T08 = int(datetime(2026, 11, 20, 8, tzinfo=timezone.utc).timestamp() * 1000)


def test_backfill_keeps_rows_retention_deleted(spark, broker, tmp_path):
    topic = "aged"
    config = write_config(tmp_path, broker.bootstrap, topic=topic, on_retention_gap="earliest")
    produce(broker.bootstrap, topic, events(0, 30), 1, [T08 + 60_000] * 30)
    run_load(config, spark, LoadRequest(run_id="s1"))
    first = broker_records(broker.bootstrap, topic)
    produce(broker.bootstrap, topic, events(30, 600), 1, [T08 + 120_000] * 600, flush_every=20)
    log_start = wait_for_log_start_past(broker.bootstrap, topic, 30)
    run_load(config, spark, LoadRequest(run_id="s2"))
    held = broker_records(broker.bootstrap, topic)
    loaded = set(first) | set(held)
    assert_exactly_once(spark, tmp_path / "warehouse", topic, loaded)

    audits = run_load(config, spark, LoadRequest(run_id="b1", since_ms=T08, until_ms=T08 + 3_600_000))
    assert audits[-1].partitions[0].start >= log_start
    assert audits[-1].rows_written == len(held)
    assert_exactly_once(spark, tmp_path / "warehouse", topic, loaded)
    assert StateStore(config.state).committed_offsets(topic) == {0: 630}
