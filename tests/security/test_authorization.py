"""ACLs enforced by a real broker against stock clients (confluent-kafka) and raw requests.

Every PLAINTEXT client is ``User:ANONYMOUS``. The broker starts with
``allow.everyone.if.no.acl.found=false`` and two ACLs written offline to its ACL file:
ANONYMOUS may Alter the cluster (so it may manage ACLs), from 127.0.0.1 only, and Read
the group its partition-assigning consumers name. Each test
then grants what it needs through CreateAcls and checks what is refused. Raw requests
from 127.0.0.2 are an ANONYMOUS principal that ACL does not cover.
"""

from __future__ import annotations

import json
import socket
import time

import pytest
from confluent_kafka import (Consumer, KafkaError, KafkaException, Producer, TopicPartition,
                             OFFSET_BEGINNING)
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation,
                                   AclPermissionType, AdminClient, NewTopic, ResourcePatternType,
                                   ResourceType)

from pylog.cluster.layout import parse_uuid_text
from pylog.protocol import ApiKey
from pylog.security.acl_store import FileAclStore
from pylog.security.acls import (
    AccessControlEntry, AclBinding as PylogBinding, AclOperation as Op, AclPermission,
    ResourcePattern, ResourceType as Type)
from pylog.testing.broker import BrokerProcess
from tests.broker.wire import WireClient

ANONYMOUS = "User:ANONYMOUS"
LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
ASSIGN_ONLY = "assign-only"  # the group id of consumers that assign partitions


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = BrokerProcess(tmp_path_factory.mktemp("authz"), {
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "allow.everyone.if.no.acl.found": "false", "num.partitions": 1,
        "offsets.topic.num.partitions": 2, "offsets.topic.replication.factor": 1,
        "group.initial.rebalance.delay.ms": 0, "auto.create.topics.enable": "false"})
    process.log_dir.mkdir(parents=True)
    FileAclStore(process.log_dir).create([
        PylogBinding(ResourcePattern(Type.CLUSTER, "kafka-cluster"),
                     AccessControlEntry(ANONYMOUS, "127.0.0.1", Op.ALTER, AclPermission.ALLOW)),
        PylogBinding(ResourcePattern(Type.GROUP, ASSIGN_ONLY),
                     AccessControlEntry(ANONYMOUS, "*", Op.READ, AclPermission.ALLOW))])
    process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def grant(admin, *acls: tuple) -> None:
    """acls: (resource type, name, pattern type, operation, permission) for ANONYMOUS."""
    bindings = [AclBinding(rtype, name, ptype, ANONYMOUS, "*", op, permission)
                for rtype, name, ptype, op, permission in acls]
    for future in admin.create_acls(bindings, request_timeout=10).values():
        assert future.result() is None


def create_topic(admin, name: str) -> None:
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=15)


def produce(broker, topic: str, values: list[bytes]) -> list:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 10000})
    outcomes = []
    for value in values:
        producer.produce(topic, value, on_delivery=lambda err, _msg: outcomes.append(err))
    producer.flush(15)
    return outcomes


def poll_until(consumer, want: int, timeout: float = 20.0):
    """(values read, the first error) once ``want`` values or an error came."""
    values, deadline = [], time.monotonic() + timeout
    while len(values) < want and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        if message.error():
            if message.error().code() == KafkaError._PARTITION_EOF:
                continue
            return values, message.error()
        values.append(message.value())
    return values, None


def consumer_for(broker, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "session.timeout.ms": 6000})


def test_write_without_read_produces_but_cannot_consume(broker, admin):
    grant(admin, (ResourceType.TOPIC, "w-only", LITERAL, AclOperation.CREATE, ALLOW),
          (ResourceType.TOPIC, "w-only", LITERAL, AclOperation.WRITE, ALLOW))
    create_topic(admin, "w-only")
    assert produce(broker, "w-only", [b"one", b"two"]) == [None, None]
    consumer = consumer_for(broker, ASSIGN_ONLY)
    try:
        consumer.assign([TopicPartition("w-only", 0, OFFSET_BEGINNING)])
        values, error = poll_until(consumer, 1)
    finally:
        consumer.close()
    assert values == []
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_deny_overrides_allow(broker, admin):
    for future in admin.create_acls([
            AclBinding(ResourceType.TOPIC, "denied", LITERAL, "User:*", "*", AclOperation.ALL,
                       ALLOW),
            AclBinding(ResourceType.TOPIC, "denied", LITERAL, ANONYMOUS, "*",
                       AclOperation.WRITE, DENY)]).values():
        future.result()
    create_topic(admin, "denied")  # All allows Create
    [error] = produce(broker, "denied", [b"x"])
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with WireClient(broker.bootstrap) as wire:
        response = wire.call(ApiKey.PRODUCE, 8, {"acks": 1, "timeout_ms": 5000, "topic_data": [
            {"name": "denied", "partition_data": [{"index": 0, "records": b""}]}]})
    [topic] = response["responses"]
    assert topic["partition_responses"][0]["error_code"] == 29


def test_prefixed_acl_covers_logs_topics_and_nothing_else(broker, admin):
    grant(admin, (ResourceType.TOPIC, "logs.", PREFIXED, AclOperation.ALL, ALLOW))
    create_topic(admin, "logs.app")
    with pytest.raises(KafkaException) as refused:
        create_topic(admin, "other")
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce(broker, "logs.app", [b"a", b"b"]) == [None, None]
    consumer = consumer_for(broker, ASSIGN_ONLY)
    try:
        consumer.assign([TopicPartition("logs.app", 0, OFFSET_BEGINNING)])
        values, error = poll_until(consumer, 2)
    finally:
        consumer.close()
    assert (values, error) == ([b"a", b"b"], None)


def test_a_group_acl_gates_subscribing(broker, admin):
    grant(admin, (ResourceType.TOPIC, "logs.", PREFIXED, AclOperation.ALL, ALLOW),
          (ResourceType.GROUP, "ok-", PREFIXED, AclOperation.READ, ALLOW))
    create_topic(admin, "logs.grp")
    assert produce(broker, "logs.grp", [b"g1", b"g2"]) == [None, None]
    allowed, refused = consumer_for(broker, "ok-readers"), consumer_for(broker, "no-readers")
    try:
        allowed.subscribe(["logs.grp"])
        assert poll_until(allowed, 2) == ([b"g1", b"g2"], None)
        refused.subscribe(["logs.grp"])
        values, error = poll_until(refused, 1)
        assert values == []
        assert error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        allowed.close()
        refused.close()


def test_metadata_lists_only_topics_the_principal_may_describe(broker, admin):
    # Create does not imply Describe: ANONYMOUS makes the topic and then cannot see it.
    grant(admin, (ResourceType.TOPIC, "secret", LITERAL, AclOperation.CREATE, ALLOW),
          (ResourceType.TOPIC, "logs.", PREFIXED, AclOperation.ALL, ALLOW))
    create_topic(admin, "secret")
    create_topic(admin, "logs.seen")
    listed = admin.list_topics(timeout=10).topics
    assert "logs.seen" in listed and "secret" not in listed
    named = admin.list_topics("secret", timeout=10).topics["secret"]
    assert named.error is not None
    assert named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with WireClient(broker.bootstrap) as wire:
        everything = wire.call(ApiKey.METADATA, 12, {"topics": None})
        assert "secret" not in {t["name"] for t in everything["topics"]}
        # Asked for by id alone, a topic is checked as the topic it names.
        ids = {name: parse_uuid_text(entry["topic_id"]) for name, entry in json.loads(
            (broker.log_dir / "topics.json").read_text())["topics"].items()}
        by_id = wire.call(ApiKey.METADATA, 12, {"topics": [
            {"topic_id": ids["secret"], "name": None},
            {"topic_id": ids["logs.seen"], "name": None}], "allow_auto_topic_creation": False})
    hidden, seen = sorted(by_id["topics"], key=lambda t: t["name"] is not None)
    assert hidden["error_code"] == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert hidden["topic_id"] == ids["secret"] and hidden["name"] is None
    assert hidden["partitions"] == []
    assert seen["error_code"] == 0 and seen["name"] == "logs.seen" and seen["partitions"]


def test_describe_topic_partitions_shows_only_what_the_principal_may_describe(broker, admin):
    TOPIC_AUTHORIZATION_FAILED = KafkaError.TOPIC_AUTHORIZATION_FAILED
    grant(admin, (ResourceType.TOPIC, "dtp-", PREFIXED, AclOperation.ALL, ALLOW),
          (ResourceType.TOPIC, "dtp-hidden", LITERAL, AclOperation.DESCRIBE, DENY))
    for name in ("dtp-a", "dtp-hidden", "dtp-z"):
        create_topic(admin, name)

    def describe(names, cursor=None, limit=2000):
        with WireClient(broker.bootstrap) as wire:
            answer = wire.call(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, {
                "topics": [{"name": n} for n in names], "response_partition_limit": limit,
                "cursor": cursor})
        return [(t["name"], t["error_code"], len(t["partitions"])) for t in answer["topics"]], \
            answer["next_cursor"]

    listed, _ = describe([])
    assert ("dtp-a", 0, 1) in listed and ("dtp-z", 0, 1) in listed
    assert "dtp-hidden" not in {name for name, _, _ in listed}
    # Paging over every topic, a hidden one takes no room and never shows in a cursor,
    # even from a cursor placed just before it.
    seen, cursor = [], {"topic_name": "dtp-b", "partition_index": 0}
    while cursor is not None:
        page, cursor = describe([], cursor=cursor, limit=1)
        seen += [name for name, _, _ in page]
        assert cursor is None or cursor["topic_name"] != "dtp-hidden"
        assert len(page) == 1
    assert seen[0] == "dtp-z" and "dtp-hidden" not in seen
    named = ["dtp-z", "dtp-hidden", "dtp-a"]
    assert describe(named) == ([("dtp-a", 0, 1), ("dtp-hidden", TOPIC_AUTHORIZATION_FAILED, 0),
                                ("dtp-z", 0, 1)], None)
    # Paged one partition at a time, the refused topic answers in the page reaching it; a
    # cursor at it moves on to the next topic the principal may see.
    assert describe(named, limit=1) == (
        [("dtp-a", 0, 1), ("dtp-hidden", TOPIC_AUTHORIZATION_FAILED, 0)],
        {"topic_name": "dtp-z", "partition_index": 0})
    after = {"topic_name": "dtp-hidden", "partition_index": 0}
    assert describe(named, cursor=after, limit=1) == (
        [("dtp-hidden", TOPIC_AUTHORIZATION_FAILED, 0), ("dtp-z", 0, 1)], None)
    assert describe(["dtp-hidden"]) == ([("dtp-hidden", TOPIC_AUTHORIZATION_FAILED, 0)], None)


def wire_from(source_host: str, bootstrap: str) -> WireClient:
    """A raw connection whose client address is ``source_host`` (another loopback)."""
    host, port = bootstrap.rsplit(":", 1)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(30)
    sock.bind((source_host, 0))
    sock.connect((host, int(port)))
    client = WireClient.__new__(WireClient)
    client.sock, client.correlation_id = sock, 0
    return client


def test_the_acl_apis_need_cluster_alter_from_an_allowed_host(broker, admin):
    any_acl = {"resource_type_filter": 1, "resource_name_filter": None,
               "pattern_type_filter": 1, "principal_filter": None, "host_filter": None,
               "operation": 1, "permission_type": 1}
    creation = {"resource_type": 2, "resource_name": "x", "resource_pattern_type": 3,
                "principal": ANONYMOUS, "host": "*", "operation": 3, "permission_type": 3}
    with wire_from("127.0.0.2", broker.bootstrap) as outsider:
        described = outsider.call(ApiKey.DESCRIBE_ACLS, 1, any_acl)
        created = outsider.call(ApiKey.CREATE_ACLS, 1, {"creations": [creation]})
        deleted = outsider.call(ApiKey.DELETE_ACLS, 1, {"filters": [any_acl]})
        init = outsider.call(ApiKey.INIT_PRODUCER_ID, 1, {"transactional_id": None,
                                                          "transaction_timeout_ms": 1000})
    assert (described["error_code"], described["resources"]) == (31, [])
    assert created["results"][0]["error_code"] == 31
    assert deleted["filter_results"][0]["error_code"] == 31
    # No IdempotentWrite, but Write on a topic (w-only, any host) is enough (KIP-679).
    assert init["error_code"] == 0 and init["producer_id"] >= 0
    with WireClient(broker.bootstrap) as insider:
        described = insider.call(ApiKey.DESCRIBE_ACLS, 1, any_acl)
    assert described["error_code"] == 0
    assert {"kafka-cluster", "w-only"} <= {r["resource_name"] for r in described["resources"]}


def test_describe_and_delete_acls_with_filters(broker, admin):
    grant(admin, (ResourceType.GROUP, "temp-", PREFIXED, AclOperation.DESCRIBE, ALLOW),
          (ResourceType.GROUP, "temp-", PREFIXED, AclOperation.DELETE, ALLOW))
    group_filter = AclBindingFilter(ResourceType.GROUP, "temp-", PREFIXED, None, None,
                                    AclOperation.ANY, AclPermissionType.ANY)
    found = admin.describe_acls(group_filter).result()
    assert {b.operation for b in found} == {AclOperation.DESCRIBE, AclOperation.DELETE}
    matching = AclBindingFilter(ResourceType.GROUP, "temp-42", ResourcePatternType.MATCH,
                                ANONYMOUS, None, AclOperation.DELETE, AclPermissionType.ANY)
    [deleted] = admin.delete_acls([matching]).values()
    assert [(b.name, b.operation) for b in deleted.result()] == [("temp-", AclOperation.DELETE)]
    left = admin.describe_acls(group_filter).result()
    assert [b.operation for b in left] == [AclOperation.DESCRIBE]


def test_authorized_operations_are_what_the_acls_allow(broker, admin):
    from confluent_kafka import TopicCollection

    grant(admin, (ResourceType.TOPIC, "ops.read", LITERAL, AclOperation.READ, ALLOW),
          (ResourceType.TOPIC, "ops.read", LITERAL, AclOperation.CREATE, ALLOW),
          (ResourceType.TOPIC, "ops.all", LITERAL, AclOperation.ALL, ALLOW),
          (ResourceType.GROUP, "ops.group", LITERAL, AclOperation.DESCRIBE, ALLOW))
    create_topic(admin, "ops.read")
    create_topic(admin, "ops.all")
    described = admin.describe_topics(TopicCollection(["ops.read", "ops.all"]),
                                      include_authorized_operations=True)
    # READ implies DESCRIBE, as in Kafka.
    assert set(described["ops.read"].result(15).authorized_operations) == {
        AclOperation.READ, AclOperation.DESCRIBE, AclOperation.CREATE}
    assert len(described["ops.all"].result(15).authorized_operations) == 8
    # The cluster: ALTER from the broker's ACL file, and DESCRIBE that ALTER implies.
    cluster = admin.describe_cluster(include_authorized_operations=True).result(15)
    assert set(cluster.authorized_operations) == {AclOperation.ALTER, AclOperation.DESCRIBE}
    group = admin.describe_consumer_groups(["ops.group"], include_authorized_operations=True)[
        "ops.group"].result(15)
    assert group.authorized_operations == [AclOperation.DESCRIBE]
    # From 127.0.0.2 the cluster ACL does not apply: without Describe, no operations.
    with wire_from("127.0.0.2", broker.bootstrap) as wire:
        answer = wire.call(ApiKey.DESCRIBE_CLUSTER, 0,
                           {"include_cluster_authorized_operations": True})
    assert (answer["error_code"], answer["cluster_authorized_operations"]) == (0, 0)
    # ...nor may it elect leaders (Cluster Alter).
    with wire_from("127.0.0.2", broker.bootstrap) as wire:
        answer = wire.call(ApiKey.ELECT_LEADERS, 1, {"election_type": 0, "timeout_ms": 1000,
                                                     "topic_partitions": [
                                                         {"topic": "ops.all",
                                                          "partition_id": [0]}]})
    [[result]] = [t["partition_result"] for t in answer["replica_election_results"]]
    assert answer["error_code"] == result["error_code"] == \
        KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # Not asked for: not given (Metadata v12 through the wire).
    with WireClient(broker.bootstrap) as wire:
        plain = wire.call(ApiKey.METADATA, 12, {"topics": [{"name": "ops.all"}]})
    assert plain["topics"][0]["topic_authorized_operations"] == -2147483648
