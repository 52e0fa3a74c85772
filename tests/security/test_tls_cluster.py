"""Inter-broker TLS: two brokers whose replica fetchers reach each other on an SSL
listener that requires client certificates, while clients use PLAINTEXT.

Each broker registers both endpoints in ZooKeeper. A replicated topic with
``min.insync.replicas=2`` accepts acks=all writes only while the follower fetches (over
TLS, with the broker's own certificate). A keystore rotated at run time reaches the
follower's replica fetcher: its next connection presents the new certificate. After the
leader is killed the other broker serves every record.
"""

from __future__ import annotations

import json
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType)

from pylog.client import Admin
from pylog.cluster.session import close_client, connect_client
from pylog.testing.broker import BrokerProcess
from pylog.testing.certs import HOSTS, TestCertificates
from pylog.testing.zookeeper import zk_chroot_fixture, zookeeper_fixture
from pylog.testing.waiting import wait_until
from pylog.types import TopicPartition as PylogPartition

zookeeper = zookeeper_fixture()
zk_connect = zk_chroot_fixture()

TOPIC = "tls-replicated"


def alter_internal(admin: AdminClient, broker_id: int, key: str, value) -> None:
    """Set ``listener.name.internal.<key>`` of one broker at run time."""
    resource = ConfigResource(ResourceType.BROKER, str(broker_id), incremental_configs=[
        ConfigEntry(f"listener.name.internal.{key}", str(value),
                    incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(15)


def test_replicas_fetch_over_a_mutual_tls_inter_broker_listener(tmp_path, zk_connect):
    certs = TestCertificates.create(tmp_path / "certs")
    brokers = []
    for broker_id in (1, 2):
        brokers.append(BrokerProcess(tmp_path / f"b{broker_id}", {
            "broker.id": broker_id, "zookeeper.connect": zk_connect,
            "zookeeper.session.timeout.ms": 4000,
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SSL",
            "inter.broker.listener.name": "INTERNAL",
            **certs.broker_settings("required", prefix="listener.name.internal."),
            "replica.fetch.wait.max.ms": 200, "replica.lag.time.max.ms": 3000,
            "min.insync.replicas": 2, "offsets.topic.replication.factor": 1,
        }, extra_listeners=["INTERNAL"]))
    try:
        for broker in brokers:
            broker.start()
        zk = connect_client(zk_connect, session_timeout=5.0, connection_timeout=10.0)
        try:
            wait_until(lambda: zk.exists("/brokers/ids/2"), message="broker 2 registered")
            node = json.loads(zk.get("/brokers/ids/2")[0])
        finally:
            close_client(zk)
        assert node["endpoints"] == [f"PLAINTEXT://127.0.0.1:{brokers[1].port}",
                                     f"INTERNAL://127.0.0.1:{brokers[1].ports['INTERNAL']}"]
        assert node["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT",
                                                          "INTERNAL": "SSL"}

        bootstrap = ",".join(b.bootstrap for b in brokers)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 2)])[TOPIC].result(15)

        def in_sync():
            partition = admin.list_topics(TOPIC, timeout=5).topics[TOPIC].partitions.get(0)
            return partition is not None and len(partition.isrs) == 2 and partition

        leader = wait_until(in_sync, message="both replicas in the ISR").leader
        values = [b"replicated-%d" % i for i in range(500)]
        failures = []
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                             "message.timeout.ms": 15000})
        for value in values:
            producer.produce(TOPIC, value, partition=0,
                             on_delivery=lambda error, _m: error and failures.append(error))
        assert producer.flush(20) == 0 and failures == []

        # A certificate rotated at run time (KIP-226) reaches the replica fetchers too:
        # the follower's keystore becomes one from another CA, which the leader alone is
        # then set to trust. After the leader restarts and leads again, the follower's
        # fetcher connects anew and must present the new certificate to stay in sync.
        follower = 3 - leader
        rotated = certs.stranger_ca.issue("broker", HOSTS).write_keystore(
            certs.directory / "rotated-broker.pem", certs.key_password)
        alter_internal(admin, leader, "ssl.truststore.location", certs.stranger_truststore)
        alter_internal(admin, follower, "ssl.keystore.location", rotated)
        brokers[leader - 1].restart()  # the follower leads meanwhile
        wait_until(lambda: in_sync() and in_sync().leader == follower,
                   message="the restarted broker back in the ISR")
        with Admin(bootstrap) as pylog_admin:
            assert pylog_admin.elect_leaders([PylogPartition(TOPIC, 0)]) == {
                PylogPartition(TOPIC, 0): None}
        wait_until(lambda: in_sync() and in_sync().leader == leader, timeout=30,
                   message="the follower fetching with its rotated certificate")
        more = [b"rotated-%d" % i for i in range(100)]
        for value in more:
            producer.produce(TOPIC, value, partition=0,
                             on_delivery=lambda error, _m: error and failures.append(error))
        assert producer.flush(20) == 0 and failures == []
        values += more

        brokers[leader - 1].kill()
        survivor = brokers[2 - leader]
        consumer = Consumer({"bootstrap.servers": survivor.bootstrap, "group.id": "reader",
                             "enable.auto.commit": False, "topic.metadata.refresh.interval.ms": 500})
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        read, deadline = [], time.monotonic() + 30
        while len(read) < len(values) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                read.append(message.value())
        consumer.close()
        assert read == values
        for broker in brokers:
            assert "TLS handshake" not in broker.log_text()
    finally:
        for broker in brokers:
            broker.stop()
