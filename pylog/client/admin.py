"""Admin: create, grow, delete, list and describe topics; describe and alter the configs
of topics and brokers; describe, set and delete users' SCRAM credentials (KIP-554)."""

from __future__ import annotations

import hashlib
import secrets
from typing import Iterable, Mapping

from pylog.client.acl_admin import AclAdmin
from pylog.client.metadata import TopicMetadata
from pylog.client.network import NetworkClient, check_error
from pylog.client.results import (
    ConfigEntry, ConfigSynonym, PartitionDescription, PartitionReassignmentState,
    TopicDescription)
from pylog.errors import ConfigError, KafkaError
from pylog.protocol import ApiKey
from pylog.protocol.configs import AlterConfigOp, ConfigResourceType, ConfigSource, ConfigType
from pylog.types import TopicPartition

# Resource types by the names kafka-configs.sh uses (--entity-type), singular or plural.
RESOURCE_TYPES = {"topic": ConfigResourceType.TOPIC, "topics": ConfigResourceType.TOPIC,
                  "broker": ConfigResourceType.BROKER, "brokers": ConfigResourceType.BROKER,
                  "group": ConfigResourceType.GROUP, "groups": ConfigResourceType.GROUP}


class Admin(AclAdmin):
    """Topic administration; ACLs too (``create_acls``, ``describe_acls``, ``delete_acls``
    from :class:`~pylog.client.acl_admin.AclAdmin`).

    >>> with Admin("127.0.0.1:9092") as admin:
    ...     admin.create_topic("events", num_partitions=3, configs={"retention.ms": "86400000"})
    ...     admin.list_topics()
    ['events']

    Errors come from the broker's answer: TopicAlreadyExistsError, InvalidPartitionsError,
    InvalidReplicationFactorError, InvalidConfigError, UnknownTopicOrPartitionError;
    NetworkExceptionError when no broker is reachable. ``security``: librdkafka-named
    security settings (a mapping or a :class:`~pylog.client.security.SecurityConfig`;
    default PLAINTEXT).
    """

    def __init__(self, bootstrap_servers: str | list[str], client_id: str = "pylog",
                 request_timeout_ms: int = 30000, *, security=None) -> None:
        self._network = NetworkClient(bootstrap_servers, client_id=client_id,
                                      request_timeout_ms=request_timeout_ms, security=security)
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

    def delete_records(self, offsets: Mapping[TopicPartition, int]
                       ) -> dict[TopicPartition, int | KafkaError]:
        """Delete every record below ``offsets[tp]`` (-1: the high watermark) in each
        partition, as ``kafka-delete-records.sh`` does: the partitions' leaders move their
        log start offsets and wait for the in-sync replicas to do the same.

        >>> admin.delete_records({TopicPartition("events", 0): 1000})
        {TopicPartition(topic='events', partition=0): 1000}

        Returns per partition its new low watermark (the earliest offset left), or the
        error the leader answered (OffsetOutOfRangeError above the high watermark,
        UnknownTopicOrPartitionError, RequestTimedOutError...).
        """
        results: dict[TopicPartition, int | KafkaError] = {}
        by_leader: dict[int, dict[str, list[dict]]] = {}
        for tp, offset in offsets.items():
            try:
                leader = self._network.leader_id(tp)
            except KafkaError as error:
                results[tp] = error
                continue
            by_leader.setdefault(leader, {}).setdefault(tp.topic, []).append(
                {"partition_index": tp.partition, "offset": offset})
        for leader, topics in by_leader.items():
            response = self._network.request_to(leader, ApiKey.DELETE_RECORDS, {
                "timeout_ms": self._timeout_ms, "topics": [
                    {"name": name, "partitions": parts} for name, parts in topics.items()]})
            for topic in response["topics"]:
                for p in topic["partitions"]:
                    tp = TopicPartition(topic["name"], p["partition_index"])
                    code = p["error_code"]
                    if code:
                        cls = KafkaError.for_code(code)
                        results[tp] = cls(f"delete records of {tp}: {cls.name}")
                    else:
                        results[tp] = p["low_watermark"]
        if any(isinstance(r, KafkaError) for r in results.values()):
            self._network.mark_stale()
        return results

    def elect_leaders(self, partitions: Iterable[TopicPartition] | None = None,
                      unclean: bool = False) -> dict[TopicPartition, KafkaError | None]:
        """Move leadership as ``kafka-leader-election.sh`` does (ElectLeaders): to each
        partition's preferred replica, or, with ``unclean``, to any live replica of a
        partition that has no leader. ``None``: every partition the election would change.

        >>> admin.elect_leaders([TopicPartition("events", 0)])
        {TopicPartition(topic='events', partition=0): None}

        Returns per partition None (elected) or the error: ElectionNotNeededError,
        PreferredLeaderNotAvailableError, EligibleLeadersNotAvailableError,
        UnknownTopicOrPartitionError, RequestTimedOutError...
        """
        named = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for tp in partitions:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            named = [{"topic": t, "partition_id": ps} for t, ps in by_topic.items()]
        response = self._controller_request(ApiKey.ELECT_LEADERS, {
            "election_type": 1 if unclean else 0, "topic_partitions": named,
            "timeout_ms": self._timeout_ms})
        check_error(response.get("error_code", 0), "elect leaders")
        results: dict[TopicPartition, KafkaError | None] = {}
        for topic in response["replica_election_results"]:
            for p in topic["partition_result"]:
                tp = TopicPartition(topic["topic"], p["partition_id"])
                code = p["error_code"]
                results[tp] = None if not code else KafkaError.for_code(code)(
                    p["error_message"] or f"elect the leader of {tp}")
        self._network.mark_stale()
        return results

    def brokers(self) -> list[int]:
        """The ids of the live brokers, ascending."""
        return sorted(self._network.refresh_metadata([]).brokers)

    def alter_partition_reassignments(
            self, moves: Mapping[TopicPartition, Iterable[int] | None]
    ) -> dict[TopicPartition, KafkaError | None]:
        """Move partitions to new replicas (preferred leader first), as
        ``kafka-reassign-partitions.sh --execute`` does; None cancels a pending move. The
        controller carries the moves out in the background: see
        :meth:`list_partition_reassignments`.

        >>> admin.alter_partition_reassignments({TopicPartition("events", 0): [2, 3]})
        {TopicPartition(topic='events', partition=0): None}

        Returns per partition None (accepted) or the error: UnknownTopicOrPartitionError,
        InvalidReplicaAssignmentError, NoReassignmentInProgressError...
        """
        by_topic: dict[str, list[dict]] = {}
        for tp, replicas in moves.items():
            by_topic.setdefault(tp.topic, []).append({
                "partition_index": tp.partition,
                "replicas": None if replicas is None else list(replicas)})
        response = self._controller_request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, {
            "timeout_ms": self._timeout_ms, "topics": [
                {"name": name, "partitions": parts} for name, parts in by_topic.items()]})
        check_error(response["error_code"], "alter partition reassignments")
        results: dict[TopicPartition, KafkaError | None] = {}
        for topic in response["responses"]:
            for p in topic["partitions"]:
                tp = TopicPartition(topic["name"], p["partition_index"])
                code = p["error_code"]
                results[tp] = None if not code else KafkaError.for_code(code)(
                    p["error_message"] or f"reassign {tp}")
        return results

    def list_partition_reassignments(self, partitions: Iterable[TopicPartition] | None = None
                                     ) -> dict[TopicPartition, PartitionReassignmentState]:
        """The partitions being moved (only ``partitions`` when given)."""
        topics = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for tp in partitions:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            topics = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]
        response = self._controller_request(ApiKey.LIST_PARTITION_REASSIGNMENTS, {
            "timeout_ms": self._timeout_ms, "topics": topics})
        check_error(response["error_code"], "list partition reassignments")
        return {TopicPartition(topic["name"], p["partition_index"]): PartitionReassignmentState(
                    tuple(p["replicas"]), tuple(p["adding_replicas"]),
                    tuple(p["removing_replicas"]))
                for topic in response["topics"] for p in topic["partitions"]}

    # -- configs ----------------------------------------------------------------------------

    def describe_configs(self, resource_type: str | ConfigResourceType, name: str,
                         keys: Iterable[str] | None = None, *, synonyms: bool = True,
                         documentation: bool = False) -> list[ConfigEntry]:
        """Every config of a topic or broker (only ``keys`` when given), sorted by name.

        ``resource_type`` is ``"topic"`` or ``"broker"`` (a broker is named by its id).

        >>> {e.name: e.value for e in admin.describe_configs("topic", "events")
        ...  if e.is_dynamic}
        {'retention.ms': '3600000'}

        Raises UnknownTopicOrPartitionError for an unknown topic, ConfigError for an
        unknown resource type.
        """
        kind = _resource_type(resource_type)
        body = {"resources": [{"resource_type": int(kind), "resource_name": name,
                               "configuration_keys": None if keys is None else list(keys)}],
                "include_synonyms": synonyms, "include_documentation": documentation}
        response = self._config_request(kind, name, ApiKey.DESCRIBE_CONFIGS, body)
        result = response["results"][0]
        _check_topic(result["error_code"], result["error_message"],
                     f"describe configs of {kind.name.lower()} {name!r}")
        return sorted((_config_entry(c) for c in result["configs"]), key=lambda e: e.name)

    def alter_configs(self, resource_type: str | ConfigResourceType, name: str,
                      configs: Mapping[str, str], *, validate_only: bool = False) -> None:
        """Replace the whole set of configs set on a topic with ``configs`` (AlterConfigs:
        a config left out goes back to the broker's default).

        >>> admin.alter_configs("topic", "events", {"cleanup.policy": "compact"})

        Raises InvalidConfigError naming a bad key or value; nothing changes then, nor
        with ``validate_only``. Broker settings are read-only (InvalidRequestError).
        """
        kind = _resource_type(resource_type)
        body = {"resources": [{"resource_type": int(kind), "resource_name": name,
                               "configs": [{"name": k, "value": None if v is None else str(v)}
                                           for k, v in configs.items()]}],
                "validate_only": validate_only}
        self._check_alter(kind, name, self._config_request(kind, name, ApiKey.ALTER_CONFIGS,
                                                           body))

    def incremental_alter_configs(self, resource_type: str | ConfigResourceType, name: str, *,
                                  set_configs: Mapping[str, str] | None = None,
                                  delete_configs: Iterable[str] = (),
                                  append_configs: Mapping[str, str] | None = None,
                                  subtract_configs: Mapping[str, str] | None = None,
                                  validate_only: bool = False) -> None:
        """Change single configs of a topic or a broker, leaving the others as they are.

        ``set_configs`` sets values, ``delete_configs`` returns keys to the broker's
        default, ``append_configs`` / ``subtract_configs`` add items to or remove them from
        a list config (``cleanup.policy``). A broker is named by its id, or ``""`` for the
        cluster-wide default of every broker (dynamic broker configs).

        >>> admin.incremental_alter_configs("topic", "events",
        ...                                 set_configs={"retention.ms": "3600000"},
        ...                                 delete_configs=["segment.ms"])
        >>> admin.incremental_alter_configs("broker", "", set_configs={"log.retention.ms": "3600000"})

        Raises InvalidConfigError naming a bad key or value (nothing changes then, nor with
        ``validate_only``), InvalidRequestError for a key given twice or a broker setting
        that needs a restart.
        """
        kind = _resource_type(resource_type)
        operations = [(AlterConfigOp.SET, k, v) for k, v in (set_configs or {}).items()]
        operations += [(AlterConfigOp.DELETE, k, None) for k in delete_configs]
        operations += [(AlterConfigOp.APPEND, k, v) for k, v in (append_configs or {}).items()]
        operations += [(AlterConfigOp.SUBTRACT, k, v)
                       for k, v in (subtract_configs or {}).items()]
        body = {"resources": [{"resource_type": int(kind), "resource_name": name, "configs": [
                    {"name": k, "config_operation": int(op),
                     "value": None if v is None else str(v)} for op, k, v in operations]}],
                "validate_only": validate_only}
        self._check_alter(kind, name, self._config_request(
            kind, name, ApiKey.INCREMENTAL_ALTER_CONFIGS, body))

    def _config_request(self, kind: ConfigResourceType, name: str, api_key: int,
                        body: dict) -> dict:
        """A broker's settings are that broker's own: ask it. Any broker knows a topic's."""
        if kind == ConfigResourceType.BROKER and name:
            try:
                broker_id = int(name)
            except ValueError:
                raise ConfigError("broker", f"a broker is named by its id, got {name!r}") from None
            return self._network.request_to(broker_id, api_key, body)
        return self._network.request_any(api_key, body)

    @staticmethod
    def _check_alter(kind: ConfigResourceType, name: str, response: dict) -> None:
        for result in response["responses"]:
            _check_topic(result["error_code"], result["error_message"],
                         f"alter configs of {kind.name.lower()} {name!r}")

    # -- SCRAM users (KIP-554) ---------------------------------------------------------

    def describe_user_scram_credentials(self, users: Iterable[str] | None = None
                                        ) -> dict[str, dict[str, int]]:
        """User -> {mechanism name: iterations}; every user with credentials when ``users``
        is None. A named user without credentials raises ResourceNotFoundError."""
        body = {"users": None if users is None else [{"name": u} for u in users]}
        response = self._network.request_any(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, body)
        _check_topic(response["error_code"], response["error_message"],
                     "describe SCRAM credentials")
        described = {}
        for result in response["results"]:
            _check_topic(result["error_code"], result["error_message"],
                         f"describe SCRAM credentials of user {result['user']!r}")
            described[result["user"]] = {
                SCRAM_MECHANISM_NAMES.get(info["mechanism"], f"UNKNOWN({info['mechanism']})"):
                    info["iterations"] for info in result["credential_infos"]}
        return described

    def upsert_user_scram_credential(self, user: str, mechanism: str, password: str,
                                     iterations: int = 4096) -> None:
        """Set ``user``'s credential for ``mechanism`` (SCRAM-SHA-256 or SCRAM-SHA-512).

        Only a random salt and the salted password leave this process, never the
        password. Errors: UnacceptableCredentialError (iterations outside 4096..16384),
        UnsupportedSaslMechanismError, ConfigError for an unknown mechanism name.
        """
        number = _scram_mechanism_number(mechanism)
        salt = secrets.token_bytes(32)
        hash_name = "sha256" if number == 1 else "sha512"
        salted = hashlib.pbkdf2_hmac(hash_name, password.encode("utf-8"), salt, iterations)
        self._alter_scram({"deletions": [], "upsertions": [
            {"name": user, "mechanism": number, "iterations": iterations, "salt": salt,
             "salted_password": salted}]}, f"set the {mechanism} credential of user {user!r}")

    def delete_user_scram_credential(self, user: str, mechanism: str) -> None:
        """Delete ``user``'s credential for ``mechanism``; ResourceNotFoundError if absent."""
        self._alter_scram({"deletions": [{"name": user,
                                          "mechanism": _scram_mechanism_number(mechanism)}],
                           "upsertions": []},
                          f"delete the {mechanism} credential of user {user!r}")

    def _alter_scram(self, body: dict, what: str) -> None:
        response = self._network.request_any(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, body)
        for result in response["results"]:
            _check_topic(result["error_code"], result["error_message"], what)

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


SCRAM_MECHANISM_NAMES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}


def _scram_mechanism_number(name: str) -> int:
    for number, known in SCRAM_MECHANISM_NAMES.items():
        if known == name.upper():
            return number
    raise ConfigError("mechanism", f"expected SCRAM-SHA-256 or SCRAM-SHA-512, got {name!r}")


def _resource_type(value: str | ConfigResourceType) -> ConfigResourceType:
    if isinstance(value, ConfigResourceType):
        return value
    try:
        return RESOURCE_TYPES[value]
    except KeyError:
        raise ConfigError("resource_type", f"expected topic, broker or group, got {value!r}") \
            from None


def _config_entry(config: dict) -> ConfigEntry:
    source = config.get("config_source", -1)
    if source == -1:  # DescribeConfigs v0 only says whether it is a default
        source = ConfigSource.DEFAULT_CONFIG if config.get("is_default") else ConfigSource.UNKNOWN
    return ConfigEntry(
        config["name"], config["value"], _enum(ConfigSource, source), config["is_sensitive"],
        config["read_only"],
        tuple(ConfigSynonym(s["name"], s["value"], _enum(ConfigSource, s["source"]))
              for s in config.get("synonyms", [])),
        _enum(ConfigType, config.get("config_type", 0)), config.get("documentation"))


def _enum(kind, value: int):
    """A wire number as ``kind``, UNKNOWN (0) for a number newer than this client."""
    try:
        return kind(value)
    except ValueError:
        return kind(0)
