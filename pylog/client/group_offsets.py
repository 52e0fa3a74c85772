"""Committed offsets of a consumer group, written and read without joining the group.

Kafka lets a client commit offsets for a group it is not a member of (generation -1, no
member id), as long as the group has no active members: the way tools that track their
own progress (Spark, Flink, the pylog loader) make it visible to the lag tools every
Kafka shop runs (``kafka-consumer-groups.sh --describe``, Burrow, exporters).

    >>> commit_group_offsets(consumer.network, "pylog-loader.page_views", "page_views", {0: 1200})
    >>> fetch_group_offsets(consumer.network, "pylog-loader.page_views", "page_views", [0, 1])
    {0: 1200, 1: -1}
    >>> fetch_offsets(consumer.network, "pylog-loader.page_views")    # every committed offset
    {TopicPartition(topic='page_views', partition=0): 1200}

The group's coordinator is found with FindCoordinator (v0-3 one key, v4+ a list);
COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR and COORDINATOR_LOAD_IN_PROGRESS are retried
``attempts`` times, then raised like every other error (a KafkaError subclass).
"""

from __future__ import annotations

import time
from typing import Callable, Mapping, Sequence

from pylog.client.network import NetworkClient, backoff_delay, check_error
from pylog.errors import RetriableError, UnsupportedVersionError
from pylog.protocol import ApiKey
from pylog.types import BrokerEndpoint, TopicPartition

GROUP_KEY = 0
NO_OFFSET = -1


def commit_group_offsets(network: NetworkClient, group: str, topic: str, offsets: Mapping[int, int],
                         metadata: str = "", *, attempts: int = 3,
                         sleep: Callable[[float], None] = time.sleep) -> None:
    """Commit ``offsets`` (partition -> next offset to read) of ``topic`` for ``group``."""
    commit_offsets(network, group, {TopicPartition(topic, p): o for p, o in offsets.items()},
                   metadata, attempts=attempts, sleep=sleep)


def commit_offsets(network: NetworkClient, group: str, offsets: Mapping[TopicPartition, int],
                   metadata: str = "", *, attempts: int = 3,
                   sleep: Callable[[float], None] = time.sleep) -> None:
    """Commit ``offsets`` (partition -> next offset to read) of any topics for ``group``,
    in one OffsetCommit. A coordinator refuses it (UNKNOWN_MEMBER_ID, or
    REBALANCE_IN_PROGRESS) while the group has active members."""
    topics: dict[str, list] = {}
    for tp, offset in sorted(offsets.items()):
        topics.setdefault(tp.topic, []).append(
            {"partition_index": tp.partition, "committed_offset": offset,
             "committed_leader_epoch": -1, "commit_timestamp": -1, "committed_metadata": metadata})
    body = {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
            "group_instance_id": None, "retention_time_ms": -1,
            "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]}

    def attempt() -> None:
        response = coordinator_request(network, group, ApiKey.OFFSET_COMMIT, body)
        for answered in response["topics"]:
            for partition in answered["partitions"]:
                check_error(partition["error_code"], f"group {group}: commit of {answered['name']}-"
                                                     f"{partition['partition_index']}")

    with_coordinator_retries(attempt, attempts, sleep)


def fetch_group_offsets(network: NetworkClient, group: str, topic: str, partitions: Sequence[int], *,
                        attempts: int = 3, sleep: Callable[[float], None] = time.sleep) -> dict[int, int]:
    """The group's committed offsets of ``topic`` (-1 where none is committed)."""
    found = fetch_offsets(network, group, [TopicPartition(topic, p) for p in partitions],
                          attempts=attempts, sleep=sleep)
    return {p: found.get(TopicPartition(topic, p), NO_OFFSET) for p in partitions}


def fetch_offsets(network: NetworkClient, group: str, partitions: Sequence[TopicPartition] | None = None,
                  *, attempts: int = 3,
                  sleep: Callable[[float], None] = time.sleep) -> dict[TopicPartition, int]:
    """The group's committed offsets of ``partitions`` (-1 where none is committed), or
    with None every offset the group has committed (OffsetFetch v2 and later)."""

    def body(version: int) -> dict:
        if partitions is None and version < 2:
            raise UnsupportedVersionError(f"group {group}: the coordinator cannot list all of "
                                          f"a group's offsets (OffsetFetch v{version})")
        wanted = None if partitions is None else [
            {"name": topic, "partition_indexes": [tp.partition for tp in partitions if tp.topic == topic]}
            for topic in dict.fromkeys(tp.topic for tp in partitions)]
        if version >= 8:
            return {"groups": [{"group_id": group, "topics": wanted}], "require_stable": False}
        return {"group_id": group, "topics": wanted, "require_stable": False}

    def attempt() -> dict[TopicPartition, int]:
        response = coordinator_request(network, group, ApiKey.OFFSET_FETCH, body)
        if "groups" in response and response["groups"]:
            answer = response["groups"][0]
            check_error(answer["error_code"], f"group {group}: offset fetch")
            topics = answer["topics"]
        else:
            check_error(response.get("error_code", 0), f"group {group}: offset fetch")
            topics = response["topics"]
        found = dict.fromkeys(partitions or (), NO_OFFSET)
        for answered in topics:
            for partition in answered["partitions"]:
                check_error(partition["error_code"], f"group {group}: offset fetch")
                found[TopicPartition(answered["name"], partition["partition_index"])] = \
                    partition["committed_offset"]
        return found

    return with_coordinator_retries(attempt, attempts, sleep)


def coordinator_request(network: NetworkClient, group: str, api_key: int, body) -> dict:
    """One request to ``group``'s coordinator (found anew each time: it moves)."""
    coordinator = find_coordinator_node(network, group)
    return network.request_at(coordinator.host, coordinator.port, api_key, body)


def find_coordinator(network: NetworkClient, group: str) -> tuple[str, int]:
    """``(host, port)`` of the broker coordinating ``group``."""
    coordinator = find_coordinator_node(network, group)
    return coordinator.host, coordinator.port


def find_coordinator_node(network: NetworkClient, group: str) -> BrokerEndpoint:
    """The broker coordinating ``group``: its id, host and port."""

    def body(version: int) -> dict:
        if version >= 4:
            return {"key_type": GROUP_KEY, "coordinator_keys": [group]}
        return {"key": group, "key_type": GROUP_KEY}

    response = network.request_any(ApiKey.FIND_COORDINATOR, body)
    answer = response["coordinators"][0] if response.get("coordinators") else response
    check_error(answer["error_code"], f"group {group}: find coordinator")
    return BrokerEndpoint(answer["node_id"], answer["host"], answer["port"])


def with_coordinator_retries(action, attempts: int, sleep: Callable[[float], None]):
    """``action()``, again after a retriable error (the coordinator moved, is loading, or
    is not there yet), at most ``attempts`` times in all, with back-off."""
    failed = 0
    while True:
        try:
            return action()
        except RetriableError:
            failed += 1
            if failed >= attempts:
                raise
            sleep(backoff_delay(0.1, failed - 1))
