"""``new_partitions: <timestamp>`` and what a real run's audit entry records.

A pylog broker subprocess as the source, the shared SparkSession, ``file://`` state. (The
task retries ``pylog load`` gets from its default master are checked by the rerun in
test_crash.py, which goes through spark-submit anyway.)
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pylog.etl.job import LoadRequest, run_load
from pylog.etl.state import StateStore
from pylog.testing.broker import broker_fixture
from tests.etl.helpers import assert_exactly_once, broker_records, events, produce, write_config

broker = broker_fixture(scope="module", overrides={"num.partitions": 4})

MINUTE = 60_000
T07 = int(datetime(2026, 11, 20, 7, tzinfo=timezone.utc).timestamp() * 1000)
T08 = T07 + 60 * MINUTE


def test_new_partitions_from_a_timestamp(spark, broker, tmp_path):
    """First-seen partitions start at the first record at or after the timestamp; a
    partition with nothing that late starts at its end; later runs load everything new."""
    topic = "since_ts"
    # record i goes to partition i % 4; partition 3 holds only records from before 08:00
    stamps = [T07 if i % 4 == 3 else T07 + i * MINUTE for i in range(120)]
    produce(broker.bootstrap, topic, events(0, 120), 4, stamps)
    config = write_config(tmp_path, broker.bootstrap, topic=topic,
                          new_partitions="2026-11-20T08:00:00Z", max_records_per_task=10)
    assert config.topic(topic).new_partitions.timestamp_ms == T08

    audits = run_load(config, spark, LoadRequest(run_id="p1"))
    loaded = {(topic, i % 4, i // 4) for i in range(120) if stamps[i] >= T08}
    assert len(loaded) == 45  # i = 60..119 outside partition 3
    assert audits[0].records_fetched == audits[0].rows_written == 45
    assert StateStore(config.state).committed_offsets(topic) == {0: 30, 1: 30, 2: 30, 3: 30}
    assert {(p.partition, p.start, p.end) for p in audits[0].partitions} >= {
        (0, 15, 30), (1, 15, 30), (2, 15, 30)}
    assert_exactly_once(spark, tmp_path / "warehouse", topic, loaded)

    # the policy applies to partitions seen for the first time only: new records all load
    produce(broker.bootstrap, topic, events(120, 40), 4, [T07] * 40)
    audits = run_load(config, spark, LoadRequest(run_id="p2"))
    assert audits[0].records_fetched == 40
    new = {key for key in broker_records(broker.bootstrap, topic) if key[2] >= 30}
    assert len(new) == 40
    assert_exactly_once(spark, tmp_path / "warehouse", topic, loaded | new)


def test_audit_records_bytes_seconds_and_ranges(spark, broker, tmp_path):
    topic = "audited"
    produce(broker.bootstrap, topic, events(0, 200), 4)
    config = write_config(tmp_path, broker.bootstrap, topic=topic, max_records_per_task=20)
    [audit] = run_load(config, spark, LoadRequest(run_id="a1"))
    state = StateStore(config.state)
    assert state.latest_audit(topic) == audit

    plan = state.read_plan(topic, "a1")
    assert audit.ranges == plan.ranges and len(audit.ranges) == 12  # 4 x 50 records in 20s
    assert sorted((r.partition, r.start, r.end) for r in audit.ranges) == [
        (p, s, min(s + 20, 50)) for p in range(4) for s in range(0, 50, 20)]
    assert sorted((p.partition, p.start, p.end, p.records_fetched, p.rows_written, p.quarantined)
                  for p in audit.partitions) == [(p, 0, 50, 50, 50, 0) for p in range(4)]

    markers = [state.read_marker(topic, "a1", r) for r in plan.ranges]
    assert audit.bytes_fetched == sum(m.bytes_fetched for m in markers)
    # every byte of the batches read, at least; each batch is read whole, so a batch split
    # between two ranges counts once for each
    log_bytes = sum(f.stat().st_size for f in broker.log_dir.glob(f"{topic}-*/*.log"))
    assert log_bytes >= sum(len(v) for v in broker_records(broker.bootstrap, topic).values())
    assert audit.bytes_fetched >= log_bytes

    files = sorted((tmp_path / "warehouse" / topic).rglob("*.parquet"))
    assert files and sum(pq.read_metadata(f).num_rows for f in files) == 200
    assert audit.bytes_written == sum(f.stat().st_size for f in files)
    assert sorted(Path(f).name for m in markers for f in m.files) == sorted(f.name for f in files)
    assert audit.seconds > 0 and audit.task_seconds > 0
    assert audit.task_seconds == pytest.approx(sum(m.seconds for m in markers), abs=0.01)
