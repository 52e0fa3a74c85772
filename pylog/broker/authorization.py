"""Authorization of every request, as Kafka's KafkaApis does it, before the handlers run.

``RequestAuthorization.check(api_key, version, body, session)`` returns a ``Verdict``:

* ``response`` -- the whole request is refused (or nothing authorized is left): answer
  this body without calling the handler;
* otherwise ``body`` -- the request with its unauthorized parts (partitions, topics,
  groups, resources) taken out, for the handler -- and ``finish``, which puts the refused
  parts back into the handler's response with their error codes (and, where Kafka hides
  things, takes out what the principal may not see: Metadata of all topics, ListGroups,
  OffsetFetch of all partitions);
* ``close`` -- acks=0 Produce with refused partitions: close the connection (Kafka's way
  of telling a client that reads no answers).

The checks (resource: operation), per API:

* Produce -- TransactionalId Write for a transactional producer; Topic Write per topic.
* Fetch -- Topic Read per topic; a follower's (replica_id >= 0) Cluster ClusterAction.
* ListOffsets -- Topic Describe. OffsetForLeaderEpoch -- Topic Describe; a follower's
  Cluster ClusterAction. DescribeProducers -- Topic Read.
* Metadata -- Topic Describe (all topics: the others are left out; named ones:
  TOPIC_AUTHORIZATION_FAILED); auto-creation needs Cluster Create or Topic Create. Asked
  for authorized operations (KIP-430), each topic's and the cluster's (none without
  Cluster Describe) are those the authorizer allows. DescribeCluster -- none; its
  authorized operations as Metadata's. DescribeTopicPartitions -- Topic Describe, as
  Metadata (each topic's authorized operations always given).
* Group APIs -- in :mod:`pylog.broker.authorization_groups`.
* Transaction APIs -- in :mod:`pylog.transactions.authorization`.
* CreateTopics -- Cluster Create or Topic Create. DeleteTopics -- Topic Delete.
  CreatePartitions -- Topic Alter.
* DescribeConfigs / AlterConfigs / IncrementalAlterConfigs -- DescribeConfigs /
  AlterConfigs on the topic, the group for group resources, or the cluster for broker
  resources.
* WriteTxnMarkers -- Cluster ClusterAction (brokers only).
* InitProducerId -- TransactionalId Write; without one Cluster IdempotentWrite or Write
  on any topic (KIP-679).
* DescribeAcls, DescribeUserScramCredentials -- Cluster Describe; CreateAcls, DeleteAcls,
  AlterUserScramCredentials, ElectLeaders, AlterPartitionReassignments -- Cluster Alter;
  ListPartitionReassignments, DescribeLogDirs -- Cluster Describe.
* ApiVersions, SaslHandshake, SaslAuthenticate -- none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from pylog.broker.admin import DESCRIBABLE
from pylog.broker.config import BrokerConfig
from pylog.cluster.metadata import ClusterMetadata, names_by_id
from pylog.errors import (
    ClusterAuthorizationFailedError, GroupAuthorizationFailedError,
    TopicAuthorizationFailedError, TransactionalIdAuthorizationFailedError)
from pylog.protocol import ApiKey
from pylog.protocol.configs import ConfigResourceType
from pylog.security.acls import CLUSTER_NAME, AclOperation as Op, ResourceType
from pylog.security.authorizer import AclAuthorizer
from pylog.security.operations import authorized_operations

TOPIC_AUTHORIZATION_FAILED = TopicAuthorizationFailedError.errno
GROUP_AUTHORIZATION_FAILED = GroupAuthorizationFailedError.errno
CLUSTER_AUTHORIZATION_FAILED = ClusterAuthorizationFailedError.errno
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = TransactionalIdAuthorizationFailedError.errno
DENIED = "Authorization failed."


@dataclass
class Verdict:
    body: dict | None = None
    finish: Callable[[dict], dict] | None = None
    response: dict | None = None
    close: str | None = None


class Access:
    """One request's questions to the authorizer, each asked once."""

    def __init__(self, authorizer: AclAuthorizer, session) -> None:
        self.authorizer = authorizer
        self.session = session
        self._answers: dict[tuple, bool] = {}

    def __call__(self, operation: Op, resource_type: ResourceType, name: str) -> bool:
        key = (operation, resource_type, name)
        if key not in self._answers:
            self._answers[key] = self.authorizer.authorize(self.session, operation,
                                                           resource_type, name)
        return self._answers[key]

    def topic(self, operation: Op, name: str) -> bool:
        return self(operation, ResourceType.TOPIC, name)

    def group(self, operation: Op, name: str) -> bool:
        return self(operation, ResourceType.GROUP, name)

    def cluster(self, operation: Op) -> bool:
        return self(operation, ResourceType.CLUSTER, CLUSTER_NAME)


def split_topics(topics: list[dict], allowed: Callable[[str], bool], name_key: str = "name"
                 ) -> tuple[list[dict], list[dict]]:
    """(the topics ``allowed`` by name, the others), each in request order."""
    kept, refused = [], []
    for topic in topics:
        (kept if allowed(topic[name_key]) else refused).append(topic)
    return kept, refused


def _with_topic_operations(response: dict, access: "Access") -> dict:
    """``response`` with each described topic's authorized operations (KIP-430) those the
    authorizer allows this principal (topics answered with an error are left as they are)."""
    return dict(response, topics=[
        dict(t, topic_authorized_operations=authorized_operations(
            lambda op, name=t["name"]: access.topic(op, name), ResourceType.TOPIC))
        if t["error_code"] == 0 and t["name"] else t
        for t in response["topics"]])


def _refused_topic(name: str) -> dict:
    return {"error_code": TOPIC_AUTHORIZATION_FAILED, "name": name, "is_internal": False,
            "partitions": []}


class RequestAuthorization:
    """The checks of every API over one ``AclAuthorizer`` (see the module docstring)."""

    def __init__(self, authorizer: AclAuthorizer, metadata: ClusterMetadata,
                 config: BrokerConfig) -> None:
        from pylog.broker.authorization_groups import GROUP_CHECKS
        from pylog.transactions.authorization import TRANSACTION_CHECKS

        self.authorizer = authorizer
        self.metadata = metadata
        self.config = config
        self._checks: dict[int, Callable] = {
            ApiKey.PRODUCE: self._produce, ApiKey.FETCH: self._fetch,
            ApiKey.LIST_OFFSETS: self._list_offsets, ApiKey.METADATA: self._metadata,
            ApiKey.DESCRIBE_CLUSTER: self._describe_cluster,
            ApiKey.DESCRIBE_TOPIC_PARTITIONS: self._describe_topic_partitions,
            ApiKey.ELECT_LEADERS: self._elect_leaders,
            ApiKey.ALTER_PARTITION_REASSIGNMENTS: self._alter_reassignments,
            ApiKey.LIST_PARTITION_REASSIGNMENTS: self._list_reassignments,
            ApiKey.DESCRIBE_LOG_DIRS: self._describe_log_dirs,
            ApiKey.DESCRIBE_PRODUCERS: self._describe_producers,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: self._offset_for_leader_epoch,
            ApiKey.CREATE_TOPICS: self._create_topics, ApiKey.DELETE_TOPICS: self._delete_topics,
            ApiKey.CREATE_PARTITIONS: self._create_partitions,
            ApiKey.DELETE_RECORDS: self._delete_records,
            ApiKey.DESCRIBE_CONFIGS: self._describe_configs,
            ApiKey.ALTER_CONFIGS: self._alter_configs,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self._alter_configs,
            ApiKey.INIT_PRODUCER_ID: self._init_producer_id,
            ApiKey.WRITE_TXN_MARKERS: self._write_txn_markers,
            ApiKey.DESCRIBE_ACLS: self._describe_acls, ApiKey.CREATE_ACLS: self._create_acls,
            ApiKey.DELETE_ACLS: self._delete_acls,
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: self._describe_scram,
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: self._alter_scram,
            **GROUP_CHECKS,
            **TRANSACTION_CHECKS,
        }

    def check(self, api_key: int, version: int, body: dict, session) -> Verdict:
        check = self._checks.get(api_key)
        if check is None:  # ApiVersions and the SASL exchange need no permission
            return Verdict(body)
        return check(body, version, Access(self.authorizer, session))

    def _write_txn_markers(self, body: dict, version: int, access: Access) -> Verdict:
        if access.cluster(Op.CLUSTER_ACTION):
            return Verdict(body)
        return Verdict(response={"markers": [{"producer_id": m["producer_id"], "topics": [
            {"name": t["name"], "partitions": [
                {"partition_index": i, "error_code": CLUSTER_AUTHORIZATION_FAILED}
                for i in t["partition_indexes"]]} for t in m["topics"]]}
            for m in body["markers"]]})

    # -- partition data ------------------------------------------------------------------

    def _produce(self, body: dict, version: int, access: Access) -> Verdict:
        if body["transactional_id"] is not None and not access(
                Op.WRITE, ResourceType.TRANSACTIONAL_ID, body["transactional_id"]):
            kept, refused = [], body["topic_data"]
            code = TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        else:
            kept, refused = split_topics(body["topic_data"], lambda t: access.topic(Op.WRITE, t))
            code = TOPIC_AUTHORIZATION_FAILED
        if not refused:
            return Verdict(body)
        if body["acks"] == 0:
            return Verdict(close="acks=0 Produce to topics the principal may not write: "
                                 + ", ".join(sorted({t["name"] for t in refused})))
        errors = [{"name": t["name"], "partition_responses": [
            {"index": p["index"], "error_code": code, "base_offset": -1,
             "error_message": DENIED} for p in t["partition_data"]]} for t in refused]

        def finish(response: dict) -> dict:
            return dict(response, responses=list(response["responses"]) + errors)

        if not kept:
            return Verdict(response=finish({"throttle_time_ms": 0, "responses": []}))
        return Verdict(dict(body, topic_data=kept), finish)

    def _fetch(self, body: dict, version: int, access: Access) -> Verdict:
        if body.get("replica_id", -1) >= 0:
            allowed = access.cluster(Op.CLUSTER_ACTION)
            kept, refused = (body["topics"], []) if allowed else ([], body["topics"])
        else:
            kept, refused = split_topics(body["topics"], lambda t: access.topic(Op.READ, t),
                                         "topic")
        if not refused:
            return Verdict(body)
        errors = [{"topic": t["topic"], "partitions": [
            {"partition_index": p["partition"], "error_code": TOPIC_AUTHORIZATION_FAILED,
             "high_watermark": -1, "records": b""} for p in t["partitions"]]}
            for t in refused]

        def finish(response: dict) -> dict:
            return dict(response, responses=list(response["responses"]) + errors)

        if not kept:
            return Verdict(response=finish({"throttle_time_ms": 0, "error_code": 0,
                                            "session_id": 0, "responses": []}))
        return Verdict(dict(body, topics=kept), finish)

    def _list_offsets(self, body: dict, version: int, access: Access) -> Verdict:
        kept, refused = split_topics(body["topics"], lambda t: access.topic(Op.DESCRIBE, t))
        errors = [{"name": t["name"], "partitions": [
            {"partition_index": p["partition_index"], "error_code": TOPIC_AUTHORIZATION_FAILED}
            for p in t["partitions"]]} for t in refused]
        return pruned(body, "topics", kept, "topics", errors)

    def _offset_for_leader_epoch(self, body: dict, version: int, access: Access) -> Verdict:
        if body.get("replica_id", -2) >= 0:
            allowed = access.cluster(Op.CLUSTER_ACTION)
            kept, refused = (body["topics"], []) if allowed else ([], body["topics"])
            code = CLUSTER_AUTHORIZATION_FAILED
        else:
            kept, refused = split_topics(body["topics"], lambda t: access.topic(Op.DESCRIBE, t),
                                         "topic")
            code = TOPIC_AUTHORIZATION_FAILED
        errors = [{"topic": t["topic"], "partitions": [
            {"partition": p["partition"], "error_code": code} for p in t["partitions"]]}
            for t in refused]
        return pruned(body, "topics", kept, "topics", errors)

    # -- Metadata -----------------------------------------------------------------------------

    def _metadata(self, body: dict, version: int, access: Access) -> Verdict:
        verdict = self._metadata_topics(body, version, access)
        topic_ops = version >= 8 and body["include_topic_authorized_operations"]
        cluster_ops = 8 <= version <= 10 and body["include_cluster_authorized_operations"]
        if not (topic_ops or cluster_ops):
            return verdict
        earlier = verdict.finish

        def operations(response: dict) -> dict:
            if earlier is not None:
                response = earlier(response)
            if topic_ops:
                response = _with_topic_operations(response, access)
            if cluster_ops:
                response = dict(response,
                                cluster_authorized_operations=self._cluster_operations(access))
            return response

        return Verdict(verdict.body, operations)

    @staticmethod
    def _cluster_operations(access: Access) -> int:
        """The cluster's authorized operations: none without Cluster Describe (Kafka)."""
        if not access.cluster(Op.DESCRIBE):
            return 0
        return authorized_operations(access.cluster, ResourceType.CLUSTER)

    def _describe_topic_partitions(self, body: dict, version: int, access: Access) -> Verdict:
        """Every topic: the handler pages over only those allowed, so a hidden one takes no
        room and never shows in a cursor. Named topics: those refused answer
        TOPIC_AUTHORIZATION_FAILED in the page that reaches their place in name order (a
        cursor at a refused topic moves on to the next allowed one)."""
        def with_operations(response: dict) -> dict:
            return _with_topic_operations(response, access)

        if not body["topics"]:  # the handler pages over only the topics this one may see
            return Verdict(dict(body, **{DESCRIBABLE: lambda name: access.topic(Op.DESCRIBE, name)}),
                           with_operations)
        cursor = body["cursor"]
        if cursor is not None and cursor["topic_name"] not in {t["name"] for t in body["topics"]}:
            return Verdict(body)  # INVALID_REQUEST for every topic named, nothing described
        kept, refused = split_topics(body["topics"], lambda name: access.topic(Op.DESCRIBE, name))
        if not refused:
            return Verdict(body, with_operations)
        start = None if cursor is None else cursor["topic_name"]
        refused_names = sorted({t["name"] for t in refused})

        def errors(following: dict | None) -> list[dict]:
            return [_refused_topic(name) for name in refused_names
                    if (start is None or name >= start)
                    and (following is None or name < following["topic_name"])]

        if start in refused_names:
            allowed_after = sorted(t["name"] for t in kept if t["name"] > start)
            cursor = {"topic_name": allowed_after[0], "partition_index": 0} \
                if allowed_after else None
        if not kept or (start in refused_names and cursor is None):
            return Verdict(response={"throttle_time_ms": 0, "next_cursor": None,
                                     "topics": errors(None)})

        def finish(response: dict) -> dict:
            response = _with_topic_operations(response, access)
            return dict(response, topics=sorted(response["topics"] + errors(response["next_cursor"]),
                                                key=lambda t: t["name"]))

        return Verdict(dict(body, topics=kept, cursor=cursor), finish)

    def _describe_cluster(self, body: dict, version: int, access: Access) -> Verdict:
        if not body["include_cluster_authorized_operations"]:
            return Verdict(body)
        return Verdict(body, lambda response: dict(
            response, cluster_authorized_operations=self._cluster_operations(access)))

    def _elect_leaders(self, body: dict, version: int, access: Access) -> Verdict:
        if access.cluster(Op.ALTER):
            return Verdict(body)
        return Verdict(response={
            "throttle_time_ms": 0, "error_code": CLUSTER_AUTHORIZATION_FAILED,
            "replica_election_results": [
                {"topic": t["topic"], "partition_result": [
                    {"partition_id": p, "error_code": CLUSTER_AUTHORIZATION_FAILED,
                     "error_message": DENIED} for p in t["partition_id"]]}
                for t in body["topic_partitions"] or []]})

    def _alter_reassignments(self, body: dict, version: int, access: Access) -> Verdict:
        if access.cluster(Op.ALTER):
            return Verdict(body)
        return Verdict(response={
            "throttle_time_ms": 0, "error_code": CLUSTER_AUTHORIZATION_FAILED,
            "error_message": DENIED, "responses": []})

    def _list_reassignments(self, body: dict, version: int, access: Access) -> Verdict:
        if access.cluster(Op.DESCRIBE):
            return Verdict(body)
        return Verdict(response={
            "throttle_time_ms": 0, "error_code": CLUSTER_AUTHORIZATION_FAILED,
            "error_message": DENIED, "topics": []})

    def _describe_log_dirs(self, body: dict, version: int, access: Access) -> Verdict:
        if access.cluster(Op.DESCRIBE):
            return Verdict(body)
        return Verdict(response={"throttle_time_ms": 0,
                                 "error_code": CLUSTER_AUTHORIZATION_FAILED, "results": []})

    def _describe_producers(self, body: dict, version: int, access: Access) -> Verdict:
        kept, refused = split_topics(body["topics"], lambda name: access.topic(Op.READ, name))
        errors = [{"name": t["name"], "partitions": [
            {"partition_index": p, "error_code": TOPIC_AUTHORIZATION_FAILED,
             "error_message": DENIED, "active_producers": []}
            for p in t["partition_indexes"]]} for t in refused]
        return pruned(body, "topics", kept, "topics", errors)

    def _metadata_topics(self, body: dict, version: int, access: Access) -> Verdict:
        requested = body["topics"]
        if requested is None or (version == 0 and not requested):
            def hide(response: dict) -> dict:
                return dict(response, topics=[
                    t for t in response["topics"]
                    if t["name"] is None or access.topic(Op.DESCRIBE, t["name"])])
            return Verdict(body, hide)
        may_create = (self.config["auto.create.topics.enable"]
                      and (version < 4 or body["allow_auto_topic_creation"]))
        kept, refused, refused_ids = [], [], []
        by_id = None
        for topic in requested:
            name = topic["name"]
            if name is None:  # asked for by id: checked as the topic it names
                if by_id is None:
                    by_id = names_by_id(self.metadata.topics())
                named = by_id.get(topic["topic_id"])
                if named is not None and not access.topic(Op.DESCRIBE, named):
                    refused_ids.append(topic["topic_id"])
                else:
                    kept.append(topic)
            elif not access.topic(Op.DESCRIBE, name):
                refused.append(name)
            elif (may_create and self.metadata.topic(name) is None
                  and not (access.cluster(Op.CREATE) or access.topic(Op.CREATE, name))):
                refused.append(name)
            else:
                kept.append(topic)
        errors = [{"error_code": TOPIC_AUTHORIZATION_FAILED, "name": name, "is_internal": False,
                   "partitions": []} for name in refused]
        errors += [{"error_code": TOPIC_AUTHORIZATION_FAILED, "topic_id": topic_id,
                    "name": None if version >= 12 else "", "is_internal": False,
                    "partitions": []} for topic_id in refused_ids]
        if not errors:
            return Verdict(body)

        def finish(response: dict) -> dict:
            return dict(response, topics=list(response["topics"]) + errors)

        return Verdict(dict(body, topics=kept), finish)

    # -- topics ---------------------------------------------------------------------------------

    def _create_topics(self, body: dict, version: int, access: Access) -> Verdict:
        if access.cluster(Op.CREATE):
            return Verdict(body)
        kept, refused = split_topics(body["topics"], lambda t: access.topic(Op.CREATE, t))
        errors = [{"name": t["name"], "error_code": TOPIC_AUTHORIZATION_FAILED,
                   "error_message": DENIED, "num_partitions": -1, "replication_factor": -1,
                   "configs": []} for t in refused]
        return pruned(body, "topics", kept, "topics", errors)

    def _delete_topics(self, body: dict, version: int, access: Access) -> Verdict:
        names = [n for n in body["topic_names"] if not access.topic(Op.DELETE, n)]
        named = [t for t in body.get("topics", [])
                 if t.get("name") and not access.topic(Op.DELETE, t["name"])]
        if not names and not named:
            return Verdict(body)
        errors = [{"name": n, "error_code": TOPIC_AUTHORIZATION_FAILED, "error_message": DENIED}
                  for n in names]
        errors += [{"name": t["name"], "topic_id": t["topic_id"],
                    "error_code": TOPIC_AUTHORIZATION_FAILED, "error_message": DENIED}
                   for t in named]
        pruned = dict(body, topic_names=[n for n in body["topic_names"] if n not in names],
                      topics=[t for t in body.get("topics", []) if t not in named])

        def finish(response: dict) -> dict:
            return dict(response, responses=list(response["responses"]) + errors)

        return Verdict(pruned, finish)

    def _create_partitions(self, body: dict, version: int, access: Access) -> Verdict:
        kept, refused = split_topics(body["topics"], lambda t: access.topic(Op.ALTER, t))
        errors = [{"name": t["name"], "error_code": TOPIC_AUTHORIZATION_FAILED,
                   "error_message": DENIED} for t in refused]
        return pruned(body, "topics", kept, "results", errors)

    def _delete_records(self, body: dict, version: int, access: Access) -> Verdict:
        kept, refused = split_topics(body["topics"], lambda t: access.topic(Op.DELETE, t))
        errors = [{"name": t["name"], "partitions": [
            {"partition_index": p["partition_index"], "low_watermark": -1,
             "error_code": TOPIC_AUTHORIZATION_FAILED} for p in t["partitions"]]}
            for t in refused]
        return pruned(body, "topics", kept, "topics", errors)

    # -- configs ----------------------------------------------------------------------------

    def _config_resources(self, body: dict, operation: Op, access: Access,
                          entry: Callable[[dict, int], dict]) -> tuple[list, list]:
        kept, errors = [], []
        for resource in body["resources"]:
            if resource["resource_type"] == ConfigResourceType.TOPIC:
                allowed = access.topic(operation, resource["resource_name"])
                code = TOPIC_AUTHORIZATION_FAILED
            elif resource["resource_type"] == ConfigResourceType.GROUP:
                allowed = access.group(operation, resource["resource_name"])
                code = GROUP_AUTHORIZATION_FAILED
            else:
                allowed = access.cluster(operation)
                code = CLUSTER_AUTHORIZATION_FAILED
            if allowed:
                kept.append(resource)
            else:
                errors.append(entry(resource, code))
        return kept, errors

    def _describe_configs(self, body: dict, version: int, access: Access) -> Verdict:
        kept, errors = self._config_resources(body, Op.DESCRIBE_CONFIGS, access, lambda r, c: {
            "error_code": c, "error_message": DENIED, "resource_type": r["resource_type"],
            "resource_name": r["resource_name"], "configs": []})
        return pruned(body, "resources", kept, "results", errors)

    def _alter_configs(self, body: dict, version: int, access: Access) -> Verdict:
        kept, errors = self._config_resources(body, Op.ALTER_CONFIGS, access, lambda r, c: {
            "error_code": c, "error_message": DENIED, "resource_type": r["resource_type"],
            "resource_name": r["resource_name"]})
        return pruned(body, "resources", kept, "responses", errors)

    # -- producers, ACLs, users --------------------------------------------------------------

    def _init_producer_id(self, body: dict, version: int, access: Access) -> Verdict:
        transactional_id = body["transactional_id"]
        if transactional_id is not None:
            allowed = access(Op.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)
            code = TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        else:
            allowed = access.cluster(Op.IDEMPOTENT_WRITE) or self.authorizer.authorize_any(
                access.session, Op.WRITE, ResourceType.TOPIC)
            code = CLUSTER_AUTHORIZATION_FAILED
        if allowed:
            return Verdict(body)
        return Verdict(response={"throttle_time_ms": 0, "error_code": code,
                                 "producer_id": -1, "producer_epoch": -1})

    def _describe_acls(self, body: dict, version: int, access: Access) -> Verdict:
        if access.cluster(Op.DESCRIBE):
            return Verdict(body)
        return Verdict(response={"throttle_time_ms": 0, "error_code": CLUSTER_AUTHORIZATION_FAILED,
                                 "error_message": DENIED, "resources": []})

    def _create_acls(self, body: dict, version: int, access: Access) -> Verdict:
        if access.cluster(Op.ALTER):
            return Verdict(body)
        return Verdict(response={"throttle_time_ms": 0, "results": [
            {"error_code": CLUSTER_AUTHORIZATION_FAILED, "error_message": DENIED}
            for _ in body["creations"]]})

    def _delete_acls(self, body: dict, version: int, access: Access) -> Verdict:
        if access.cluster(Op.ALTER):
            return Verdict(body)
        return Verdict(response={"throttle_time_ms": 0, "filter_results": [
            {"error_code": CLUSTER_AUTHORIZATION_FAILED, "error_message": DENIED,
             "matching_acls": []} for _ in body["filters"]]})

    def _describe_scram(self, body: dict, version: int, access: Access) -> Verdict:
        if access.cluster(Op.DESCRIBE):
            return Verdict(body)
        return Verdict(response={"throttle_time_ms": 0, "error_code": CLUSTER_AUTHORIZATION_FAILED,
                                 "error_message": DENIED, "results": []})

    def _alter_scram(self, body: dict, version: int, access: Access) -> Verdict:
        if access.cluster(Op.ALTER):
            return Verdict(body)
        users = dict.fromkeys(u["name"] for part in ("deletions", "upsertions")
                              for u in body.get(part, []))
        return Verdict(response={"throttle_time_ms": 0, "results": [
            {"user": user, "error_code": CLUSTER_AUTHORIZATION_FAILED, "error_message": DENIED}
            for user in users]})


def pruned(body: dict, request_key: str, kept: list, response_key: str, errors: list
            ) -> Verdict:
    """The request with only ``kept`` under ``request_key``, and a finish that appends
    ``errors`` to the response's ``response_key``."""
    if not errors:
        return Verdict(body)

    def finish(response: dict) -> dict:
        return dict(response, **{response_key: list(response[response_key]) + errors})

    return Verdict(dict(body, **{request_key: kept}), finish)
