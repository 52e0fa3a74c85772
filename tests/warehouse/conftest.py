"""A warehouse written by the loader's own decode and Parquet writer, without a broker.

The rows are page views spread over several hours, in two log partitions, plus two
payloads that do not parse and land in the quarantine table -- the same files a load
writes, so the analyst side is tested against the real layout.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from pylog.etl.config import parse_config

HOUR_MS = 3_600_000
BASE_MS = 1_795_593_600_000  # 2026-11-25T08:00:00Z


@dataclass
class Warehouse:
    config_path: Path
    config: object
    events: list[dict]  # every good event: partition, offset, ts_ms, user_id, url


def write_config(directory: Path, bootstrap: str = "127.0.0.1:1") -> Path:
    raw = {
        "source": {"bootstrap_servers": bootstrap},
        "warehouse": (directory / "warehouse").as_uri(),
        "state": (directory / "state").as_uri(),
        "topics": {"page_views": {
            "table": "page_views", "format": "json",
            "schema": {"user_id": "int64", "url": "string", "ts": "timestamp"},
            "event_time": "field:ts", "partitioning": ["dt", "hr"]}},
    }
    path = directory / "loader.yaml"
    path.write_text(json.dumps(raw))
    return path


def load_range(config, partition: int, start: int, events: list[dict], bad_offsets=()) -> None:
    """Decode and write one offset range the way a map task does."""
    from pylog.etl.decode import decode_records
    from pylog.etl.fs import Storage
    from pylog.etl.layout import table_root
    from pylog.etl.model import TaskRange
    from pylog.etl.writer import write_partitioned
    import pyarrow as pa
    import pyarrow.compute as pc

    topic = config.topics[0]
    offsets, timestamps, values = [], [], []
    for i, event in enumerate(events):
        offsets.append(start + i)
        timestamps.append(event["ts_ms"])
        if start + i in bad_offsets:
            values.append(b"{not json")
        else:
            values.append(json.dumps({"user_id": event["user_id"], "url": event["url"],
                                      "ts": iso(event["ts_ms"])}).encode())
    decoded = decode_records(topic, partition, offsets, timestamps, [None] * len(events), values)
    storage = Storage.from_uri(config.warehouse)
    task_range = TaskRange(topic.topic, partition, start, start + len(events))
    write_partitioned(storage, table_root(storage, topic.table), decoded.rows, decoded.event_ms,
                      topic.partitioning, task_range)
    q_ms = pc.cast(decoded.quarantine.column("_timestamp"), pa.int64()).combine_chunks()
    write_partitioned(storage, table_root(storage, topic.quarantine_table), decoded.quarantine, q_ms,
                      topic.partitioning, task_range)


def page_views(count: int, partition: int, first_hour: int = 0, hours: int = 3) -> list[dict]:
    span = hours * HOUR_MS
    return [{"partition": partition, "user_id": (i * 7) % 13, "url": f"/page/{i % 5}",
             "ts_ms": BASE_MS + first_hour * HOUR_MS + (i * span) // count + partition}
            for i in range(count)]


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> Warehouse:
    directory = tmp_path_factory.mktemp("warehouse")
    path = write_config(directory)
    config = parse_config(json.loads(path.read_text()))
    events = []
    for partition, count in ((0, 120), (1, 90)):
        batch = page_views(count, partition)
        load_range(config, partition, 0, batch, bad_offsets={5, 17} if partition == 1 else ())
        for offset, event in enumerate(batch):
            if not (partition == 1 and offset in (5, 17)):
                events.append(dict(event, offset=offset))
    return Warehouse(path, config, events)


def iso(epoch_ms: int) -> str:
    from datetime import datetime, timezone

    moment = datetime.fromtimestamp(epoch_ms / 1000, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{epoch_ms % 1000:03d}Z"
