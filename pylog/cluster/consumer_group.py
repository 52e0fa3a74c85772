"""ZooKeeper state of the seeds' consumer groups, and their range assignment.

Layout under ``/consumers/<group>/`` (paths relative to the chroot)::

    ids/<consumer id>        ephemeral  {"version": 1, "subscription": {"events": 1},
                                         "pattern": "static", "timestamp": "1700000000000"}
                                        (a topic filter: {"<regex>": 1}, "white_list")
    owners/<topic>/<p>       ephemeral  the owning consumer id (UTF-8)
    offsets/<topic>/<p>      persistent the next offset to consume, decimal (UTF-8)

Range assignment (per topic): sort the partitions, sort the ids of the consumers
subscribed to the topic; with ``n`` partitions and ``c`` consumers, consumer ``i`` takes
``n // c`` partitions plus one more if ``i < n % c``, contiguously from the start.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from pylog.cluster import layout
from pylog.errors import ConfigError
from pylog.types import TopicPartition

STATIC, WHITE_LIST = "static", "white_list"


@dataclass(frozen=True, slots=True)
class Subscription:
    """What a consumer asks for: named topics (static) or a whitelist regex."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None

    @classmethod
    def of(cls, topics: Iterable[str] = (), pattern: str | None = None) -> "Subscription":
        """Validated: exactly one of ``topics`` and ``pattern`` (a valid regex).

        Raises ConfigError naming ``topics`` or ``topic_pattern``.
        """
        topics = tuple(sorted(set(topics)))
        if bool(topics) == (pattern is not None):
            raise ConfigError("topics", "give either topics or topic_pattern, not both or neither")
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ConfigError("topic_pattern", f"not a valid regex: {exc}") from None
        return cls(topics=topics, pattern=pattern)

    def matches(self, topic: str) -> bool:
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics

    def encode(self, now_ms: int) -> bytes:
        if self.pattern is not None:
            subscription, kind = {self.pattern: 1}, WHITE_LIST
        else:
            subscription, kind = {topic: 1 for topic in self.topics}, STATIC
        return json.dumps({"version": 1, "subscription": subscription, "pattern": kind,
                           "timestamp": str(now_ms)}).encode()

    @classmethod
    def decode(cls, data: bytes) -> "Subscription":
        node = json.loads(data)
        if node.get("pattern") == WHITE_LIST:
            return cls(pattern=next(iter(node["subscription"])))
        if node.get("pattern", STATIC) != STATIC:
            raise ValueError(f"unsupported subscription pattern {node.get('pattern')!r}")
        return cls(topics=tuple(sorted(node["subscription"])))


def range_assign(partitions: Mapping[str, Iterable[int]],
                 subscribers: Mapping[str, Iterable[str]]) -> dict[str, list[TopicPartition]]:
    """Map each consumer id to its partitions (see the module docstring).

    ``range_assign({"t": range(5)}, {"t": ["b", "a"]})`` gives ``a`` partitions 0-2 of
    ``t`` and ``b`` partitions 3-4. A consumer with nothing to own is absent.
    """
    owned: dict[str, list[TopicPartition]] = {}
    for topic in sorted(subscribers):
        consumers = sorted(set(subscribers[topic]))
        ordered = sorted(partitions.get(topic, ()))
        if not consumers:
            continue
        per_consumer, extra = divmod(len(ordered), len(consumers))
        for i, consumer in enumerate(consumers):
            start = per_consumer * i + min(i, extra)
            count = per_consumer + (1 if i < extra else 0)
            if count == 0:
                continue
            owned.setdefault(consumer, []).extend(
                TopicPartition(topic, p) for p in ordered[start:start + count])
    return owned


class GroupStore:
    """Reads and writes one group's nodes. Every method is a few ZooKeeper round trips."""

    def __init__(self, client: KazooClient, group: str) -> None:
        self._client = client
        self.group = group
        self.root = f"{layout.CONSUMERS}/{group}"
        self.ids_path = f"{self.root}/ids"

    def ensure_paths(self) -> None:
        for sub in ("ids", "owners", "offsets"):
            self._client.ensure_path(f"{self.root}/{sub}")

    def owner_path(self, tp: TopicPartition) -> str:
        return f"{self.root}/owners/{tp.topic}/{tp.partition}"

    def offset_path(self, tp: TopicPartition) -> str:
        return f"{self.root}/offsets/{tp.topic}/{tp.partition}"

    def register(self, consumer_id: str, subscription: Subscription, now_ms: int) -> None:
        """Create the member's ephemeral ids node (again, after a new session)."""
        try:
            self._client.create(f"{self.ids_path}/{consumer_id}", subscription.encode(now_ms),
                                ephemeral=True, makepath=True)
        except NodeExistsError:
            _, stat = self._client.get(f"{self.ids_path}/{consumer_id}")
            if stat.ephemeralOwner != self._client.client_id[0]:
                raise

    def members(self) -> dict[str, Subscription]:
        found = {}
        for consumer_id in self._client.get_children(self.ids_path):
            try:
                found[consumer_id] = Subscription.decode(
                    self._client.get(f"{self.ids_path}/{consumer_id}")[0])
            except NoNodeError:
                continue
        return found

    def topic_partitions(self, topics: Iterable[str]) -> dict[str, list[int]]:
        found = {}
        for topic in topics:
            try:
                data, _ = self._client.get(layout.topic_path(topic))
            except NoNodeError:
                continue
            found[topic] = sorted(layout.decode_assignment(data))
        return found

    def all_topics(self) -> list[str]:
        return sorted(self._client.get_children(layout.BROKER_TOPICS))

    def claim(self, tp: TopicPartition, consumer_id: str) -> bool:
        """Take ownership of ``tp``; False while another consumer still owns it."""
        try:
            self._client.create(self.owner_path(tp), consumer_id.encode(), ephemeral=True,
                                makepath=True)
            return True
        except NodeExistsError:
            return self.owner(tp) == consumer_id

    def owner(self, tp: TopicPartition) -> str | None:
        try:
            data, stat = self._client.get(self.owner_path(tp))
        except NoNodeError:
            return None
        if stat.ephemeralOwner != self._client.client_id[0]:
            return data.decode() + "@other-session" if data else None
        return data.decode()

    def release(self, tp: TopicPartition, consumer_id: str) -> None:
        if self.owner(tp) == consumer_id:
            try:
                self._client.delete(self.owner_path(tp))
            except NoNodeError:
                pass

    def committed(self, tp: TopicPartition) -> int | None:
        try:
            return int(self._client.get(self.offset_path(tp))[0])
        except NoNodeError:
            return None

    def commit(self, offsets: Mapping[TopicPartition, int], consumer_id: str,
               owns: Callable[[TopicPartition], bool]) -> None:
        """Write offsets of partitions this consumer still owns (``owns`` re-checks first)."""
        for tp, offset in offsets.items():
            if not owns(tp) or self.owner(tp) != consumer_id:
                continue
            path = self.offset_path(tp)
            try:
                self._client.set(path, str(offset).encode())
            except NoNodeError:
                try:
                    self._client.create(path, str(offset).encode(), makepath=True)
                except NodeExistsError:
                    self._client.set(path, str(offset).encode())
