"""Admin: create, grow, delete, list and describe topics."""

from __future__ import annotations

from typing import Mapping

from pylog.client.metadata import TopicMetadata
from pylog.client.network import NetworkClient, check_error
from pylog.client.results import PartitionDescription, TopicDescription
from pylog.protocol import ApiKey


class Admin:
    """Topic administration.

    >>> with Admin("127.0.0.1:9092") as admin:
    ...     admin.create_topic("events", num_partitions=3, configs={"retention.ms": "86400000"})
    ...     admin.list_topics()
    ['events']

    Errors come from the broker's answer: TopicAlreadyExistsError, InvalidPartitionsError,
    InvalidReplicationFactorError, InvalidConfigError, UnknownTopicOrPartitionError;
    NetworkExceptionError when no broker is reachable.
    """

    def __init__(self, bootstrap_servers: str | list[str], client_id: str = "pylog",
                 request_timeout_ms: int = 30000) -> None:
        self._network = NetworkClient(bootstrap_servers, client_id=client_id,
                                      request_timeout_ms=request_timeout_ms)
        self._timeout_ms = request_timeout_ms

    def _controller_request(self, api_key: int, body) -> dict:
        snapshot = self._network.refresh_metadata([])
        if snapshot.controller_id in snapshot.brokers:
            return self._network.request_to(snapshot.controller_id, api_key, body)
        return self._network.request_any(api_key, body)

    def create_topic(self, name: str, num_partitions: int = 1, replication_factor: int = 1,
                     configs: Mapping[str, str] | None = None) -> None:
        """Create a topic; ``configs`` are topic settings such as ``{"retention.ms": "60000"}``."""
        body = {"topics": [{"name": name, "num_partitions": num_partitions,
                            "replication_factor": replication_factor, "assignments": [],
                            "configs": [{"name": k, "value": str(v)} for k, v in (configs or {}).items()]}],
                "timeout_ms": self._timeout_ms, "validate_only": False}
        response = self._controller_request(ApiKey.CREATE_TOPICS, body)
        for topic in response["topics"]:
            _check_topic(topic["error_code"], topic.get("error_message"), f"create topic {name!r}")
        self._network.mark_stale()

    def create_partitions(self, name: str, total: int) -> None:
        """Grow topic ``name`` to ``total`` partitions; the controller places the new ones
        over the live brokers with the topic's replication factor.

        >>> admin.create_partitions("events", 6)

        Raises InvalidPartitionsError unless ``total`` is more than the topic has (partitions
        are never removed), UnknownTopicOrPartitionError for an unknown topic and
        InvalidReplicationFactorError with fewer live brokers than the replication factor.
        """
        body = {"topics": [{"name": name, "count": total, "assignments": None}],
                "timeout_ms": self._timeout_ms, "validate_only": False}
        response = self._controller_request(ApiKey.CREATE_PARTITIONS, body)
        for topic in response["results"]:
            _check_topic(topic["error_code"], topic.get("error_message"),
                         f"add partitions to {name!r}")
        self._network.mark_stale()

    def delete_topic(self, name: str) -> None:
        """Delete a topic and its data."""

        def body(version: int) -> dict:
            return {"topic_names": [name], "topics": [{"name": name}], "timeout_ms": self._timeout_ms}

        response = self._controller_request(ApiKey.DELETE_TOPICS, body)
        for topic in response["responses"]:
            _check_topic(topic["error_code"], topic.get("error_message"), f"delete topic {name!r}")
        self._network.mark_stale()

    def list_topics(self) -> list[str]:
        """Names of all topics, sorted."""
        snapshot = self._network.refresh_metadata(None)
        return sorted(name for name, t in snapshot.topics.items() if not t.error_code)

    def describe_topic(self, name: str) -> TopicDescription:
        """Partitions of ``name`` with leader, replicas and in-sync replicas."""
        topic = self._network.topic(name, refresh=True)
        partitions = [PartitionDescription(p.partition, p.leader, list(p.replicas), list(p.isr))
                      for p in sorted(topic.partitions.values(), key=lambda p: p.partition)]
        return TopicDescription(name, partitions)

    def describe_topics(self, names: list[str] | None = None) -> list[TopicMetadata]:
        """Metadata of ``names`` (None: every topic), sorted by name, from one Metadata
        request: per partition the leader (-1: none), replicas, in-sync replicas and
        offline replicas.

        >>> [t.name for t in admin.describe_topics(["events"])]
        ['events']

        Raises UnknownTopicOrPartitionError when a named topic does not exist.
        """
        snapshot = self._network.refresh_metadata(names)
        if names is None:
            return [t for _, t in sorted(snapshot.topics.items()) if not t.error_code]
        # Fresh metadata: topic() only asks again for a topic that is missing or in error.
        return [self._network.topic(name) for name in sorted(set(names))]

    def close(self) -> None:
        self._network.close()

    def __enter__(self) -> "Admin":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _check_topic(code: int, message: str | None, what: str) -> None:
    if code and message:
        from pylog.errors import KafkaError
        cls = KafkaError.for_code(code)
        raise cls(f"{what}: {cls.name}: {message}")
    check_error(code, what)
