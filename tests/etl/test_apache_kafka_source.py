"""The loader against real Apache Kafka 4.4 (KRaft), not a pylog broker nor a mock.

One single-node cluster (a SASL_SSL SCRAM listener besides PLAINTEXT, the StandardAuthorizer
on) serves the scheduled-load, transaction and security tests; a three-node cluster (replication factor
3, ``min.insync.replicas`` 2) serves the broker crash. Both are children of the test
process (:mod:`pylog.testing.apache_kafka`), the jars from Maven Central.

What the table holds is checked against what Kafka holds as an independent reader,
confluent-kafka (librdkafka), sees it: the ``(_topic, _partition, _offset)`` set is equal
and without duplicates.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import confluent_kafka
import confluent_kafka.admin
import pytest
import yaml

from pylog.client import SimpleConsumer
from pylog.errors import SaslAuthenticationFailedError
from pylog.etl.config import load_config
from pylog.etl.errors import LoaderError
from pylog.etl.job import LoadRequest, run_load
from pylog.etl.state import StateStore
from pylog.testing.apache_kafka import apache_kafka_fixture
from pylog.testing.waiting import wait_until
from tests.etl.helpers import SCHEMA, assert_exactly_once, events, write_config

LOADER_PASSWORD = "loader-Kafka-5e1f0c"

pytestmark = pytest.mark.slow

# PLAINTEXT clients (the tests' producers and readers) are User:ANONYMOUS, a super user;
# the loader on SASL_SSL is User:loader, with ACLs.
kafka = apache_kafka_fixture(nodes=1, sasl_users={"loader": LOADER_PASSWORD}, overrides={
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS", "allow.everyone.if.no.acl.found": "false"})
kafka3 = apache_kafka_fixture(nodes=3)


def create_topic(bootstrap: str, topic: str, partitions: int, replicas: int) -> None:
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    new = confluent_kafka.admin.NewTopic(topic, partitions, replicas)
    admin.create_topics([new], operation_timeout=30)[topic].result(30)


def produce(bootstrap: str, topic: str, values: list[bytes], partitions: int) -> None:
    """acks=all, idempotent: every record is on every in-sync replica before flush returns."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                                         "enable.idempotence": True, "log_level": 3})
    for i, value in enumerate(values):
        producer.produce(topic, value=value, key=f"k{i}".encode(), partition=i % partitions)
    assert producer.flush(60) == 0


def kafka_keys(bootstrap: str, topic: str, isolation: str = "read_uncommitted",
               timeout: float = 60.0) -> set[tuple[str, int, int]]:
    """(topic, partition, offset) of every record librdkafka's consumer reads from the
    start to the end of each partition (the last stable offset for read_committed)."""
    metadata = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap}).list_topics(
        topic, timeout=30)
    partitions = sorted(metadata.topics[topic].partitions)
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": "independent-reader",
        "enable.auto.commit": False, "enable.partition.eof": True, "isolation.level": isolation,
        "log_level": 3})
    consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                     for p in partitions])
    keys, at_end = set(), set()
    deadline = time.monotonic() + timeout
    try:
        while at_end != set(partitions):
            assert time.monotonic() < deadline, f"did not reach the end of {topic}"
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                if message.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
                    continue
                raise confluent_kafka.KafkaException(message.error())
            at_end.discard(message.partition())
            keys.add((message.topic(), message.partition(), message.offset()))
    finally:
        consumer.close()
    return keys


def group_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets as librdkafka reads them (no group is joined)."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                         "log_level": 3})
    try:
        found = consumer.committed([confluent_kafka.TopicPartition(topic, p)
                                    for p in range(partitions)], timeout=30)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in found if tp.offset >= 0}


def parquet_mtimes(warehouse: Path) -> list[int]:
    return sorted(p.stat().st_mtime_ns for p in warehouse.rglob("*.parquet"))


def test_scheduled_loads_read_apache_kafka_exactly_once(spark, kafka, tmp_path):
    """A clean load, then only the new records, then a rerun of the same run id that writes
    nothing; the loader's progress is committed to Kafka's own group coordinator."""
    create_topic(kafka.bootstrap, "ev", partitions=3, replicas=1)
    config = write_config(tmp_path, kafka.bootstrap, max_records_per_task=40)
    produce(kafka.bootstrap, "ev", events(0, 200), partitions=3)
    first = run_load(config, spark, LoadRequest(run_id="k1"))
    assert first[0].records_fetched == 200 and first[0].rows_written == 200
    held = kafka_keys(kafka.bootstrap, "ev")
    assert len(held) == 200
    assert_exactly_once(spark, tmp_path / "warehouse", "ev", held)

    produce(kafka.bootstrap, "ev", events(200, 61), partitions=3)
    second = run_load(config, spark, LoadRequest(run_id="k2"))
    assert second[0].records_fetched == 61
    held = kafka_keys(kafka.bootstrap, "ev")
    assert_exactly_once(spark, tmp_path / "warehouse", "ev", held)

    files = parquet_mtimes(tmp_path / "warehouse")
    again = run_load(config, spark, LoadRequest(run_id="k2"))
    assert again[0] == second[0]
    assert parquet_mtimes(tmp_path / "warehouse") == files
    assert_exactly_once(spark, tmp_path / "warehouse", "ev", held)

    committed = StateStore(config.state).committed_offsets("ev")
    assert sum(committed.values()) == 261
    assert group_offsets(kafka.bootstrap, "pylog-loader.ev", "ev", 3) == committed


def transactional(bootstrap: str, transactional_id: str) -> confluent_kafka.Producer:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                                         "transactional.id": transactional_id, "log_level": 3})
    producer.init_transactions(60)
    return producer


def send(producer: confluent_kafka.Producer, topic: str, numbers) -> None:
    for n in numbers:
        value = json.dumps({"user": f"u{n % 5}", "n": n, "ts": "2026-11-20T07:15:00Z"}).encode()
        producer.produce(topic, value=value, key=f"k{n}".encode(), partition=n % 2)
    assert producer.flush(30) == 0


def loaded_numbers(spark, warehouse: Path, table: str) -> list[int]:
    return sorted(r["n"] for r in spark.read.parquet(str(warehouse / table)).collect())


def test_read_committed_skips_aborted_transactions_and_waits_for_open_ones(spark, kafka, tmp_path):
    """Kafka's own transaction coordinator, markers and aborted lists: only committed
    records reach the table, and an open transaction's records (beyond the last stable
    offset) wait for the run after its commit."""
    create_topic(kafka.bootstrap, "tx", partitions=2, replicas=1)
    config = write_config(tmp_path, kafka.bootstrap, topic="tx", max_records_per_task=25)
    committer = transactional(kafka.bootstrap, "kafka-loader-test-a")
    committer.begin_transaction()
    send(committer, "tx", range(0, 60))
    committer.commit_transaction(30)
    committer.begin_transaction()
    send(committer, "tx", range(1000, 1040))
    committer.abort_transaction(30)

    pending = transactional(kafka.bootstrap, "kafka-loader-test-b")
    pending.begin_transaction()
    send(pending, "tx", range(60, 80))  # written, not committed: beyond the last stable offset
    committer.begin_transaction()
    send(committer, "tx", range(80, 90))  # committed, but after the open transaction's records
    committer.commit_transaction(30)
    # Kafka answers EndTxn once the outcome is logged and writes the partitions' markers
    # after it: the last stable offset moves when they are written. The loader plans up to
    # the last stable offset it is told, so the test waits for the markers first.
    committed_readable(kafka.bootstrap, "tx", 60)

    first = run_load(config, spark, LoadRequest(run_id="t1"))
    assert loaded_numbers(spark, tmp_path / "warehouse", "tx") == list(range(60))
    assert first[0].rows_written == 60

    pending.commit_transaction(30)
    committed_readable(kafka.bootstrap, "tx", 90)
    run_load(config, spark, LoadRequest(run_id="t2"))
    assert loaded_numbers(spark, tmp_path / "warehouse", "tx") == list(range(90))
    committed = kafka_keys(kafka.bootstrap, "tx", isolation="read_committed")
    assert len(committed) == 90
    assert_exactly_once(spark, tmp_path / "warehouse", "tx", committed)


def committed_readable(bootstrap: str, topic: str, count: int) -> None:
    """Wait until a read_committed consumer reads ``count`` records of ``topic`` up to the
    last stable offsets."""
    wait_until(lambda: len(kafka_keys(bootstrap, topic, isolation="read_committed")) == count,
               timeout=60, interval=0.5,
               message=f"{count} committed records of {topic} below the last stable offset")


def secured_config(tmp_path: Path, kafka, password: str) -> Path:
    """loader.yaml reading ``secured`` over SASL_SSL as ``loader``, the password in a file."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    secret = tmp_path / "loader-password"
    secret.write_text(password + "\n")
    settings = kafka.client_settings("loader")
    source = {"bootstrap_servers": kafka.sasl_bootstrap, "request_timeout_ms": 10000,
              **{key: settings[key] for key in ("security.protocol", "sasl.mechanism",
                                                "sasl.username", "ssl.ca.location")},
              "sasl.password_file": str(secret)}
    raw = {"source": source, "warehouse": (tmp_path / "warehouse").as_uri(),
           "state": (tmp_path / "state").as_uri(),
           "topics": {"secured": {"table": "secured", "format": "json", "schema": SCHEMA,
                                  "event_time": "log_timestamp", "max_bad_records": 0,
                                  "max_bad_ratio": 0.0, "max_records_per_task": 30}}}
    path = tmp_path / "loader.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def grant_loader(bootstrap: str, topic: str) -> None:
    """ACLs for User:loader: read and describe ``topic``, read its progress group."""
    from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType,
                                       ResourcePatternType, ResourceType)

    def allow(resource: ResourceType, name: str, operation: AclOperation,
              pattern: ResourcePatternType = ResourcePatternType.LITERAL) -> AclBinding:
        return AclBinding(resource, name, pattern, "User:loader", "*", operation,
                          AclPermissionType.ALLOW)

    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    bindings = [allow(ResourceType.TOPIC, topic, AclOperation.READ),
                allow(ResourceType.TOPIC, topic, AclOperation.DESCRIBE),
                allow(ResourceType.GROUP, "pylog-loader.", AclOperation.READ,
                      ResourcePatternType.PREFIXED)]
    for future in admin.create_acls(bindings, request_timeout=30).values():
        future.result()


def test_loader_reads_over_sasl_ssl_with_scram(spark, kafka, tmp_path):
    """SASL_SSL with SCRAM-SHA-256 against Kafka's own authenticator and StandardAuthorizer:
    the loader's user may read only its topic and its progress group."""
    create_topic(kafka.bootstrap, "secured", partitions=2, replicas=1)
    produce(kafka.bootstrap, "secured", events(0, 70), partitions=2)
    grant_loader(kafka.bootstrap, "secured")

    wrong = load_config(secured_config(tmp_path / "wrong", kafka, "not-the-password"))
    with pytest.raises(SaslAuthenticationFailedError, match="invalid credentials"):
        run_load(wrong, spark, LoadRequest(run_id="s0"))

    config = load_config(secured_config(tmp_path, kafka, LOADER_PASSWORD))
    audits = run_load(config, spark, LoadRequest(run_id="s1"))
    assert audits[0].rows_written == 70
    assert_exactly_once(spark, tmp_path / "warehouse", "secured", kafka_keys(kafka.bootstrap, "secured"))
    committed = StateStore(config.state).committed_offsets("secured")
    assert committed == {0: 35, 1: 35}
    assert group_offsets(kafka.bootstrap, "pylog-loader.secured", "secured", 2) == committed


class KillAfterFirstTask(threading.Thread):
    """SIGKILLs the node leading ``partition`` once the run's first range is done."""

    def __init__(self, cluster, config, table: str, run_id: str, partition: int) -> None:
        super().__init__(daemon=True)
        self.cluster, self.state = cluster, StateStore(config.state)
        self.table, self.run_id, self.partition = table, run_id, partition
        self.victim: int | None = None
        self.done_at_kill: int | None = None
        self.stopped = threading.Event()

    def run(self) -> None:
        with SimpleConsumer(self.cluster.bootstrap) as consumer:
            leader = consumer.leader_for(self.table, self.partition).broker_id
        while not self.stopped.is_set():
            done = self.state.count_markers(self.table, self.run_id)
            if done >= 1:
                self.cluster.kill(leader)
                self.victim, self.done_at_kill = leader, done
                return
            time.sleep(0.02)


def test_broker_killed_mid_load_then_rerun_is_exactly_once(spark, kafka3, tmp_path):
    """Three nodes, replication factor 3: the leader of a partition is SIGKILLed while the
    load's tasks fetch. The run either rides the leader change or fails as a whole and is
    finished by the next run; records produced while the node is down (acks=all, two
    in-sync replicas) and after it is back are loaded too, each exactly once."""
    create_topic(kafka3.bootstrap, "crash", partitions=3, replicas=3)
    produce(kafka3.bootstrap, "crash", events(0, 450), partitions=3)
    config = write_config(tmp_path, kafka3.bootstrap, topic="crash", max_records_per_task=15)
    killer = KillAfterFirstTask(kafka3, config, "crash", "c1", partition=0)
    killer.start()
    try:
        first = run_load(config, spark, LoadRequest(run_id="c1"))
        outcome = f"committed {first[0].rows_written} rows"
    except LoaderError as exc:
        outcome = f"failed: {exc}"
    finally:
        killer.stopped.set()
        killer.join()
    plan = StateStore(config.state).read_plan("crash", "c1")
    assert killer.victim is not None, f"the run ended before a node was killed ({outcome})"
    assert killer.done_at_kill < len(plan.ranges), "every range was done before the kill"
    print(f"node {killer.victim} killed after {killer.done_at_kill} of {len(plan.ranges)} "
          f"ranges; the run {outcome}")

    kafka3.wait_for_brokers(30)  # the dead node is fenced: its partitions have new leaders
    produce(kafka3.bootstrap, "crash", events(450, 90), partitions=3)
    kafka3.start(killer.victim)
    produce(kafka3.bootstrap, "crash", events(540, 30), partitions=3)

    audits = run_load(config, spark, LoadRequest(run_id="c2"))
    assert audits[-1].run_id == "c2"
    held = kafka_keys(kafka3.bootstrap, "crash")
    assert len(held) == 570
    assert_exactly_once(spark, tmp_path / "warehouse", "crash", held)
    assert sum(StateStore(config.state).committed_offsets("crash").values()) == 570
