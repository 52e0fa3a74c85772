"""Group members and admin calls over raw Kafka requests, for the coordinator's tests.

A ``Member`` owns one connection: a JoinGroup or SyncGroup that waits at the broker holds
that connection, so each member of a group gets its own, and tests ``send_*`` on one and
``receive_*`` later while other members act.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

from pylog.protocol import ApiKey
from tests.broker.wire import WireClient

JOIN_V, SYNC_V, HEARTBEAT_V, COMMIT_V, FETCH_V = 9, 5, 4, 8, 7
REBALANCE_IN_PROGRESS, MEMBER_ID_REQUIRED = 27, 79


def subscription(*topics: str) -> bytes:
    """A consumer-protocol subscription as the Java client writes it (v1, by kafka-python)."""
    return ConsumerProtocolSubscription(topics=list(topics), user_data=None,
                                        owned_partitions=[], version=1).encode(version=1)


@dataclass
class Member:
    wire: WireClient
    group: str
    instance_id: str | None = None
    topics: tuple[str, ...] = ("orders",)
    session_ms: int = 30000
    rebalance_ms: int = 20000
    member_id: str = ""
    generation: int = -1

    def join_body(self, member_id: str | None = None, protocol_type: str = "consumer",
                  protocols: list[tuple[str, bytes]] | None = None,
                  session_ms: int | None = None) -> dict:
        protocols = protocols if protocols is not None else [
            ("range", subscription(*self.topics))]
        return {"group_id": self.group, "session_timeout_ms": session_ms or self.session_ms,
                "rebalance_timeout_ms": self.rebalance_ms,
                "member_id": self.member_id if member_id is None else member_id,
                "group_instance_id": self.instance_id, "protocol_type": protocol_type,
                "protocols": [{"name": n, "metadata": m} for n, m in protocols]}

    def send_join(self, version: int = JOIN_V, **body) -> None:
        self.wire.send(ApiKey.JOIN_GROUP, version, self.join_body(**body))

    def receive_join(self, version: int = JOIN_V) -> dict:
        response = self.wire.receive(ApiKey.JOIN_GROUP, version)[1]
        if response["error_code"] == 0:
            self.member_id, self.generation = response["member_id"], response["generation_id"]
        return response

    def join(self, version: int = JOIN_V, **body) -> dict:
        self.send_join(version, **body)
        return self.receive_join(version)

    def handshake(self, version: int = JOIN_V) -> str:
        """The first JoinGroup of a dynamic member (v4+): MEMBER_ID_REQUIRED with its id."""
        response = self.join(version, member_id="")
        assert response["error_code"] == MEMBER_ID_REQUIRED, response
        self.member_id = response["member_id"]
        return self.member_id

    def sync_body(self, assignments: dict[str, bytes] | None = None,
                  generation: int | None = None) -> dict:
        return {"group_id": self.group, "member_id": self.member_id,
                "generation_id": self.generation if generation is None else generation,
                "group_instance_id": self.instance_id, "protocol_type": "consumer",
                "protocol_name": "range", "assignments": [
                    {"member_id": m, "assignment": a} for m, a in (assignments or {}).items()]}

    def send_sync(self, assignments: dict[str, bytes] | None = None, **body) -> None:
        self.wire.send(ApiKey.SYNC_GROUP, SYNC_V, self.sync_body(assignments, **body))

    def receive_sync(self) -> dict:
        return self.wire.receive(ApiKey.SYNC_GROUP, SYNC_V)[1]

    def sync(self, assignments: dict[str, bytes] | None = None, **body) -> dict:
        self.send_sync(assignments, **body)
        return self.receive_sync()

    def heartbeat(self, generation: int | None = None, member_id: str | None = None) -> int:
        return self.wire.call(ApiKey.HEARTBEAT, HEARTBEAT_V, {
            "group_id": self.group, "member_id": self.member_id if member_id is None else member_id,
            "generation_id": self.generation if generation is None else generation,
            "group_instance_id": self.instance_id})["error_code"]

    def commit(self, offsets: dict[tuple[str, int], int], metadata: str = "") -> dict:
        return commit(self.wire, self.group, offsets, self.generation, self.member_id,
                      metadata=metadata, instance_id=self.instance_id)

    def leave(self) -> int:
        return self.wire.call(ApiKey.LEAVE_GROUP, 5, {"group_id": self.group, "members": [
            {"member_id": self.member_id, "group_instance_id": self.instance_id}]})["error_code"]


def form_group(members: list[Member]) -> None:
    """Join ``members`` (the first is the leader) into one generation and sync it to Stable."""
    first, rest = members[0], members[1:]
    if first.instance_id is None:
        first.handshake()
    assert first.join()["error_code"] == 0
    for index, member in enumerate(rest):
        if member.instance_id is None:
            member.handshake()
        member.send_join()
        # Once the broker has the newcomer, the others hear of the rebalance and rejoin.
        wait_until(lambda: first.heartbeat() == REBALANCE_IN_PROGRESS, what="a rebalance")
        for earlier in members[:index + 1]:
            earlier.send_join()
        for joined in members[:index + 2]:
            assert joined.receive_join()["error_code"] == 0
    for follower in rest:
        follower.send_sync()
    assignments = {m.member_id: f"assignment of {m.member_id}".encode() for m in members}
    assert first.sync(assignments)["error_code"] == 0
    for follower in rest:
        assert follower.receive_sync()["error_code"] == 0


def commit(wire: WireClient, group: str, offsets: dict[tuple[str, int], int],
           generation: int = -1, member_id: str = "", metadata: str | None = "",
           instance_id: str | None = None, version: int = COMMIT_V) -> dict:
    """OffsetCommit; returns {(topic, partition): error_code}."""
    topics: dict[str, list] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append({
            "partition_index": partition, "committed_offset": offset,
            "committed_leader_epoch": -1, "committed_metadata": metadata})
    response = wire.call(ApiKey.OFFSET_COMMIT, version, {
        "group_id": group, "generation_id_or_member_epoch": generation, "member_id": member_id,
        "group_instance_id": instance_id, "topics": [
            {"name": t, "partitions": parts} for t, parts in topics.items()]})
    return {(t["name"], p["partition_index"]): p["error_code"]
            for t in response["topics"] for p in t["partitions"]}


def fetch_offsets(wire: WireClient, group: str,
                  partitions: list[tuple[str, int]] | None = None,
                  version: int = FETCH_V) -> dict[tuple[str, int], int]:
    """OffsetFetch (v2-7); {(topic, partition): committed offset}, -1 for none."""
    topics = None
    if partitions is not None:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        topics = [{"name": t, "partition_indexes": p} for t, p in by_topic.items()]
    response = wire.call(ApiKey.OFFSET_FETCH, version, {"group_id": group, "topics": topics})
    assert response["error_code"] == 0, response
    return {(t["name"], p["partition_index"]): p["committed_offset"]
            for t in response["topics"] for p in t["partitions"]}


def describe(wire: WireClient, group: str) -> dict:
    return wire.call(ApiKey.DESCRIBE_GROUPS, 5, {"groups": [group],
                                                  "include_authorized_operations": False}
                     )["groups"][0]


def list_groups(wire: WireClient, states: list[str] | None = None) -> dict[str, str]:
    """ListGroups v4: {group id: state}."""
    response = wire.call(ApiKey.LIST_GROUPS, 4, {"states_filter": states or []})
    assert response["error_code"] == 0, response
    return {g["group_id"]: g["group_state"] for g in response["groups"]}


def wait_until(condition, timeout_s: float = 20.0, interval_s: float = 0.05, what: str = ""):
    """Poll ``condition()`` until it returns something truthy; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if result:
            return result
        assert time.monotonic() < deadline, f"timed out waiting for {what or condition}"
        time.sleep(interval_s)


def wait_for_coordinator(wire: WireClient, num_partitions: int) -> None:
    """Create ``__consumer_offsets`` (FindCoordinator does) and wait until every partition's
    groups are loaded, so no request gets COORDINATOR_LOAD_IN_PROGRESS."""
    from pylog.coordinator.records import partition_for

    groups: dict[int, str] = {}
    n = 0
    while len(groups) < num_partitions:
        groups.setdefault(partition_for(f"probe-{n}", num_partitions), f"probe-{n}")
        n += 1
    response = wire.call(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0,
                                                      "coordinator_keys": list(groups.values())})
    assert all(c["error_code"] == 0 for c in response["coordinators"]), response

    def loaded() -> bool:
        return all(describe(wire, g)["error_code"] == 0 for g in groups.values())

    wait_until(loaded, what="__consumer_offsets to load")
