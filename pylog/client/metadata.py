"""What the client knows about the cluster: brokers, topics, partition leaders.

A ``ClusterSnapshot`` is built from one Metadata response and never changes; a refresh
replaces it whole, so readers on other threads always see a consistent picture.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pylog.protocol.primitives import ZERO_UUID, uuid_text
from pylog.types import BrokerEndpoint


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    partition: int
    leader: int  # -1 while no leader is known
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error_code: int = 0
    offline_replicas: tuple[int, ...] = ()  # replicas on brokers that are down (Metadata v5+)

    @property
    def under_replicated(self) -> bool:
        """Fewer replicas in sync than assigned."""
        return len(self.isr) < len(self.replicas)

    @property
    def unavailable(self) -> bool:
        """No leader: the partition can be neither written nor read."""
        return self.leader < 0


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    name: str
    error_code: int
    partitions: dict[int, PartitionMetadata] = field(default_factory=dict)
    topic_id: str = ""  # Kafka's text form (KIP-516); "" when the broker gave none


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    brokers: dict[int, BrokerEndpoint]
    topics: dict[str, TopicMetadata]
    controller_id: int = -1
    cluster_id: str | None = None

    @classmethod
    def from_response(cls, body: dict) -> "ClusterSnapshot":
        brokers = {b["node_id"]: BrokerEndpoint(b["node_id"], b["host"], b["port"], b.get("rack"))
                   for b in body["brokers"]}
        topics = {}
        for topic in body["topics"]:
            partitions = {
                p["partition_index"]: PartitionMetadata(
                    p["partition_index"], p["leader_id"], tuple(p["replica_nodes"]),
                    tuple(p["isr_nodes"]), p["error_code"], tuple(p["offline_replicas"]))
                for p in topic["partitions"]}
            topic_id = topic.get("topic_id", ZERO_UUID)
            topics[topic["name"]] = TopicMetadata(topic["name"], topic["error_code"], partitions,
                                                  "" if topic_id == ZERO_UUID else uuid_text(topic_id))
        return cls(brokers, topics, body.get("controller_id", -1), body.get("cluster_id"))

    def merged_with(self, newer: "ClusterSnapshot", refreshed_topics: list[str] | None) -> "ClusterSnapshot":
        """``newer`` plus the topics of this snapshot that the newer request did not ask about."""
        if refreshed_topics is None:
            return newer
        topics = {name: t for name, t in self.topics.items() if name not in refreshed_topics}
        topics.update(newer.topics)
        return ClusterSnapshot(newer.brokers, topics, newer.controller_id, newer.cluster_id)


EMPTY_SNAPSHOT = ClusterSnapshot({}, {})
