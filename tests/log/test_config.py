"""LogConfig: defaults, validation naming the key, Kafka topic-config overrides."""

from __future__ import annotations

import pytest

from pylog.errors import ConfigError
from pylog.log import LogConfig


def test_defaults_follow_kafka():
    cfg = LogConfig()
    assert (cfg.segment_bytes, cfg.index_interval_bytes, cfg.retention_ms, cfg.max_batch_size) == (
        1 << 30, 4096, 7 * 24 * 3600 * 1000, 1048588)
    assert cfg.flush_messages is None and cfg.retention_bytes is None and cfg.expose_unflushed
    assert cfg.min_insync_replicas == 1 and cfg.unclean_leader_election is False


@pytest.mark.parametrize("kwargs, key", [
    ({"segment_bytes": 10}, "segment_bytes"),
    ({"segment_bytes": 1 << 31}, "segment_bytes"),
    ({"flush_messages": 0}, "flush_messages"),
    ({"retention_ms": -5}, "retention_ms"),
    ({"index_interval_bytes": "4096"}, "index_interval_bytes"),
    ({"expose_unflushed": "yes"}, "expose_unflushed"),
    ({"min_insync_replicas": 0}, "min_insync_replicas"),
    ({"unclean_leader_election": 1}, "unclean_leader_election"),
])
def test_invalid_values_name_the_key(kwargs, key):
    with pytest.raises(ConfigError) as caught:
        LogConfig(**kwargs)
    assert caught.value.key == key and str(caught.value).startswith(key)


def test_kafka_topic_configs_override():
    cfg = LogConfig().with_overrides({"retention.ms": "-1", "segment.bytes": "1048576",
                                      "flush.messages": 1, "expose.unflushed": "false",
                                      "retention_bytes": "100"})
    assert cfg.retention_ms is None and cfg.segment_bytes == 1 << 20 and cfg.flush_messages == 1
    assert cfg.expose_unflushed is False and cfg.retention_bytes == 100
    with pytest.raises(ConfigError, match="^cleanup.polcy: not a log config"):
        LogConfig().with_overrides({"cleanup.polcy": "compact"})
    assert LogConfig().with_overrides({"cleanup.policy": "compact,delete"}) != LogConfig()
    with pytest.raises(ConfigError, match="^cleanup.policy"):
        LogConfig().with_overrides({"cleanup.policy": "shred"})
    with pytest.raises(ConfigError, match="^retention.ms: expected an integer"):
        LogConfig().with_overrides({"retention.ms": "soon"})
    with pytest.raises(ConfigError, match="^segment.bytes: must be between"):
        LogConfig().with_overrides({"segment.bytes": "5"})


def test_replication_topic_configs():
    cfg = LogConfig().with_overrides({"min.insync.replicas": "2", "unclean.leader.election.enable": "True"})
    assert cfg.min_insync_replicas == 2 and cfg.unclean_leader_election is True
    assert LogConfig().with_overrides({"unclean.leader.election.enable": False}).unclean_leader_election is False
    for key, value, problem in [("min.insync.replicas", "0", "must be at least 1"),
                                ("min.insync.replicas", "two", "expected an integer"),
                                ("min.insync.replicas", "-1", "must be at least 1"),
                                ("unclean.leader.election.enable", "yes", "expected true or false")]:
        with pytest.raises(ConfigError, match=f"^{key}: {problem}") as caught:
            LogConfig().with_overrides({key: value})
        assert caught.value.key == key
