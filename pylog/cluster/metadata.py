"""The view of cluster state a broker serves Metadata from and routes requests by.

Implementations: ``pylog.cluster.standalone.StandaloneMetadata`` (one broker, no
ZooKeeper; topics persisted under the first log dir) and the ZooKeeper-backed one in
cluster mode. Reads are served from memory (kept current by watches in cluster mode),
never by a round trip per request.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping, Protocol

from pylog.types import BrokerEndpoint

if TYPE_CHECKING:
    from pylog.cluster.producer_ids import ProducerIdBlock

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class PartitionState:
    """Leadership of one partition. ``leader == NO_LEADER`` means offline."""

    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    name: str
    partitions: Mapping[int, PartitionState]
    configs: Mapping[str, str] = field(default_factory=dict)
    # Given at creation, never reused: tells a topic from one deleted and created again
    # under its name (None: a topic of a cluster that has not given it one yet).
    topic_id: uuid.UUID | None = None

    @property
    def num_partitions(self) -> int:
        return len(self.partitions)


def names_by_id(topics: Mapping[str, TopicMetadata]) -> dict[uuid.UUID, str]:
    """Topic names by topic id (for requests that name topics by id alone)."""
    return {t.topic_id: name for name, t in topics.items() if t.topic_id is not None}


class ClusterMetadata(Protocol):
    """What a broker needs to know about the cluster, and the changes it may ask for."""

    cluster_id: str
    local_broker_id: int

    def controller_id(self) -> int:
        """The broker id of the current controller, or NO_LEADER if none."""

    def brokers(self) -> list[BrokerEndpoint]:
        """Live brokers, sorted by id."""

    def topics(self) -> Mapping[str, TopicMetadata]:
        """Every topic with its partitions' leadership."""

    def topic(self, name: str) -> TopicMetadata | None:
        ...

    def create_topic(self, name: str, num_partitions: int, replication_factor: int = 1,
                     configs: Mapping[str, str] | None = None, *,
                     assignment: Mapping[int, tuple[int, ...]] | None = None) -> TopicMetadata:
        """Create a topic and place its partitions (as ``assignment`` says, if given: a
        checked partition -> replicas map of ``num_partitions`` entries).

        Raises TopicAlreadyExistsError, InvalidTopicError, InvalidPartitionsError,
        InvalidReplicationFactorError.
        """

    def add_partitions(self, name: str, total: int, *,
                       assignment: Mapping[int, tuple[int, ...]] | None = None) -> TopicMetadata:
        """Grow a topic to ``total`` partitions (the new ones placed as ``assignment`` says,
        if given).

        Raises UnknownTopicOrPartitionError, InvalidPartitionsError,
        InvalidReplicationFactorError.
        """

    def alter_topic_configs(self, name: str,
                            alter: Callable[[dict[str, str]], dict[str, str]]) -> dict[str, str]:
        """Replace the topic's config overrides with ``alter(current overrides)``, atomically
        with respect to other alterations, and return the new overrides.

        ``alter`` may be called more than once (after losing a race) and may raise to
        abandon the change (nothing is written). Raises UnknownTopicOrPartitionError if the
        topic does not exist.
        """

    def delete_topic(self, name: str) -> None:
        """Raises UnknownTopicOrPartitionError if it does not exist."""

    def add_listener(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (with no arguments) after any change to the state above."""

    def allocate_producer_id_block(self) -> "ProducerIdBlock":
        """Take the next block of producer ids, unique in the cluster
        (:mod:`pylog.cluster.producer_ids`)."""

    def close(self) -> None:
        ...
