"""The client's view of the network: bootstrap, reused connections, metadata, routing.

``NetworkClient`` is shared by SimpleConsumer, Producer and Admin. It keeps one
connection per broker address and reuses it, refreshes metadata when it is older than
``metadata_max_age_ms`` or when a caller says it is stale (NOT_LEADER_OR_FOLLOWER,
UNKNOWN_TOPIC_OR_PARTITION, a dead connection), and finds each partition's leader.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Iterable, Mapping, TypeVar

from pylog.client.connection import BrokerConnection
from pylog.client.security import SecurityConfig
from pylog.client.metadata import EMPTY_SNAPSHOT, ClusterSnapshot, TopicMetadata
from pylog.errors import (
    ConfigError,
    KafkaError,
    LeaderNotAvailableError,
    NetworkExceptionError,
    PylogError,
    RetriableError,
    UnknownTopicOrPartitionError,
)
from pylog.protocol import ApiKey
from pylog.types import BrokerEndpoint, TopicPartition

log = logging.getLogger(__name__)
T = TypeVar("T")


def parse_bootstrap(servers: str | Iterable[str]) -> list[tuple[str, int]]:
    """``"h1:9092,h2:9092"`` or ``["h1:9092", ...]`` as (host, port) pairs.

    Raises ConfigError naming ``bootstrap_servers`` for an empty list or a bad entry.
    """
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    addresses = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError("bootstrap_servers", f"{item!r} is not HOST:PORT")
        addresses.append((host.strip("[]"), int(port)))
    if not addresses:
        raise ConfigError("bootstrap_servers", "no broker address given")
    return addresses


class NetworkClient:
    """Connections and metadata for one client object (thread-safe)."""

    def __init__(self, bootstrap_servers: str | Iterable[str], *, client_id: str = "pylog",
                 request_timeout_ms: int = 30000, metadata_max_age_ms: int = 300000,
                 allow_auto_topic_creation: bool = False,
                 clock: Callable[[], float] = time.monotonic,
                 security: SecurityConfig | Mapping[str, object] | None = None) -> None:
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.security = SecurityConfig.coerce(security)
        if request_timeout_ms <= 0:
            raise ConfigError("request_timeout_ms", f"must be positive, got {request_timeout_ms}")
        self.client_id = client_id
        self.timeout_s = request_timeout_ms / 1000
        self.metadata_max_age_s = metadata_max_age_ms / 1000
        self.allow_auto_topic_creation = allow_auto_topic_creation
        self.clock = clock
        self._lock = threading.RLock()
        self._connections: dict[tuple[str, int], BrokerConnection] = {}
        self._snapshot = EMPTY_SNAPSHOT
        self._snapshot_at = float("-inf")
        self._stale = True

    # -- connections ----------------------------------------------------------------

    def connection(self, host: str, port: int) -> BrokerConnection:
        with self._lock:
            conn = self._connections.get((host, port))
            if conn is None:
                conn = BrokerConnection(host, port, client_id=self.client_id,
                                        timeout_s=self.timeout_s, security=self.security)
                self._connections[(host, port)] = conn
            return conn

    def broker_connection(self, broker_id: int) -> BrokerConnection:
        endpoint = self._snapshot.brokers.get(broker_id)
        if endpoint is None:
            self.refresh_metadata()
            endpoint = self._snapshot.brokers.get(broker_id)
            if endpoint is None:
                raise LeaderNotAvailableError(f"broker {broker_id} is not in the cluster metadata")
        return self.connection(endpoint.host, endpoint.port)

    def _candidate_addresses(self) -> list[tuple[str, int]]:
        known = [(b.host, b.port) for b in self._snapshot.brokers.values()]
        connected = [a for a in known if self._connections.get(a) and self._connections[a].connected]
        rest = [a for a in known + self.bootstrap if a not in connected]
        return list(dict.fromkeys(connected + rest))

    def request_any(self, api_key: int, body: dict[str, Any] | Callable[[int], dict]) -> dict[str, Any]:
        """Send to any reachable broker (connected ones first, then known, then bootstrap).

        ``body`` may be a function of the negotiated version.
        """
        failures = []
        for host, port in self._candidate_addresses():
            try:
                return self._request(self.connection(host, port), api_key, body)
            except (NetworkExceptionError, RetriableError) as exc:
                failures.append(str(exc))
        raise NetworkExceptionError("no broker reachable: " + "; ".join(failures))

    def request_at(self, host: str, port: int, api_key: int,
                   body: dict[str, Any] | Callable[[int], dict]) -> dict[str, Any]:
        """One request to the broker at ``host:port`` (a group's coordinator, say)."""
        return self._request(self.connection(host, port), api_key, body)

    def request_to(self, broker_id: int, api_key: int,
                   body: dict[str, Any] | Callable[[int], dict]) -> dict[str, Any]:
        try:
            return self._request(self.broker_connection(broker_id), api_key, body)
        except NetworkExceptionError:
            self.mark_stale()
            raise

    def request_batch_to(self, broker_id: int, api_key: int, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Pipelined: write every body to the broker's connection, then read the answers
        (in order). One round trip for all of them; retried once on a fresh socket like
        :meth:`request_to`."""
        try:
            conn = self.broker_connection(broker_id)
            with conn.lock:
                was_connected = conn.connected
                try:
                    return self._pipeline(conn, api_key, bodies)
                except NetworkExceptionError:
                    if not was_connected:
                        raise
                return self._pipeline(conn, api_key, bodies)
        except NetworkExceptionError:
            self.mark_stale()
            raise

    @staticmethod
    def _pipeline(conn: BrokerConnection, api_key: int, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
        version = conn.version_for(api_key)
        sent = [conn.send(api_key, body, version) for body in bodies]
        return [conn.receive(pending) for pending in sent]

    @staticmethod
    def _request(conn: BrokerConnection, api_key: int, body: dict[str, Any] | Callable[[int], dict]) -> dict:
        """One request; once more on a fresh socket if an idle connection turned out dead
        (a broker closes idle connections and restarts drop them)."""
        with conn.lock:
            was_connected = conn.connected
            try:
                version = conn.version_for(api_key)
                return conn.request(api_key, body(version) if callable(body) else body, version)
            except NetworkExceptionError:
                if not was_connected:
                    raise
            version = conn.version_for(api_key)
            return conn.request(api_key, body(version) if callable(body) else body, version)

    # -- metadata ------------------------------------------------------------------

    def mark_stale(self) -> None:
        self._stale = True

    @property
    def stale(self) -> bool:
        """True when metadata must be refreshed before it is trusted again."""
        return self._stale or self.clock() - self._snapshot_at > self.metadata_max_age_s

    def refresh_metadata(self, topics: list[str] | None = None) -> ClusterSnapshot:
        """Ask the cluster for brokers and ``topics`` (None: every topic)."""

        def body(version: int) -> dict:
            return {"topics": None if topics is None else [{"name": t} for t in topics],
                    "allow_auto_topic_creation": self.allow_auto_topic_creation}

        response = self.request_any(ApiKey.METADATA, body)
        with self._lock:
            self._snapshot = self._snapshot.merged_with(ClusterSnapshot.from_response(response), topics)
            self._snapshot_at = self.clock()
            self._stale = False
            return self._snapshot

    def snapshot(self) -> ClusterSnapshot:
        return self._snapshot

    def topic(self, name: str, *, refresh: bool = False) -> TopicMetadata:
        """Metadata of one topic, refreshed when stale, old or unknown.

        Raises UnknownTopicOrPartitionError (or the topic's error) when the cluster has no
        usable metadata for it.
        """
        expired = self.clock() - self._snapshot_at > self.metadata_max_age_s
        topic = self._snapshot.topics.get(name)
        if refresh or self._stale or expired or topic is None or topic.error_code:
            topic = self.refresh_metadata([name]).topics.get(name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        if topic.error_code == UnknownTopicOrPartitionError.errno:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        if topic.error_code:
            cls = KafkaError.for_code(topic.error_code)
            raise cls(f"topic {name!r}: {cls.name}")
        return topic

    def topics(self, names: Iterable[str], *, refresh: bool = False) -> dict[str, TopicMetadata]:
        """Metadata of several topics, with one Metadata request for all the ones that are
        unknown (or all of them when stale, old or ``refresh``).

        Raises UnknownTopicOrPartitionError (or the topic's error) for the first topic the
        cluster has no usable metadata for.
        """
        names = list(dict.fromkeys(names))
        expired = self.clock() - self._snapshot_at > self.metadata_max_age_s
        snapshot = self._snapshot
        if refresh or self._stale or expired:
            missing = names
        else:
            missing = [n for n in names if n not in snapshot.topics or snapshot.topics[n].error_code]
        if missing:
            snapshot = self.refresh_metadata(missing)
        found = {}
        for name in names:
            topic = snapshot.topics.get(name)
            if topic is None or topic.error_code == UnknownTopicOrPartitionError.errno:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            if topic.error_code:
                cls = KafkaError.for_code(topic.error_code)
                raise cls(f"topic {name!r}: {cls.name}")
            found[name] = topic
        return found

    def leader_id(self, tp: TopicPartition) -> int:
        """The broker id leading ``tp``; raises UnknownTopicOrPartition / LeaderNotAvailable."""
        partition = self.topic(tp.topic).partitions.get(tp.partition)
        if partition is None:
            raise UnknownTopicOrPartitionError(f"{tp} does not exist")
        if partition.leader < 0 or partition.leader not in self._snapshot.brokers:
            self.mark_stale()
            raise LeaderNotAvailableError(f"{tp} has no leader right now")
        return partition.leader

    def leader(self, tp: TopicPartition) -> BrokerEndpoint:
        leader_id = self.leader_id(tp)  # may refresh the snapshot: look it up afterwards
        return self._snapshot.brokers[leader_id]

    def close(self) -> None:
        with self._lock:
            for conn in self._connections.values():
                conn.close()
            self._connections.clear()


MAX_BACKOFF_S = 1.0


def backoff_delay(base_s: float, attempt: int) -> float:
    """Exponential back-off: ``base_s`` doubled per attempt (1, 2, ...), at most a second
    (or ``base_s`` if that is larger), as Kafka's retry.backoff.max.ms does."""
    return min(base_s * 2 ** (attempt - 1), max(base_s, MAX_BACKOFF_S))


def with_retries(action: Callable[[], T], *, network: NetworkClient, retries: int,
                 backoff_s: float, sleep: Callable[[float], None] = time.sleep) -> T:
    """Run ``action``; after a retriable error, refresh metadata, back off (exponentially)
    and try again, at most ``retries`` times."""
    attempt = 0
    while True:
        try:
            return action()
        except RetriableError as exc:
            attempt += 1
            if attempt > retries:
                raise
            log.debug("retriable error (attempt %d of %d): %s", attempt, retries, exc)
            network.mark_stale()
            sleep(backoff_delay(backoff_s, attempt))
            try:
                network.refresh_metadata()
            except PylogError as refresh_error:
                log.debug("metadata refresh failed: %s", refresh_error)


def check_error(code: int, what: str) -> None:
    """raise_for_code with a message naming what failed."""
    if code:
        cls = KafkaError.for_code(code)
        raise cls(f"{what}: {cls.name}: {cls.description}")


__all__ = ["NetworkClient", "parse_bootstrap", "with_retries", "backoff_delay", "check_error"]
