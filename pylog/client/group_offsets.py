"""Committed offsets of a consumer group, written and read without joining the group.

Kafka lets a client commit offsets for a group it is not a member of (generation -1, no
member id), as long as the group has no active members: the way tools that track their
own progress (Spark, Flink, the pylog loader) make it visible to the lag tools every
Kafka shop runs (``kafka-consumer-groups.sh --describe``, Burrow, exporters).

    >>> commit_group_offsets(consumer.network, "pylog-loader.page_views", "page_views", {0: 1200})
    >>> fetch_group_offsets(consumer.network, "pylog-loader.page_views", "page_views", [0, 1])
    {0: 1200, 1: -1}

The group's coordinator is found with FindCoordinator (v0-3 one key, v4+ a list);
COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR and COORDINATOR_LOAD_IN_PROGRESS are retried
``attempts`` times, then raised like every other error (a KafkaError subclass).
"""

from __future__ import annotations

import time
from typing import Callable, Mapping, Sequence

from pylog.client.network import NetworkClient, backoff_delay, check_error
from pylog.errors import RetriableError
from pylog.protocol import ApiKey

GROUP_KEY = 0
NO_OFFSET = -1


def commit_group_offsets(network: NetworkClient, group: str, topic: str, offsets: Mapping[int, int],
                         metadata: str = "", *, attempts: int = 3,
                         sleep: Callable[[float], None] = time.sleep) -> None:
    """Commit ``offsets`` (partition -> next offset to read) of ``topic`` for ``group``."""
    partitions = [{"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1,
                   "commit_timestamp": -1, "committed_metadata": metadata}
                  for p, o in sorted(offsets.items())]
    body = {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
            "group_instance_id": None, "retention_time_ms": -1,
            "topics": [{"name": topic, "partitions": partitions}]}

    def attempt() -> None:
        response = _coordinator_request(network, group, ApiKey.OFFSET_COMMIT, body)
        for answered in response["topics"]:
            for partition in answered["partitions"]:
                check_error(partition["error_code"], f"group {group}: commit of {answered['name']}-"
                                                     f"{partition['partition_index']}")

    _retrying(attempt, attempts, sleep)


def fetch_group_offsets(network: NetworkClient, group: str, topic: str, partitions: Sequence[int], *,
                        attempts: int = 3, sleep: Callable[[float], None] = time.sleep) -> dict[int, int]:
    """The group's committed offsets of ``topic`` (-1 where none is committed)."""

    def body(version: int) -> dict:
        wanted = [{"name": topic, "partition_indexes": list(partitions)}]
        if version >= 8:
            return {"groups": [{"group_id": group, "topics": wanted}], "require_stable": False}
        return {"group_id": group, "topics": wanted, "require_stable": False}

    def attempt() -> dict[int, int]:
        response = _coordinator_request(network, group, ApiKey.OFFSET_FETCH, body)
        if "groups" in response and response["groups"]:
            answer = response["groups"][0]
            check_error(answer["error_code"], f"group {group}: offset fetch")
            topics = answer["topics"]
        else:
            check_error(response.get("error_code", 0), f"group {group}: offset fetch")
            topics = response["topics"]
        found = {p: NO_OFFSET for p in partitions}
        for answered in topics:
            for partition in answered["partitions"]:
                check_error(partition["error_code"], f"group {group}: offset fetch")
                found[partition["partition_index"]] = partition["committed_offset"]
        return found

    return _retrying(attempt, attempts, sleep)


def _coordinator_request(network: NetworkClient, group: str, api_key: int, body) -> dict:
    host, port = find_coordinator(network, group)
    return network.request_at(host, port, api_key, body)


def find_coordinator(network: NetworkClient, group: str) -> tuple[str, int]:
    """``(host, port)`` of the broker coordinating ``group``."""

    def body(version: int) -> dict:
        if version >= 4:
            return {"key_type": GROUP_KEY, "coordinator_keys": [group]}
        return {"key": group, "key_type": GROUP_KEY}

    response = network.request_any(ApiKey.FIND_COORDINATOR, body)
    answer = response["coordinators"][0] if response.get("coordinators") else response
    check_error(answer["error_code"], f"group {group}: find coordinator")
    return answer["host"], answer["port"]


def _retrying(action, attempts: int, sleep: Callable[[float], None]):
    failed = 0
    while True:
        try:
            return action()
        except RetriableError:
            failed += 1
            if failed >= attempts:
                raise
            sleep(backoff_delay(0.1, failed - 1))
