"""Metadata, CreateTopics, DeleteTopics and CreatePartitions (InitProducerId is served
by the transaction coordinator, :mod:`pylog.transactions`).

Cluster state comes only from ``ClusterMetadata`` (standalone or ZooKeeper). Metadata
auto-creates requested topics when ``auto.create.topics.enable`` is on and the client
allows it; CreateTopics checks topic configs against the log settings before creating.
"""

from __future__ import annotations

import logging

from pylog.broker.configs import ConfigHandlers
from pylog.security.acls import ResourceType
from pylog.security.operations import NOT_REQUESTED, all_operations
from pylog.broker.dynamic_config import DynamicBrokerConfig
from pylog.broker.partitions import PartitionLogs
from pylog.cluster.metadata import NO_LEADER, ClusterMetadata, names_by_id
from pylog.cluster.placement import (INTERNAL_TOPICS, assign_replicas, check_partition_growth,
                                     check_replica_assignment, validate_topic_name)
from pylog.errors import (
    ConfigError, CoordinatorNotAvailableError, InvalidConfigError, InvalidPartitionsError, InvalidReplicaAssignmentError,
    InvalidRequestError, InvalidTopicError, KafkaError, LeaderNotAvailableError, ListenerNotFoundError,
    MismatchedEndpointTypeError, TopicAlreadyExistsError,
    TopicDeletionDisabledError, UnknownTopicIdError, UnknownTopicOrPartitionError,
    UnsupportedEndpointTypeError)

log = logging.getLogger(__name__)

COORDINATOR_NOT_AVAILABLE = CoordinatorNotAvailableError.errno
LEADER_NOT_AVAILABLE = LeaderNotAvailableError.errno
UNKNOWN_TOPIC_OR_PARTITION = UnknownTopicOrPartitionError.errno
INVALID_TOPIC = InvalidTopicError.errno
UNKNOWN_TOPIC_ID = UnknownTopicIdError.errno
LISTENER_NOT_FOUND = ListenerNotFoundError.errno
BROKER_ENDPOINTS, CONTROLLER_ENDPOINTS = 1, 2  # DescribeCluster's endpoint types (KIP-919)
METADATA_VERSION_WITH_IDS = 12  # what DescribeTopicPartitions answers: Metadata's newest view
# A DescribeTopicPartitions body's key for the authorizer's ``name -> may Describe`` test,
# applied to every topic before paging when none is named, so hidden topics take no room
# in a page and never show in a cursor.
DESCRIBABLE = "_describable"


def _reachable(brokers, listener: str | None) -> list:
    """The brokers as the client on ``listener`` reaches them (those without it left out,
    as Kafka does)."""
    return [b for b in (b.on_listener(listener) if listener else b for b in brokers) if b]


def _unknown_topic_id(topic_id, version: int) -> dict:
    """A topic asked for by an id no topic has (Metadata v10+)."""
    return {"error_code": UNKNOWN_TOPIC_ID, "name": None if version >= 12 else "",
            "topic_id": topic_id, "is_internal": False, "partitions": [],
            "topic_authorized_operations": NOT_REQUESTED}


class AdminHandlers:
    """Handlers for the APIs about cluster state rather than partition data."""

    def __init__(self, dynamic: DynamicBrokerConfig, metadata: ClusterMetadata,
                 logs: PartitionLogs) -> None:
        self.config = dynamic.static
        self.metadata = metadata
        self.logs = logs
        self.configs = ConfigHandlers(dynamic, metadata)

    # -- Metadata -----------------------------------------------------------------------

    def metadata_request(self, body: dict, version: int, listener: str | None = None) -> dict:
        """Metadata with the brokers' addresses on ``listener``, the listener the client
        came in on (brokers without it are left out, as Kafka does)."""
        live = self.metadata.brokers()
        reachable = _reachable(live, listener)
        requested = body["topics"]
        if requested is None or (version == 0 and not requested):
            requested = [{"name": name} for name in sorted(self.metadata.topics())]
        allow_create = (self.config["auto.create.topics.enable"]
                        and (version < 4 or body["allow_auto_topic_creation"]))
        unreachable = {b.broker_id for b in live} - {b.broker_id for b in reachable}
        by_id = (names_by_id(self.metadata.topics())
                 if any(t["name"] is None for t in requested) else {})

        def answer(t: dict) -> dict:
            if t["name"] is not None:
                return self._topic_metadata(t["name"], allow_create, unreachable, version)
            name = by_id.get(t["topic_id"])  # asked for by id alone
            if name is None:
                return _unknown_topic_id(t["topic_id"], version)
            return self._topic_metadata(name, False, unreachable, version)

        topics = [answer(t) for t in requested]
        if version >= 8 and body["include_topic_authorized_operations"]:
            for topic in topics:  # (with an authorizer, RequestAuthorization narrows these)
                if topic["error_code"] == 0:
                    topic["topic_authorized_operations"] = all_operations(ResourceType.TOPIC)
        return {
            "throttle_time_ms": 0,
            "brokers": self._broker_list(reachable),
            "cluster_id": self.metadata.cluster_id,
            "controller_id": self.metadata.controller_id(),
            "topics": topics,
            "cluster_authorized_operations": all_operations(ResourceType.CLUSTER)
            if 8 <= version <= 10 and body["include_cluster_authorized_operations"]
            else NOT_REQUESTED,
        }

    def describe_topic_partitions(self, body: dict, version: int,
                                  listener: str | None = None) -> dict:
        """DescribeTopicPartitions (KIP-966): what Metadata says of the topics asked for
        (every topic when none is named), sorted by name, paged by partitions: an answer
        holds at most ``response_partition_limit`` of them (and at most
        ``max.request.partition.size.limit``), and ``next_cursor`` names the topic and
        partition the next request starts from (null once everything was described). A
        cursor starts the answer at its topic and partition; one naming a topic not asked
        for is INVALID_REQUEST for every topic. Topics are never created here, and an
        unknown topic is UNKNOWN_TOPIC_OR_PARTITION. No eligible leader replicas: a
        ZooKeeper cluster elects from the ISR."""
        asked = sorted({t["name"] for t in body["topics"]})
        describable = body.get(DESCRIBABLE)  # set by the authorizer: who may see what
        names = asked or sorted(
            name for name in self.metadata.topics() if describable is None or describable(name))
        cursor = body["cursor"]
        if cursor is not None and ((asked and cursor["topic_name"] not in asked)
                                   or cursor["partition_index"] < 0):
            return {"throttle_time_ms": 0, "next_cursor": None, "topics": [
                {"error_code": InvalidRequestError.errno, "name": name, "partitions": []}
                for name in asked]}
        start = cursor["partition_index"] if cursor is not None else 0
        if cursor is not None:
            names = [name for name in names if name >= cursor["topic_name"]]
        live = self.metadata.brokers()
        unreachable = {b.broker_id for b in live} - {b.broker_id for b in _reachable(live, listener)}
        room = max(1, min(body["response_partition_limit"],
                          self.config["max.request.partition.size.limit"]))
        topics, next_cursor = [], None
        for name in names:
            if room == 0:
                next_cursor = {"topic_name": name, "partition_index": 0}
                break
            topic = self._topic_metadata(name, False, unreachable, METADATA_VERSION_WITH_IDS)
            first = start if cursor is not None and name == cursor["topic_name"] else 0
            partitions = [p for p in topic["partitions"] if p["partition_index"] >= first]
            if len(partitions) > room:
                next_cursor = {"topic_name": name,
                               "partition_index": partitions[room]["partition_index"]}
                partitions = partitions[:room]
            room -= len(partitions)
            topics.append(dict(topic, partitions=partitions,
                               topic_authorized_operations=all_operations(ResourceType.TOPIC)
                               if topic["error_code"] == 0 else NOT_REQUESTED))
            if next_cursor is not None:
                break
        return {"throttle_time_ms": 0, "topics": topics, "next_cursor": next_cursor}

    @staticmethod
    def _broker_list(brokers) -> list[dict]:
        return [{"node_id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack}
                for b in brokers]

    def describe_cluster(self, body: dict, version: int, listener: str | None = None) -> dict:
        """DescribeCluster (KIP-700): the brokers on the client's listener, the cluster id
        and the controller, as Metadata gives them, and the cluster's authorized
        operations when asked. v1 names the endpoint type asked about (KIP-919): a broker
        describes brokers only (a controller endpoint: MISMATCHED_ENDPOINT_TYPE); v2
        tells fenced brokers, which a ZooKeeper cluster does not have."""
        endpoint_type = body.get("endpoint_type", BROKER_ENDPOINTS)
        if endpoint_type != BROKER_ENDPOINTS:
            error = MismatchedEndpointTypeError if endpoint_type == CONTROLLER_ENDPOINTS \
                else UnsupportedEndpointTypeError
            return {"throttle_time_ms": 0, "error_code": error.errno,
                    "error_message": f"a broker describes brokers (endpoint type 1), "
                                     f"not endpoint type {endpoint_type}",
                    "endpoint_type": endpoint_type, "cluster_id": self.metadata.cluster_id,
                    "controller_id": -1, "brokers": [],
                    "cluster_authorized_operations": NOT_REQUESTED}
        live = self.metadata.brokers()
        reachable = _reachable(live, listener)
        return {
            "throttle_time_ms": 0, "error_code": 0, "error_message": None,
            "endpoint_type": BROKER_ENDPOINTS,
            "cluster_id": self.metadata.cluster_id,
            "controller_id": self.metadata.controller_id(),
            "brokers": [{"broker_id": b.broker_id, "host": b.host, "port": b.port,
                         "rack": b.rack, "is_fenced": False} for b in reachable],
            "cluster_authorized_operations": all_operations(ResourceType.CLUSTER)
            if body["include_cluster_authorized_operations"] else NOT_REQUESTED,
        }

    def _topic_metadata(self, name: str, allow_create: bool,
                        unreachable: set[int] = frozenset(), version: int = 0) -> dict:
        result = {"error_code": 0, "name": name, "is_internal": name in INTERNAL_TOPICS,
                  "partitions": [],
                  "topic_authorized_operations": NOT_REQUESTED}
        topic = self.metadata.topic(name)
        if topic is None:
            try:
                validate_topic_name(name)
            except KafkaError:
                result["error_code"] = INVALID_TOPIC
                return result
            if not allow_create:
                result["error_code"] = UNKNOWN_TOPIC_OR_PARTITION
                return result
            topic = self._auto_create(name)
            if topic is None:
                result["error_code"] = LEADER_NOT_AVAILABLE
                return result
        result["topic_id"] = topic.topic_id
        live_ids = {b.broker_id for b in self.metadata.brokers()}
        for index in sorted(topic.partitions):
            state = topic.partitions[index]
            leader = state.leader
            error = LEADER_NOT_AVAILABLE if leader == NO_LEADER else 0
            if leader in unreachable:  # live, but not on the client's listener
                leader = NO_LEADER
                error = LISTENER_NOT_FOUND if version >= 6 else LEADER_NOT_AVAILABLE
            result["partitions"].append({
                "error_code": error,
                "partition_index": index, "leader_id": leader,
                "leader_epoch": state.leader_epoch, "replica_nodes": list(state.replicas),
                "isr_nodes": list(state.isr),
                "offline_replicas": [r for r in state.replicas if r not in live_ids]})
        return result

    def _auto_create(self, name: str):
        try:
            topic = self.metadata.create_topic(name, self.config["num.partitions"],
                                               self.config["default.replication.factor"])
            log.info("auto-created topic %s with %d partitions", name, topic.num_partitions)
            return topic
        except TopicAlreadyExistsError:
            return self.metadata.topic(name)
        except KafkaError as error:
            log.warning("could not auto-create topic %s: %s", name, error)
            return None

    # -- CreateTopics / DeleteTopics ------------------------------------------------------

    def create_topics(self, body: dict, version: int) -> dict:
        results = [self._create_one(t, body["validate_only"]) for t in body["topics"]]
        return {"throttle_time_ms": 0, "topics": results}

    def _create_one(self, request: dict, validate_only: bool) -> dict:
        name = request["name"]
        partitions = request["num_partitions"]
        if partitions == -1:
            partitions = self.config["num.partitions"]
        replication = request["replication_factor"]
        if replication == -1:
            replication = self.config["default.replication.factor"]
        configs = {c["name"]: c["value"] for c in request["configs"]}
        result = {"name": name, "error_code": 0, "error_message": None,
                  "num_partitions": partitions, "replication_factor": replication,
                  "configs": []}
        assignment = None
        try:
            if request["assignments"]:
                if request["num_partitions"] != -1 or request["replication_factor"] != -1:
                    raise InvalidRequestError(
                        "both a partition count or replication factor and a replica "
                        "assignment were given; give one or the other")
                assignment = check_replica_assignment(
                    {a["partition_index"]: a["broker_ids"] for a in request["assignments"]},
                    (broker.broker_id for broker in self.metadata.brokers()))
                partitions, replication = len(assignment), len(assignment[0])
                result.update(num_partitions=partitions, replication_factor=replication)
            self._check_partition_count(partitions)
            try:
                self.logs.default_config.with_overrides(configs)
            except ConfigError as exc:
                raise InvalidConfigError(str(exc)) from None
            if validate_only:
                validate_topic_name(name)
                if self.metadata.topic(name) is not None:
                    raise TopicAlreadyExistsError(f"Topic {name!r} already exists.")
                if assignment is None:  # the replication factor the live brokers allow
                    assign_replicas(partitions, replication,
                                    [broker.broker_id for broker in self.metadata.brokers()])
            else:
                created = self.metadata.create_topic(name, partitions, replication, configs,
                                                     assignment=assignment)
                result["topic_id"] = created.topic_id
                log.info("created topic %s with %d partitions", name, partitions)
        except KafkaError as error:
            result.update(error_code=error.errno, error_message=str(error),
                          num_partitions=-1, replication_factor=-1)
        return result

    def _check_partition_count(self, partitions: int) -> None:
        """InvalidPartitionsError outside 1..max.partitions.per.topic (checked before any
        metadata is built, so a huge count costs nothing)."""
        limit = self.config["max.partitions.per.topic"]
        if not 1 <= partitions <= limit:
            raise InvalidPartitionsError(
                f"number of partitions must be in 1..{limit} (max.partitions.per.topic), "
                f"got {partitions}")

    def create_partitions(self, body: dict, version: int) -> dict:
        """CreatePartitions: grow topics, the new partitions placed by the controller's rule
        or by the replica assignment given for them."""
        results = []
        for request in body["topics"]:
            result = {"name": request["name"], "error_code": 0, "error_message": None}
            try:
                self._check_partition_count(request["count"])
                assignment = None
                if request["assignments"] or body["validate_only"]:
                    topic = self.metadata.topic(request["name"])
                    if topic is None:
                        raise UnknownTopicOrPartitionError(
                            f"topic {request['name']!r} does not exist")
                    check_partition_growth(request["name"], topic.num_partitions,
                                           request["count"])
                if request["assignments"]:
                    adding = request["count"] - topic.num_partitions
                    if len(request["assignments"]) != adding:
                        raise InvalidReplicaAssignmentError(
                            f"adding {adding} partition(s) but {len(request['assignments'])} "
                            "replica assignment(s) given")
                    factor = next((len(state.replicas) for state in topic.partitions.values()),
                                  None)
                    assignment = check_replica_assignment(
                        {topic.num_partitions + i: a["broker_ids"]
                         for i, a in enumerate(request["assignments"])},
                        (broker.broker_id for broker in self.metadata.brokers()),
                        first=topic.num_partitions, replication_factor=factor)
                if not body["validate_only"]:
                    self.metadata.add_partitions(request["name"], request["count"],
                                                 assignment=assignment)
            except KafkaError as error:
                result.update(error_code=error.errno, error_message=str(error))
            results.append(result)
        return {"throttle_time_ms": 0, "results": results}

    def delete_topics(self, body: dict, version: int) -> dict:
        names = list(body["topic_names"]) + [t["name"] for t in body.get("topics", [])
                                             if t.get("name")]
        results = []
        for name in names:
            result = {"name": name, "error_code": 0, "error_message": None}
            try:
                if not self.config["delete.topic.enable"]:
                    raise TopicDeletionDisabledError("delete.topic.enable is false")
                self.metadata.delete_topic(name)
                log.info("deleted topic %s", name)
            except KafkaError as error:
                result.update(error_code=error.errno, error_message=str(error))
            results.append(result)
        return {"throttle_time_ms": 0, "responses": results}
