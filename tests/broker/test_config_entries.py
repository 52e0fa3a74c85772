"""The pure parts of the config APIs: DescribeConfigs entries (values, sources, synonyms),
Kafka spellings of LogConfig values, and ``pylog configs --add-config`` parsing."""

from __future__ import annotations

import pytest

from pylog.broker.config import DYNAMIC_SETTINGS, BrokerConfig, broker_settings
from pylog.broker.config_entries import (
    broker_entries, default_broker_entries, is_sensitive, topic_entries)
from pylog.cli.configs import parse_add_config, parse_delete_config
from pylog.errors import ConfigError
from pylog.log import LogConfig
from pylog.log.topic_configs import TOPIC_CONFIGS
from pylog.protocol.configs import ConfigSource

DYNAMIC = ConfigSource.DYNAMIC_TOPIC_CONFIG
STATIC = ConfigSource.STATIC_BROKER_CONFIG
DEFAULT = ConfigSource.DEFAULT_CONFIG


def broker_config(**settings) -> BrokerConfig:
    return BrokerConfig.load(None, {"log.dirs": "/tmp/unused", **settings})


def by_name(entries) -> dict[str, dict]:
    return {entry["name"]: entry for entry in entries}


def test_every_topic_config_names_broker_settings_that_exist():
    settings = {setting.name for setting in broker_settings()}
    # As in Kafka, the throttled-replicas lists have no broker setting: empty by default.
    no_broker_default = {"leader.replication.throttled.replicas",
                         "follower.replication.throttled.replicas"}
    for key in TOPIC_CONFIGS.values():
        assert bool(key.broker_synonyms) != (key.name in no_broker_default), key.name
        assert set(key.broker_synonyms) <= settings, key.name


@pytest.mark.parametrize("name", sorted(TOPIC_CONFIGS))
def test_kafka_values_read_back_unchanged(name):
    config = LogConfig(retention_ms=None, flush_messages=5, cleanup_policy="compact,delete",
                       min_cleanable_dirty_ratio=0.25, expose_unflushed=False)
    assert config.with_overrides({name: config.kafka_value(name)}) == config


def test_sources_follow_kafkas_precedence():
    broker = broker_config(**{"log.retention.ms": "5000"})
    entries = by_name(topic_entries({"segment.ms": "100"}, broker.log_config, broker,
                                    include_synonyms=True))
    segment_ms = entries["segment.ms"]
    assert (segment_ms["value"], segment_ms["config_source"]) == ("100", DYNAMIC)
    assert [(s["name"], s["value"], s["source"]) for s in segment_ms["synonyms"]] == [
        ("segment.ms", "100", DYNAMIC), ("log.roll.hours", "168", DEFAULT)]
    retention = entries["retention.ms"]
    assert (retention["value"], retention["config_source"]) == ("5000", STATIC)
    assert [(s["name"], s["source"]) for s in retention["synonyms"]] == [
        ("log.retention.ms", STATIC), ("log.retention.hours", DEFAULT)]
    policy = entries["cleanup.policy"]
    assert (policy["value"], policy["config_source"], policy["is_default"]) == (
        "delete", DEFAULT, True)


def test_synonyms_and_documentation_only_when_asked():
    broker = broker_config()
    [entry] = topic_entries({}, broker.log_config, broker, ["retention.ms"])
    assert entry["synonyms"] == [] and entry["documentation"] is None
    [entry] = topic_entries({}, broker.log_config, broker, ["retention.ms"],
                            include_documentation=True)
    assert entry["documentation"] == TOPIC_CONFIGS["retention.ms"].documentation


def test_an_override_pylog_does_not_know_is_still_listed():
    broker = broker_config()
    entries = by_name(topic_entries({"compression.type": "zstd"}, broker.log_config, broker))
    assert (entries["compression.type"]["value"],
            entries["compression.type"]["config_source"]) == ("zstd", DYNAMIC)


def test_broker_entries_are_read_only_unless_dynamic_with_their_source():
    broker = broker_config(**{"num.partitions": "3"})
    entries = by_name(broker_entries(broker))
    assert set(entries) == {setting.name for setting in broker_settings()}
    assert {name for name, entry in entries.items() if not entry["read_only"]} == \
        DYNAMIC_SETTINGS
    assert (entries["num.partitions"]["value"],
            entries["num.partitions"]["config_source"]) == ("3", STATIC)
    assert entries["broker.rack"]["value"] is None  # no default, not set
    assert entries["delete.topic.enable"]["value"] == "true"


def test_secrets_are_never_described():
    assert is_sensitive("ssl.keystore.password") and is_sensitive("sasl.jaas.config")
    sensitive = {setting.name for setting in broker_settings() if is_sensitive(setting.name)}
    assert "ssl.key.password" in sensitive
    entries = by_name(broker_entries(broker_config(**{"ssl.key.password": "hunter2"})))
    assert all(entries[name]["value"] is None and entries[name]["is_sensitive"]
               for name in sensitive)
    assert "hunter2" not in repr(entries)


@pytest.mark.parametrize("text, expected", [
    ("retention.ms=1000", {"retention.ms": "1000"}),
    ("a=1, b = 2", {"a": "1", "b": "2"}),
    ("cleanup.policy=[compact,delete],segment.ms=10",
     {"cleanup.policy": "compact,delete", "segment.ms": "10"}),
])
def test_add_config_parsing(text, expected):
    assert parse_add_config(text) == expected


@pytest.mark.parametrize("text", ["retention.ms", "=1", "a=[1,2", "a=1]", "a=1,,b=2"])
def test_add_config_mistakes_name_the_option(text):
    with pytest.raises(ConfigError, match="--add-config"):
        parse_add_config(text)


def test_delete_config_parsing():
    assert parse_delete_config("a, b") == ["a", "b"]
    with pytest.raises(ConfigError, match="--delete-config"):
        parse_delete_config("a,,b")


def test_dynamic_configs_come_first_in_value_and_synonyms():
    broker = broker_config(**{"log.retention.ms": "5000"})
    local, default = {"log.retention.ms": "3000"}, {"log.retention.ms": "4000",
                                                    "num.io.threads": "9"}
    entries = by_name(broker_entries(broker, include_synonyms=True, dynamic=(local, default)))
    retention = entries["log.retention.ms"]
    assert (retention["value"], retention["config_source"], retention["read_only"]) == \
        ("3000", ConfigSource.DYNAMIC_BROKER_CONFIG, False)
    assert [(s["source"], s["value"]) for s in retention["synonyms"]] == [
        (ConfigSource.DYNAMIC_BROKER_CONFIG, "3000"),
        (ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, "4000"), (STATIC, "5000")]
    # a Kafka setting pylog ignores is listed once a dynamic config sets it
    assert entries["num.io.threads"]["config_source"] == \
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    [topic] = topic_entries({}, broker.with_dynamic({**default, **local}).log_config, broker,
                            ["retention.ms"], include_synonyms=True, dynamic=(local, default))
    assert (topic["value"], topic["config_source"]) == \
        ("3000", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert [s["name"] for s in topic["synonyms"]][:3] == ["log.retention.ms"] * 3
    assert [e["name"] for e in default_broker_entries(default)] == [
        "log.retention.ms", "num.io.threads"]


@pytest.mark.parametrize("key, value, needle", [
    ("log.dirs", "/elsewhere", "cannot change while the broker runs"),
    ("log.retention.msec", "1", "did you mean log.retention.ms"),
    ("log.segment.bytes", "big", "log.segment.bytes"),
    ("log.cleanup.policy", "shred", "shred"),
])
def test_with_dynamic_refuses_what_cannot_change_naming_the_key(key, value, needle):
    with pytest.raises(ConfigError) as caught:
        broker_config().with_dynamic({key: value})
    assert caught.value.key == key and needle in str(caught.value)
