"""``StandaloneMetadata``: the ClusterMetadata of a single broker without ZooKeeper.

This broker is the only broker, the controller, and the leader of every partition.
Topics and their configs (the overrides given at creation or altered since) live in
memory and in ``topics.json`` under the broker's first log dir, rewritten through a
temporary file and a rename after every change, so a crash leaves either the old or the
new state::

    {"version": 1,
     "topics": {"events": {"partitions": 4, "configs": {"retention.ms": "3600000"},
                           "topic_id": "<22-char url-safe base64 uuid>"}}}

A topic gets its id at creation; topics of an older ``topics.json`` get one at start.
"""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path
from typing import Callable, Mapping

from pylog.protocol.primitives import parse_uuid_text, uuid_text
from pylog.cluster.metadata import PartitionState, TopicMetadata
from pylog.cluster.placement import check_partition_growth, validate_topic_name
from pylog.cluster.producer_ids import ProducerIdBlock, allocate_file_block
from pylog.errors import (
    InvalidPartitionsError, InvalidReplicationFactorError, KafkaStorageError,
    TopicAlreadyExistsError, UnknownTopicOrPartitionError)
from pylog.log.checkpoint import write_text_atomically
from pylog.types import BrokerEndpoint

STATE_FILE = "topics.json"
_FORMAT_VERSION = 1


class StandaloneMetadata:
    """Cluster state of a broker that runs alone.

    Parameters:
        state_dir: where ``topics.json`` is kept (the broker's first log dir).
        endpoint: this broker's id and advertised address.
        cluster_id: the id reported in Metadata (kept stable by the caller).

    >>> meta = StandaloneMetadata(Path("/data"), BrokerEndpoint(0, "127.0.0.1", 9092), "abc")
    >>> meta.create_topic("events", num_partitions=4)
    """

    def __init__(self, state_dir: Path, endpoint: BrokerEndpoint, cluster_id: str) -> None:
        self.cluster_id = cluster_id
        self.local_broker_id = endpoint.broker_id
        self._endpoint = endpoint
        self._path = Path(state_dir) / STATE_FILE
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []
        self._topics: dict[str, TopicMetadata] = {}
        state = self._read_state()
        for name, entry in state.items():
            topic_id = entry.get("topic_id")
            self._topics[name] = self._topic(
                name, int(entry["partitions"]), dict(entry.get("configs", {})),
                parse_uuid_text(topic_id) if topic_id else uuid.uuid4())
        if any("topic_id" not in entry for entry in state.values()):
            self._write_state(self._topics)

    def controller_id(self) -> int:
        return self.local_broker_id

    def brokers(self) -> list[BrokerEndpoint]:
        return [self._endpoint]

    def topics(self) -> Mapping[str, TopicMetadata]:
        return dict(self._topics)

    def topic(self, name: str) -> TopicMetadata | None:
        return self._topics.get(name)

    def create_topic(self, name: str, num_partitions: int, replication_factor: int = 1,
                     configs: Mapping[str, str] | None = None, *,
                     assignment: Mapping[int, tuple[int, ...]] | None = None) -> TopicMetadata:
        """Create ``name`` with every partition led by this broker.

        Raises InvalidTopicError, InvalidPartitionsError, InvalidReplicationFactorError
        (anything but 1 or -1 meaning "default") and TopicAlreadyExistsError.
        """
        validate_topic_name(name)
        if num_partitions < 1:
            raise InvalidPartitionsError(f"number of partitions must be at least 1, "
                                         f"got {num_partitions}")
        if replication_factor not in (1, -1):
            raise InvalidReplicationFactorError(
                f"replication factor {replication_factor} is larger than the 1 broker available")
        with self._lock:
            if name in self._topics:
                raise TopicAlreadyExistsError(f"Topic {name!r} already exists.")
            topic = self._topic(name, num_partitions, dict(configs or {}), uuid.uuid4())
            topics = dict(self._topics)
            topics[name] = topic
            self._write_state(topics)
            self._topics = topics
        self._notify()
        return topic

    def add_partitions(self, name: str, total: int, *,
                       assignment: Mapping[int, tuple[int, ...]] | None = None) -> TopicMetadata:
        """Grow ``name`` to ``total`` partitions (CreatePartitions).

        Raises UnknownTopicOrPartitionError, and InvalidPartitionsError unless ``total``
        is more than the topic has.
        """
        with self._lock:
            current = self._topics.get(name)
            if current is None:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            check_partition_growth(name, current.num_partitions, total)
            topic = self._topic(name, total, dict(current.configs), current.topic_id)
            topics = dict(self._topics)
            topics[name] = topic
            self._write_state(topics)
            self._topics = topics
        self._notify()
        return topic

    def alter_topic_configs(self, name: str,
                            alter: Callable[[dict[str, str]], dict[str, str]]) -> dict[str, str]:
        """Replace the overrides of ``name`` with ``alter(current)`` and persist them.

        Raises UnknownTopicOrPartitionError, or whatever ``alter`` raises (nothing changes).
        """
        with self._lock:
            current = self._topics.get(name)
            if current is None:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            configs = dict(alter(dict(current.configs)))
            topics = dict(self._topics)
            topics[name] = TopicMetadata(name, current.partitions, configs, current.topic_id)
            self._write_state(topics)
            self._topics = topics
        self._notify()
        return configs

    def delete_topic(self, name: str) -> None:
        """Raises UnknownTopicOrPartitionError if ``name`` does not exist."""
        with self._lock:
            if name not in self._topics:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            topics = dict(self._topics)
            del topics[name]
            self._write_state(topics)
            self._topics = topics
        self._notify()

    def allocate_producer_id_block(self) -> ProducerIdBlock:
        """Take the next block of producer ids, recorded next to ``topics.json``."""
        return allocate_file_block(self._path.parent, self.local_broker_id)

    def add_listener(self, callback: Callable[[], None]) -> None:
        self._listeners.append(callback)

    def close(self) -> None:
        self._listeners.clear()

    def _topic(self, name: str, num_partitions: int, configs: dict[str, str],
               topic_id: uuid.UUID) -> TopicMetadata:
        me = self.local_broker_id
        partitions = {p: PartitionState(p, me, 0, (me,), (me,)) for p in range(num_partitions)}
        return TopicMetadata(name, partitions, configs, topic_id)

    def _notify(self) -> None:
        for callback in list(self._listeners):
            callback()

    def _read_state(self) -> dict:
        try:
            state = json.loads(self._path.read_text())
        except FileNotFoundError:
            return {}
        except json.JSONDecodeError as exc:
            raise KafkaStorageError(f"{self._path} is not valid JSON: {exc}") from None
        if state.get("version") != _FORMAT_VERSION:
            raise KafkaStorageError(f"{self._path}: unknown format version "
                                    f"{state.get('version')!r}")
        return state["topics"]

    def _write_state(self, topics: Mapping[str, TopicMetadata]) -> None:
        state = {"version": _FORMAT_VERSION, "topics": {
            name: {"partitions": t.num_partitions, "configs": dict(t.configs),
                   "topic_id": uuid_text(t.topic_id)}
            for name, t in sorted(topics.items())}}
        self._path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomically(self._path, json.dumps(state, indent=1))
