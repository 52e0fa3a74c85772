"""Records deleted by retention before the loader read them: ``fail`` stops with the
topic, partition and lost range; ``earliest`` loads what is left and audits the gap."""

from __future__ import annotations

import time

import pytest

from pylog.client import SimpleConsumer
from pylog.etl.errors import RetentionGapError
from pylog.etl.job import LoadRequest, run_load
from pylog.etl.state import StateStore
from pylog.testing.broker import broker_fixture
from tests.etl.helpers import assert_exactly_once, broker_records, events, produce, write_config

broker = broker_fixture(scope="module", overrides={
    "num.partitions": 1, "log.segment.bytes": 2048, "log.retention.bytes": 8192,
    "log.retention.check.interval.ms": 100})


def wait_for_log_start_past(bootstrap: str, topic: str, offset: int, timeout_s: float = 60) -> int:
    """The log start once retention has moved it past ``offset`` and it stopped moving."""
    deadline = time.monotonic() + timeout_s
    seen: list[int] = []
    with SimpleConsumer(bootstrap) as consumer:
        while True:
            seen.append(consumer.earliest_offset(topic, 0))
            if seen[-1] > offset and len(seen) >= 5 and len(set(seen[-5:])) == 1:
                return seen[-1]
            start = seen[-1]
            if time.monotonic() > deadline:
                raise AssertionError(f"retention did not move the log start past {offset} (at {start})")
            time.sleep(0.3)


def test_retention_gap_fail_then_earliest(spark, broker, tmp_path):
    topic = "trimmed"
    config = write_config(tmp_path, broker.bootstrap, topic=topic)
    produce(broker.bootstrap, topic, events(0, 30), 1)
    run_load(config, spark, LoadRequest(run_id="r1"))
    first = broker_records(broker.bootstrap, topic)
    assert StateStore(config.state).committed_offsets(topic) == {0: 30}

    produce(broker.bootstrap, topic, events(30, 600), 1, flush_every=20)
    log_start = wait_for_log_start_past(broker.bootstrap, topic, 30)

    with pytest.raises(RetentionGapError) as info:
        run_load(config, spark, LoadRequest(run_id="r2"))
    message = str(info.value)
    assert f"topic {topic} partition 0" in message and f"[30, {log_start})" in message
    assert StateStore(config.state).committed_offsets(topic) == {0: 30}

    lenient = write_config(tmp_path, broker.bootstrap, topic=topic, on_retention_gap="earliest")
    audits = run_load(lenient, spark, LoadRequest(run_id="r3"))
    gap = audits[-1].gaps
    assert [(g.partition, g.start, g.end) for g in gap] == [(0, 30, log_start)]
    held = broker_records(broker.bootstrap, topic)
    assert audits[-1].records_fetched == len(held) == 630 - log_start
    assert_exactly_once(spark, tmp_path / "warehouse", topic, set(first) | set(held))


def test_records_deleted_after_planning_are_handled_by_the_task(broker, tmp_path):
    """A planned range whose start retention deleted before its task ran."""
    from pylog.etl.model import TaskRange
    from pylog.etl.task import TaskSpec, run_task

    topic = "trimmed-late"
    produce(broker.bootstrap, topic, events(0, 600), 1, flush_every=20)
    log_start = wait_for_log_start_past(broker.bootstrap, topic, 0)
    planned = TaskRange(topic, 0, 0, 600)

    def spec(config, run_id):
        return TaskSpec(run_id, "scheduled", 0, planned, config.topic(topic), config.source,
                        config.warehouse, config.state)

    strict = write_config(tmp_path, broker.bootstrap, topic=topic)
    with pytest.raises(RetentionGapError, match=rf"partition 0: records \[0, {log_start}\)"):
        run_task(spec(strict, "t1"))
    lenient = write_config(tmp_path, broker.bootstrap, topic=topic, on_retention_gap="earliest")
    marker = run_task(spec(lenient, "t2"))
    assert [(g.start, g.end) for g in marker.gaps] == [(0, log_start)]
    assert marker.records_fetched == marker.rows_written == 600 - log_start
