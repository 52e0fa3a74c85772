"""The replication throttle's rate measurement and the throttled-replicas topic configs."""

from __future__ import annotations

import pytest

from pylog.broker.replication_quota import UNLIMITED, ReplicationQuota, is_throttled
from pylog.errors import ConfigError
from pylog.log.config import LogConfig


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_unlimited_quota_is_never_exceeded():
    quota = ReplicationQuota()
    quota.record(10**12)
    assert not quota.active and not quota.exceeded() and quota.rate == UNLIMITED


def test_the_rate_is_measured_over_at_least_all_but_one_window():
    """As Kafka's Rate: 1,000 bytes just now count as 1,000 / 10 s with 11 one-second
    windows, so a quiet quota allows a burst of ten seconds' worth."""
    clock = Clock()
    quota = ReplicationQuota(100, samples=11, window_s=1.0, clock=clock)
    quota.record(1000)
    assert quota.measured() == pytest.approx(100.0)
    assert not quota.exceeded()
    quota.record(1)
    assert quota.exceeded()

    clock.now += 15  # past the 11 windows: forgotten
    assert quota.measured() == 0.0 and not quota.exceeded()


def test_the_rate_spreads_over_the_time_the_windows_cover():
    clock = Clock()
    quota = ReplicationQuota(1000, samples=5, window_s=2.0, clock=clock)
    for _ in range(5):
        quota.record(2000)
        clock.now += 2.0
    # 10,000 bytes over the 10 s since the oldest window began.
    assert quota.measured() == pytest.approx(10_000 / 10.0)
    quota.set_rate(999)
    assert quota.exceeded()


def test_throttled_replicas_lists():
    config = LogConfig().with_overrides({
        "leader.replication.throttled.replicas": " 0:1, 0:2 ,3:1",
        "follower.replication.throttled.replicas": "*"})
    assert config.leader_replication_throttled_replicas == "0:1,0:2,3:1"
    assert config.kafka_value("follower.replication.throttled.replicas") == "*"
    assert is_throttled(config.leader_replication_throttled_replicas, 0, 2)
    assert not is_throttled(config.leader_replication_throttled_replicas, 1, 1)
    assert is_throttled("*", 7, 9) and not is_throttled("", 0, 1)


@pytest.mark.parametrize("value", ["0", "a:1", "0:1,x", "0:-1", "**"])
def test_a_malformed_throttled_replicas_list_names_the_key(value):
    with pytest.raises(ConfigError) as caught:
        LogConfig().with_overrides({"leader.replication.throttled.replicas": value})
    assert caught.value.key == "leader.replication.throttled.replicas"
    assert "[partitionId]:[brokerId]" in str(caught.value)
