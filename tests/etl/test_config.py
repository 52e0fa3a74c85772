"""loader.yaml validation: good files parse; each mistake names its key."""

from pathlib import Path

import pytest
import yaml

from pylog.errors import ConfigError
from pylog.etl.config import load_config, parse_config

REPO = Path(__file__).resolve().parents[2]


def base() -> dict:
    return {
        "source": {"bootstrap_servers": "127.0.0.1:9092"},
        "warehouse": "file:///tmp/w", "state": "file:///tmp/s",
        "topics": {"page_views": {"format": "json", "schema": {"user": "string", "ts": "timestamp"},
                                  "event_time": "field:ts"}},
    }


def test_shipped_config_parses():
    config = load_config(REPO / "conf" / "loader.yaml")
    topic = config.topic("page_views")
    assert topic.event_time_field == "ts" and topic.partitioning == ("dt", "hr")
    assert config.source.bootstrap_servers == ("localhost:9092",)


def test_defaults():
    config = parse_config(base())
    topic = config.topics[0]
    assert topic.table == "page_views" and topic.quarantine_table == "page_views_quarantine"
    assert topic.on_retention_gap == "fail" and topic.new_partitions.kind == "earliest"


@pytest.mark.parametrize("path, value, key", [
    (("topics", "page_views", "format"), "xml", "topics.page_views.format"),
    (("topics", "page_views", "schema", "user"), "varchar", "topics.page_views.schema.user"),
    (("topics", "page_views", "event_time"), "field:nope", "topics.page_views.event_time"),
    (("topics", "page_views", "partitioning"), ["hr"], "topics.page_views.partitioning"),
    (("topics", "page_views", "new_partitions"), "someday", "topics.page_views.new_partitions"),
    (("topics", "page_views", "on_retention_gap"), "ignore", "topics.page_views.on_retention_gap"),
    (("topics", "page_views", "max_records_per_task"), 0, "topics.page_views.max_records_per_task"),
    (("topics", "page_views", "max_bad_ratio"), 2.0, "topics.page_views.max_bad_ratio"),
    (("topics", "page_views", "colour"), "red", "topics.page_views.colour"),
    (("source", "bootstrap_servers"), "nohostport", "source.bootstrap_servers"),
    (("warehouse",), "/no/scheme", "warehouse"),
    (("state",), "s3://bucket/x", "state"),
])
def test_bad_values_name_the_key(path, value, key):
    raw = base()
    target = raw
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    assert info.value.key == key


def test_missing_schema_and_shared_table():
    raw = base()
    del raw["topics"]["page_views"]["schema"]
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    assert info.value.key == "topics.page_views.schema"
    raw = base()
    raw["topics"]["clicks"] = {"format": "raw", "table": "page_views"}
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    assert info.value.key == "topics.clicks.table"


def test_unreadable_and_invalid_yaml(tmp_path):
    with pytest.raises(ConfigError):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("source: [unclosed")
    with pytest.raises(ConfigError):
        load_config(bad)
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(base()))
    assert load_config(good).path == str(good)
