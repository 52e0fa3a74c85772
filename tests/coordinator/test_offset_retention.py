"""Committed offsets expire ``offsets.retention.minutes`` after their group empties (consumer
groups) or after their commit (groups that only store offsets), and stay expired after a
restart because tombstones were written. The broker runs in-process on an injected wall
clock, so minutes pass at once."""

import pytest

from pylog.broker.config import BrokerConfig
from pylog.broker.server import Broker
from pylog.protocol import ApiKey
from tests.broker.wire import WireClient, create_body
from tests.coordinator.members import (
    Member, commit, describe, fetch_offsets, form_group, list_groups, wait_for_coordinator,
    wait_until)

OFFSETS_PARTITIONS = 3
T0 = 1_700_000_000_000
SECOND = 1000


class WallClock:
    """Epoch milliseconds that move only when the test says."""

    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def start_broker(log_dir, wall: WallClock) -> Broker:
    config = BrokerConfig.from_mapping({
        "listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(log_dir),
        "group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000",
        "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
        "offsets.retention.minutes": "1", "offsets.retention.check.interval.ms": "20"})
    return Broker(config, wall_ms=wall).start()


@pytest.fixture
def wall():
    return WallClock(T0)


@pytest.fixture
def log_dir(tmp_path):
    return tmp_path / "logs"


def connect(broker: Broker) -> WireClient:
    host, port = broker.address
    return WireClient(f"{host}:{port}")


def test_offsets_expire_after_retention_and_stay_gone_after_a_restart(log_dir, wall):
    broker = start_broker(log_dir, wall)
    try:
        with connect(broker) as wire, connect(broker) as member_wire:
            wait_for_coordinator(wire, OFFSETS_PARTITIONS)
            created = wire.call(ApiKey.CREATE_TOPICS, 4, create_body("orders", 2))
            assert created["topics"][0]["error_code"] == 0, created

            # T0: a tool commits; a consumer group commits and empties.
            assert commit(wire, "tool", {("orders", 0): 5}) == {("orders", 0): 0}
            # Static, so no MEMBER_ID_REQUIRED round leaves an offset-less group for the
            # frequent expiry runs to drop between the two joins.
            consumer = Member(member_wire, "cg", instance_id="cg-1")
            form_group([consumer])
            assert consumer.commit({("orders", 1): 7}) == {("orders", 1): 0}
            assert consumer.leave() == 0
            assert describe(wire, "cg")["group_state"] == "Empty"

            wall.now_ms = T0 + 30 * SECOND
            assert commit(wire, "tool", {("orders", 1): 6}) == {("orders", 1): 0}

            # T0 + 70 s: past the retention of the first commits, not of the later one.
            wall.now_ms = T0 + 70 * SECOND
            assert commit(wire, "fresh", {("orders", 0): 9}) == {("orders", 0): 0}

            def expired() -> bool:
                return (fetch_offsets(wire, "tool", [("orders", 0)]) == {("orders", 0): -1}
                        and "cg" not in list_groups(wire))

            wait_until(expired, what="offsets to expire")
            assert fetch_offsets(wire, "cg") == {}
            assert fetch_offsets(wire, "cg", [("orders", 1)]) == {("orders", 1): -1}
            assert describe(wire, "cg")["group_state"] == "Dead"
            assert fetch_offsets(wire, "tool") == {("orders", 1): 6}
            assert fetch_offsets(wire, "fresh") == {("orders", 0): 9}
            assert list_groups(wire, ["Empty"]).keys() >= {"tool", "fresh"}
    finally:
        broker.stop()

    # Back at T0 a broker that only had the offsets would keep them: gone means tombstoned.
    wall.now_ms = T0
    broker = start_broker(log_dir, wall)
    try:
        with connect(broker) as wire:
            wait_for_coordinator(wire, OFFSETS_PARTITIONS)
            assert fetch_offsets(wire, "tool") == {("orders", 1): 6}
            assert fetch_offsets(wire, "cg") == {}
            assert fetch_offsets(wire, "fresh") == {("orders", 0): 9}
            groups = list_groups(wire)
            assert "cg" not in groups and {"tool", "fresh"} <= groups.keys()
            assert describe(wire, "cg")["group_state"] == "Dead"
    finally:
        broker.stop()
