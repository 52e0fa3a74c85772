"""Helpers for the loader's tests: sources, configs, and the exactly-once checks."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import duckdb
import yaml

from pylog.client import SimpleConsumer
from pylog.etl.config import LoaderConfig, load_config

SCHEMA = {"user": "string", "n": "int64", "ts": "timestamp"}


def produce(bootstrap: str, topic: str, values: list[bytes], partitions: int,
            timestamps: list[int] | None = None, flush_every: int | None = None) -> None:
    """Produce through confluent-kafka (librdkafka), record i to partition i % partitions.

    ``flush_every`` sends the records in several batches (so small segments roll)."""
    import confluent_kafka

    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3})
    for i, value in enumerate(values):
        producer.produce(topic, value=value, key=f"k{i}".encode(), partition=i % partitions,
                         timestamp=timestamps[i] if timestamps else 0)
        if flush_every and (i + 1) % flush_every == 0:
            assert producer.flush(30) == 0
    assert producer.flush(30) == 0


class MockCluster:
    """librdkafka's in-process mock cluster (topics auto-created with 4 partitions)."""

    def __init__(self) -> None:
        import confluent_kafka

        self.producer = confluent_kafka.Producer(
            {"bootstrap.servers": "unused:1", "test.mock.num.brokers": 1, "linger.ms": 5,
             "log_level": 3})
        broker = next(iter(self.producer.list_topics(timeout=10).brokers.values()))
        self.bootstrap = f"{broker.host}:{broker.port}"

    def produce(self, topic: str, values: list[bytes], partitions: int = 4,
                timestamps: list[int] | None = None, keys: list[bytes | None] | None = None) -> None:
        for i, value in enumerate(values):
            self.producer.produce(topic, value=value, partition=i % partitions,
                                  key=keys[i] if keys else f"k{i}".encode(),
                                  timestamp=timestamps[i] if timestamps else 0)
        assert self.producer.flush(30) == 0

    def close(self) -> None:
        self.producer.flush(5)
        self.producer = None


def events(start: int, count: int, ts: str = "2026-11-20T07:15:00Z") -> list[bytes]:
    return [json.dumps({"user": f"u{i % 7}", "n": i, "ts": ts}).encode() for i in range(start, start + count)]


def write_config(tmp_path: Path, bootstrap: str, topic: str = "ev", warehouse: str | None = None,
                 state: str | None = None, **overrides) -> LoaderConfig:
    """A loader config for one topic; the warehouse and state are under ``tmp_path`` unless
    given as URIs (``hdfs://...``)."""
    spec = {"table": topic, "format": "json", "schema": SCHEMA, "event_time": "log_timestamp",
            "max_bad_records": 0, "max_bad_ratio": 0.0}
    spec.update(overrides)
    raw = {"source": {"bootstrap_servers": bootstrap, "request_timeout_ms": 10000},
           "warehouse": warehouse or (tmp_path / "warehouse").as_uri(),
           "state": state or (tmp_path / "state").as_uri(),
           "lock_timeout_seconds": 600, "topics": {topic: spec}}
    path = tmp_path / "loader.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_config(path)


def broker_records(bootstrap: str, topic: str) -> dict[tuple[str, int, int], bytes]:
    """Every retained record of ``topic`` as {(topic, partition, offset): value}."""
    held = {}
    with SimpleConsumer(bootstrap) as consumer:
        for partition in consumer.partitions_for(topic):
            offset = consumer.earliest_offset(topic, partition)
            end = consumer.latest_offset(topic, partition)
            while offset < end:
                result = consumer.fetch(topic, partition, offset, max_bytes=1 << 20)
                for record in result.records:
                    held[(topic, partition, record.offset)] = record.value
                offset = result.next_offset
    return held


def table_keys(spark, warehouse: Path, table: str) -> list[tuple[str, int, int]]:
    """(_topic, _partition, _offset) of every row, as Spark reads the table."""
    frame = spark.read.parquet(str(warehouse / table))
    return [(r[0], r[1], r[2]) for r in frame.select("_topic", "_partition", "_offset").collect()]


def duckdb_keys(warehouse: Path, table: str, dt_only: bool = False) -> list[tuple[str, int, int]]:
    pattern = str(warehouse / table / "**" / "*.parquet")
    partitions = "dt" if dt_only else "dt, hr"
    rows = duckdb.sql(f"select _topic, _partition, _offset, {partitions} from "
                      f"read_parquet('{pattern}', hive_partitioning=true)").fetchall()
    return [row[:3] for row in rows]


def assert_exactly_once(spark, warehouse: Path, table: str, expected: set, quarantined: set = frozenset(),
                        dt_only: bool = False):
    """Rows (by Spark and DuckDB) are unique and are exactly ``expected`` minus quarantine."""
    for keys in (table_keys(spark, warehouse, table), duckdb_keys(warehouse, table, dt_only)):
        duplicates = [k for k, n in Counter(keys).items() if n > 1]
        assert not duplicates, f"duplicated rows: {duplicates[:5]}"
        assert set(keys) == set(expected) - set(quarantined), (
            f"missing {sorted(set(expected) - set(quarantined) - set(keys))[:5]}, "
            f"extra {sorted(set(keys) - set(expected))[:5]}")


class CountingStorage:
    """Counts the file reads of the project's own file:// Storage (a harness around it, not a mock).

    ``install(monkeypatch)`` makes every ``Storage.from_uri`` return one, so the loader's
    state store and tasks count through it; ``reads`` lists the paths read, in order.
    """

    def __init__(self) -> None:
        self.reads: list[str] = []
        self.counting = True

    def install(self, monkeypatch) -> "CountingStorage":
        from pylog.etl.fs import ArrowStorage, Storage

        counter = self

        class Counted(ArrowStorage):
            def read_bytes(self, path: str) -> bytes:
                if counter.counting:
                    counter.reads.append(path)
                return super().read_bytes(path)

        original = Storage.from_uri
        monkeypatch.setattr(Storage, "from_uri", staticmethod(
            lambda uri: Counted(uri) if uri.startswith("file:") else original(uri)))
        return self

    def under(self, root: Path) -> list[str]:
        return [p for p in self.reads if p.startswith(str(root))]
