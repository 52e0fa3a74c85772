"""Data, topics and the cluster id survive a clean restart and a SIGKILL."""

import signal
import subprocess

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pylog.broker.meta import read_meta
from pylog.testing.broker import BrokerProcess
from pylog.testing.waiting import wait_until


@pytest.fixture
def own_broker(tmp_path):
    # Small segments, so data spans several of them.
    broker = BrokerProcess(tmp_path / "broker", {"num.partitions": 2,
                                                 "log.segment.bytes": 200000})
    broker.start()
    yield broker
    broker.stop()


def produce(bootstrap, topic, start, count):
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "batch.size": 50000})
    errors = []
    for i in range(start, start + count):
        producer.produce(topic, key=b"%d" % i, value=b"message %d " % i + b"x" * 200,
                         partition=i % 2, headers=[("i", b"%d" % i)],
                         on_delivery=lambda err, _m: err and errors.append(err))
    assert producer.flush(30) == 0
    assert errors == []


def consume_all(bootstrap, topic, partitions=2):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "dur",
                         "enable.partition.eof": True, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got, eof = [], set()
    while len(eof) < partitions:
        message = consumer.poll(10)
        assert message is not None
        if message.error():
            eof.add(message.partition())
        else:
            got.append((message.partition(), message.offset(), message.key(), message.headers()))
    consumer.close()
    return got


def expected(count):
    rows = []
    for p in (0, 1):
        keys = [i for i in range(count) if i % 2 == p]
        rows += [(p, n, b"%d" % i, [("i", b"%d" % i)]) for n, i in enumerate(keys)]
    return rows


def metadata(broker):
    return subprocess.run(["kcat", "-b", broker.bootstrap, "-L"], capture_output=True,
                          text=True, timeout=30, check=True).stdout


def test_clean_restart_keeps_data_topics_and_cluster_id(own_broker):
    admin = AdminClient({"bootstrap.servers": own_broker.bootstrap})
    admin.create_topics([NewTopic("configured", num_partitions=3,
                                  config={"retention.ms": "86400000"})])["configured"].result(30)
    produce(own_broker.bootstrap, "durable", 0, 3000)
    cluster_id = read_meta(own_broker.log_dir)["cluster.id"]
    assert own_broker.stop() == 0
    assert (own_broker.log_dir / ".clean_shutdown").exists()
    assert "broker stopped cleanly" in own_broker.log_text()
    own_broker.start()
    assert read_meta(own_broker.log_dir)["cluster.id"] == cluster_id
    assert 'topic "configured" with 3 partitions' in metadata(own_broker)
    produce(own_broker.bootstrap, "durable", 3000, 1000)
    assert sorted(consume_all(own_broker.bootstrap, "durable")) == sorted(expected(4000))


def test_sigint_shuts_down_cleanly(own_broker):
    produce(own_broker.bootstrap, "interrupted", 0, 200)
    own_broker.process.signal(signal.SIGINT)
    assert own_broker.process.process.wait(30) == 0
    assert (own_broker.log_dir / ".clean_shutdown").exists()
    own_broker.start()
    assert sorted(consume_all(own_broker.bootstrap, "interrupted")) == sorted(expected(200))


def test_sigkill_loses_nothing_acknowledged(own_broker):
    produce(own_broker.bootstrap, "crash", 0, 3000)
    own_broker.kill()
    own_broker.start()
    # The port opens before the logs are loaded: wait for the recovery's line.
    wait_until(lambda: "unclean" in own_broker.log_text(), timeout=60,
               message="the restarted broker to load its logs after an unclean shutdown")
    produce(own_broker.bootstrap, "crash", 3000, 500)
    assert sorted(consume_all(own_broker.bootstrap, "crash")) == sorted(expected(3500))


def test_cluster_id_reported_in_metadata_is_stable(own_broker):
    from confluent_kafka.admin import AdminClient as Admin

    first = Admin({"bootstrap.servers": own_broker.bootstrap}).list_topics(timeout=10).cluster_id
    own_broker.restart()
    second = Admin({"bootstrap.servers": own_broker.bootstrap}).list_topics(timeout=10).cluster_id
    assert first == second == read_meta(own_broker.log_dir)["cluster.id"]
