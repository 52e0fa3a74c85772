"""ACLs on SASL principals: an admin super user grants, an ordinary user gets only what
was granted. One broker with a SASL_PLAINTEXT listener (SCRAM) and the authorizer on;
both users are added offline before the start, as an operator would."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import confluent_kafka
import pytest
from confluent_kafka.admin import (
    AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic, ResourcePatternType,
    ResourceType)

from pylog.testing.broker import BrokerProcess

PASSWORDS = {"admin": "admin-Pw-7", "alice": "alice-Pw-8"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    base = tmp_path_factory.mktemp("acl-sasl")
    for user, password in PASSWORDS.items():
        done = subprocess.run(
            [sys.executable, "-m", "pylog.cli.main", "users", "add", "--user", user,
             "--password-env", "PW", "--mechanism", "SCRAM-SHA-256",
             "--log-dirs", str(base / "logs")],
            capture_output=True, text=True, timeout=60, env={**os.environ, "PW": password})
        assert done.returncode == 0, done.stderr
    process = BrokerProcess(base, {
        "log.dirs": str(base / "logs"), "num.partitions": 1, "auto.create.topics.enable": False,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin", "group.initial.rebalance.delay.ms": 0,
        "offsets.topic.num.partitions": 3}, extra_listeners=["SASL_PLAINTEXT"])
    process.start()
    try:
        yield process
    finally:
        process.stop()


def settings(broker, user: str) -> dict:
    return {"bootstrap.servers": broker.bootstrap_for("SASL_PLAINTEXT"),
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": user, "sasl.password": PASSWORDS[user], "log_level": 3}


def test_an_ordinary_user_gets_what_the_admin_granted_and_nothing_more(broker):
    admin = AdminClient(settings(broker, "admin"))
    for topic in ("granted", "secret"):
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    bindings = [AclBinding(ResourceType.TOPIC, "granted", ResourcePatternType.LITERAL,
                           "User:alice", "*", AclOperation.WRITE, AclPermissionType.ALLOW),
                AclBinding(ResourceType.TOPIC, "granted", ResourcePatternType.LITERAL,
                           "User:alice", "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW),
                # Her consumer's group may be found (FindCoordinator), so the only refusal
                # its poll can report is the topic read below, not a racing group error.
                AclBinding(ResourceType.GROUP, "alice-readers", ResourcePatternType.LITERAL,
                           "User:alice", "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW)]
    for future in admin.create_acls(bindings).values():
        future.result(15)

    alice = settings(broker, "alice")
    producer = confluent_kafka.Producer({**alice, "message.timeout.ms": 5000})
    delivered = []
    producer.produce("granted", b"hello", on_delivery=lambda e, m: delivered.append(e))
    producer.produce("secret", b"nope", on_delivery=lambda e, m: delivered.append(e))
    producer.flush(15)
    errors = sorted((e.code() if e else 0) for e in delivered)
    assert errors == sorted([0, confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED])

    topics = AdminClient(alice).list_topics(timeout=10).topics
    assert "granted" in topics and "secret" not in topics
    assert {"granted", "secret"} <= set(admin.list_topics(timeout=10).topics)

    consumer = confluent_kafka.Consumer({**alice, "group.id": "alice-readers",
                                         "auto.offset.reset": "earliest"})
    consumer.assign([confluent_kafka.TopicPartition("granted", 0, 0)])
    refused = None
    deadline = time.monotonic() + 15
    while refused is None and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None and message.error():
            refused = message.error().code()
    consumer.close()
    assert refused == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED

    reader = confluent_kafka.Consumer({**settings(broker, "admin"), "group.id": "admins",
                                       "auto.offset.reset": "earliest"})
    reader.assign([confluent_kafka.TopicPartition("granted", 0, 0)])
    values = []
    deadline = time.monotonic() + 15
    while not values and time.monotonic() < deadline:
        message = reader.poll(0.2)
        if message is not None and not message.error():
            values.append(message.value())
    reader.close()
    assert values == [b"hello"]
