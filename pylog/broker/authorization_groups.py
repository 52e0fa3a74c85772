"""Authorization of the group APIs (see :mod:`pylog.broker.authorization`).

* FindCoordinator -- Group Describe for group keys, TransactionalId Describe for
  transaction keys.
* JoinGroup, SyncGroup, Heartbeat, LeaveGroup -- Group Read, else the whole request gets
  GROUP_AUTHORIZATION_FAILED.
* OffsetCommit -- Group Read, then Topic Read per topic.
* OffsetFetch -- Group Describe, then Topic Describe per topic; of "all partitions", only
  the topics the principal may describe are answered.
* DescribeGroups -- Group Describe per group. ListGroups -- Cluster Describe, else only
  the groups the principal may describe. DeleteGroups -- Group Delete per group.
* OffsetDelete -- Group Delete, then Topic Read per topic.
"""

from __future__ import annotations

from pylog.broker.authorization import (
    DENIED, TOPIC_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED, Access, Verdict,
    pruned, split_topics)
from pylog.errors import GroupAuthorizationFailedError
from pylog.protocol import ApiKey
from pylog.security.acls import AclOperation as Op, ResourceType
from pylog.security.operations import authorized_operations

GROUP_AUTHORIZATION_FAILED = GroupAuthorizationFailedError.errno
GROUP_KEY = 0


def _find_coordinator(body: dict, version: int, access: Access) -> Verdict:
    def allowed(key: str) -> bool:
        if body["key_type"] == GROUP_KEY:
            return access.group(Op.DESCRIBE, key)
        return access(Op.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key)

    code = (GROUP_AUTHORIZATION_FAILED if body["key_type"] == GROUP_KEY
            else TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if version < 4:
        if allowed(body["key"]):
            return Verdict(body)
        return Verdict(response={"throttle_time_ms": 0, "error_code": code,
                                 "error_message": DENIED, "node_id": -1, "host": "",
                                 "port": -1})
    kept = [k for k in body["coordinator_keys"] if allowed(k)]
    errors = [{"key": k, "node_id": -1, "host": "", "port": -1, "error_code": code,
               "error_message": DENIED} for k in body["coordinator_keys"] if not allowed(k)]
    return pruned(body, "coordinator_keys", kept, "coordinators", errors)


def _membership(refusal: dict):
    """JoinGroup, SyncGroup, Heartbeat, LeaveGroup: Group Read or ``refusal``."""

    def check(body: dict, version: int, access: Access) -> Verdict:
        if access.group(Op.READ, body["group_id"]):
            return Verdict(body)
        response = dict(refusal, throttle_time_ms=0, error_code=GROUP_AUTHORIZATION_FAILED)
        if "protocol_name" in refusal and version < 7:
            response["protocol_name"] = ""
        return Verdict(response=response)

    return check


def _offset_commit(body: dict, version: int, access: Access) -> Verdict:
    if not access.group(Op.READ, body["group_id"]):
        return Verdict(response={"throttle_time_ms": 0, "topics": [
            {"name": t["name"], "partitions": [
                {"partition_index": p["partition_index"], "error_code": GROUP_AUTHORIZATION_FAILED}
                for p in t["partitions"]]} for t in body["topics"]]})
    kept, refused = split_topics(body["topics"], lambda t: access.topic(Op.READ, t))
    errors = [{"name": t["name"], "partitions": [
        {"partition_index": p["partition_index"], "error_code": TOPIC_AUTHORIZATION_FAILED}
        for p in t["partitions"]]} for t in refused]
    if errors and not kept:
        return Verdict(response={"throttle_time_ms": 0, "topics": errors})
    return pruned(body, "topics", kept, "topics", errors)


def _offset_fetch_group(group_id: str, topics, access: Access, version: int):
    """(the group's topics to ask for, a finish for its answer), or (None, the group's
    refusal) when the principal may not describe the group."""
    if not access.group(Op.DESCRIBE, group_id):
        partitions = [] if topics is None else [
            {"name": t["name"], "partitions": [
                {"partition_index": p, "committed_offset": -1, "metadata": "",
                 "error_code": GROUP_AUTHORIZATION_FAILED} for p in t["partition_indexes"]]}
            for t in topics]
        return None, {"group_id": group_id, "error_code": GROUP_AUTHORIZATION_FAILED,
                      "topics": partitions}
    if topics is None:
        def hide(answer: dict) -> dict:
            return dict(answer, topics=[t for t in answer["topics"]
                                        if access.topic(Op.DESCRIBE, t["name"])])
        return topics, hide
    kept, refused = split_topics(topics, lambda t: access.topic(Op.DESCRIBE, t))
    errors = [{"name": t["name"], "partitions": [
        {"partition_index": p, "committed_offset": -1, "metadata": "",
         "error_code": TOPIC_AUTHORIZATION_FAILED} for p in t["partition_indexes"]]}
        for t in refused]

    def add(answer: dict) -> dict:
        return dict(answer, topics=list(answer["topics"]) + errors)

    return kept, add


def _offset_fetch(body: dict, version: int, access: Access) -> Verdict:
    if version < 8:
        topics, finish = _offset_fetch_group(body["group_id"], body["topics"], access, version)
        if isinstance(finish, dict):
            refusal = dict(finish, throttle_time_ms=0)
            del refusal["group_id"]
            if version < 2:
                refusal.pop("error_code")
            return Verdict(response=refusal)
        return Verdict(dict(body, topics=topics), finish)
    kept, refusals, finishes = [], [], {}
    for group in body["groups"]:
        topics, finish = _offset_fetch_group(group["group_id"], group["topics"], access,
                                             version)
        if isinstance(finish, dict):
            refusals.append(finish)
        else:
            kept.append(dict(group, topics=topics))
            finishes[group["group_id"]] = finish

    def finish_all(response: dict) -> dict:
        groups = [finishes[g["group_id"]](g) if g["group_id"] in finishes else g
                  for g in response["groups"]]
        return dict(response, groups=groups + refusals)

    if not kept:
        return Verdict(response=finish_all({"throttle_time_ms": 0, "groups": []}))
    return Verdict(dict(body, groups=kept), finish_all)


def _describe_groups(body: dict, version: int, access: Access) -> Verdict:
    kept = [g for g in body["groups"] if access.group(Op.DESCRIBE, g)]
    errors = [{"error_code": GROUP_AUTHORIZATION_FAILED, "group_id": g, "group_state": "",
               "protocol_type": "", "protocol_data": "", "members": []}
              for g in body["groups"] if not access.group(Op.DESCRIBE, g)]
    verdict = pruned(body, "groups", kept, "groups", errors)
    if version < 3 or not body["include_authorized_operations"]:
        return verdict
    earlier = verdict.finish

    def operations(response: dict) -> dict:
        if earlier is not None:
            response = earlier(response)
        return dict(response, groups=[
            dict(g, authorized_operations=authorized_operations(
                lambda op, name=g["group_id"]: access.group(op, name), ResourceType.GROUP))
            if g["error_code"] == 0 else g for g in response["groups"]])

    return Verdict(verdict.body, operations)


def _list_groups(body: dict, version: int, access: Access) -> Verdict:
    if access.cluster(Op.DESCRIBE):
        return Verdict(body)

    def hide(response: dict) -> dict:
        return dict(response, groups=[g for g in response["groups"]
                                      if access.group(Op.DESCRIBE, g["group_id"])])

    return Verdict(body, hide)


def _delete_groups(body: dict, version: int, access: Access) -> Verdict:
    kept = [g for g in body["groups_names"] if access.group(Op.DELETE, g)]
    errors = [{"group_id": g, "error_code": GROUP_AUTHORIZATION_FAILED}
              for g in body["groups_names"] if not access.group(Op.DELETE, g)]
    return pruned(body, "groups_names", kept, "results", errors)


def _offset_delete(body: dict, version: int, access: Access) -> Verdict:
    if not access.group(Op.DELETE, body["group_id"]):
        return Verdict(response={"error_code": GROUP_AUTHORIZATION_FAILED,
                                 "throttle_time_ms": 0, "topics": []})
    kept, refused = split_topics(body["topics"], lambda t: access.topic(Op.READ, t))
    errors = [{"name": t["name"], "partitions": [
        {"partition_index": p["partition_index"], "error_code": TOPIC_AUTHORIZATION_FAILED}
        for p in t["partitions"]]} for t in refused]
    if errors and not kept:
        return Verdict(response={"error_code": 0, "throttle_time_ms": 0, "topics": errors})
    return pruned(body, "topics", kept, "topics", errors)


GROUP_CHECKS = {
    ApiKey.FIND_COORDINATOR: _find_coordinator,
    ApiKey.JOIN_GROUP: _membership({"generation_id": -1, "protocol_name": None, "leader": "",
                                    "member_id": "", "members": []}),
    ApiKey.SYNC_GROUP: _membership({"assignment": b""}),
    ApiKey.HEARTBEAT: _membership({}),
    ApiKey.LEAVE_GROUP: _membership({"members": []}),
    ApiKey.OFFSET_COMMIT: _offset_commit,
    ApiKey.OFFSET_FETCH: _offset_fetch,
    ApiKey.DESCRIBE_GROUPS: _describe_groups,
    ApiKey.LIST_GROUPS: _list_groups,
    ApiKey.DELETE_GROUPS: _delete_groups,
    ApiKey.OFFSET_DELETE: _offset_delete,
}
