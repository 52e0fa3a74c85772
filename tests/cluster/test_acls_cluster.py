"""ACLs in a cluster: created on one broker, kept in ZooKeeper with Kafka's layout, and
enforced by the other broker once its watch has seen the change notification.

Two broker processes with ``allow.everyone.if.no.acl.found=true``: a topic without ACLs
is open to ``User:ANONYMOUS`` (every PLAINTEXT client), one whose ACLs name only another
principal is not.
"""

from __future__ import annotations

import json

from pylog.client.connection import BrokerConnection
from pylog.protocol import ApiKey
from tests.cluster.cluster_helpers import LocalCluster
from tests.cluster.conftest import wait_until

AUTHORIZER = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
              "allow.everyone.if.no.acl.found": "true", "auto.create.topics.enable": "false",
              "auto.leader.rebalance.enable": "false"}
TOPIC_AUTHORIZATION_FAILED = 29


def request(port: int, api_key: int, body: dict) -> dict:
    connection = BrokerConnection("127.0.0.1", port, timeout_s=15)
    try:
        return connection.request(api_key, body)
    finally:
        connection.close()


def topic_error(port: int, topic: str) -> int:
    response = request(port, ApiKey.METADATA, {"topics": [{"name": topic}],
                                               "allow_auto_topic_creation": False})
    return response["topics"][0]["error_code"]


def acl(name: str, pattern_type: int) -> dict:
    """Alice may Read the topic ``name`` (3: literal, 4: prefixed)."""
    return {"resource_type": 2, "resource_name": name, "resource_pattern_type": pattern_type,
            "principal": "User:alice", "host": "*", "operation": 3, "permission_type": 3}


def test_acls_made_on_one_broker_apply_on_the_other(tmp_path, zk_connect, zk_client):
    cluster = LocalCluster(tmp_path, zk_connect, broker_ids=(1, 2), extra=AUTHORIZER).start()
    try:
        one, two = cluster.ports[1], cluster.ports[2]
        created = request(one, ApiKey.CREATE_TOPICS, {"topics": [
            {"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [],
             "configs": []} for name in ("zk-hidden", "zk-logs.a", "zk-open")],
            "timeout_ms": 15000, "validate_only": False})
        assert [t["error_code"] for t in created["topics"]] == [0, 0, 0]
        assert topic_error(two, "zk-hidden") == 0
        answer = request(one, ApiKey.CREATE_ACLS, {"creations": [acl("zk-hidden", 3),
                                                                 acl("zk-logs.", 4)]})
        assert [r["error_code"] for r in answer["results"]] == [0, 0]

        data, _ = zk_client.get("/kafka-acl/Topic/zk-hidden")
        assert json.loads(data) == {"version": 1, "acls": [
            {"principal": "User:alice", "permissionType": "Allow", "operation": "Read",
             "host": "*"}]}
        assert zk_client.exists("/kafka-acl-extended/prefixed/Topic/zk-logs.")
        assert zk_client.get_children("/kafka-acl-changes")
        assert zk_client.get_children("/kafka-acl-extended-changes")

        for port in (two, one):
            wait_until(lambda p=port: topic_error(p, "zk-hidden") == TOPIC_AUTHORIZATION_FAILED,
                       message=f"the ACL applied by the broker on port {port}")
            assert topic_error(port, "zk-logs.a") == TOPIC_AUTHORIZATION_FAILED
            assert topic_error(port, "zk-open") == 0

        # Deleting on the other broker opens the literal topic again on both.
        deleted = request(two, ApiKey.DELETE_ACLS, {"filters": [
            {"resource_type_filter": 2, "resource_name_filter": "zk-hidden",
             "pattern_type_filter": 3, "principal_filter": None, "host_filter": None,
             "operation": 1, "permission_type": 1}]})
        [result] = deleted["filter_results"]
        assert [m["resource_name"] for m in result["matching_acls"]] == ["zk-hidden"]
        assert not zk_client.exists("/kafka-acl/Topic/zk-hidden")
        wait_until(lambda: topic_error(one, "zk-hidden") == 0,
                   message="the deletion applied by the first broker")
        assert topic_error(one, "zk-logs.a") == TOPIC_AUTHORIZATION_FAILED

        # Deleting one of a resource's two ACLs rewrites its node with the other one.
        bob = dict(acl("zk-logs.", 4), principal="User:bob", operation=4)
        assert request(one, ApiKey.CREATE_ACLS, {"creations": [bob]})["results"] == [
            {"error_code": 0, "error_message": None}]
        deleted = request(two, ApiKey.DELETE_ACLS, {"filters": [
            {"resource_type_filter": 2, "resource_name_filter": "zk-logs.",
             "pattern_type_filter": 4, "principal_filter": "User:alice", "host_filter": None,
             "operation": 1, "permission_type": 1}]})
        [result] = deleted["filter_results"]
        assert result["error_code"] == 0 and len(result["matching_acls"]) == 1
        data, _ = zk_client.get("/kafka-acl-extended/prefixed/Topic/zk-logs.")
        assert [entry["principal"] for entry in json.loads(data)["acls"]] == ["User:bob"]

        def principals_on_one():
            described = request(one, ApiKey.DESCRIBE_ACLS, {
                "resource_type_filter": 2, "resource_name_filter": "zk-logs.",
                "pattern_type_filter": 4, "principal_filter": None, "host_filter": None,
                "operation": 1, "permission_type": 1})
            return [acl["principal"] for resource in described["resources"]
                    for acl in resource["acls"]]
        wait_until(lambda: principals_on_one() == ["User:bob"],
                   message="the first broker to keep only bob's ACL")
    finally:
        cluster.close()
