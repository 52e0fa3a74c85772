"""pylog's client against a real pylog broker subprocess, with kcat and confluent-kafka as peers."""

import subprocess
import time

import confluent_kafka
import pytest

from pylog.client import Admin, OffsetOutOfRange, Producer, SimpleConsumer, TopicPartition, murmur2_partition
from pylog.errors import KafkaError, TopicAlreadyExistsError, UnknownTopicOrPartitionError
from pylog.testing.broker import BrokerProcess, broker_fixture
from tests.client.mock_cluster import confluent_read_all

broker = broker_fixture(scope="module", overrides={"num.partitions": 4,
                                                   "log.retention.check.interval.ms": 200})
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.fixture(scope="module")
def admin(broker):
    with Admin(broker.bootstrap) as admin:
        yield admin


@pytest.fixture
def consumer(broker):
    with SimpleConsumer(broker.bootstrap) as consumer:
        yield consumer


def _kcat(*args: str) -> str:
    return subprocess.run(["kcat", "-q", *args], capture_output=True, text=True, timeout=60, check=True).stdout


def _read_partition(consumer, topic, partition):
    records, offset = [], consumer.earliest_offset(topic, partition)
    end = consumer.latest_offset(topic, partition)
    while offset < end:
        result = consumer.fetch(topic, partition, offset)
        records.extend(result.records)
        offset = result.next_offset
    return records


@pytest.mark.parametrize("codec", CODECS)
def test_pylog_producer_to_kcat_and_confluent(broker, admin, codec):
    topic = f"to-kcat-{codec}"
    admin.create_topic(topic, num_partitions=3)
    values = [f"value {i} {codec}".encode() * (1 + i % 5) for i in range(200)]
    with Producer(broker.bootstrap, compression=codec, linger_ms=10) as producer:
        futures = [producer.send(topic, v, key=str(i).encode(), headers={"i": str(i)}) for i, v in enumerate(values)]
    placed = [f.result() for f in futures]
    assert [m.partition for m in placed] == [murmur2_partition(str(i).encode(), 3) for i in range(200)]
    lines = _kcat("-C", "-b", broker.bootstrap, "-t", topic, "-e", "-f", "%p %o %k %h\n", "-o", "beginning")
    assert sorted(lines.splitlines()) == sorted(f"{m.partition} {m.offset} {i} i={i}" for i, m in enumerate(placed))
    messages = confluent_read_all(broker.bootstrap, topic, [0, 1, 2], 200)
    assert sorted(m.value() for m in messages) == sorted(values)


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_producer_to_pylog_consumer(broker, admin, consumer, codec):
    topic = f"from-confluent-{codec}"
    admin.create_topic(topic, num_partitions=4)
    delivered = []
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec,
                                        "partitioner": "murmur2_random", "linger.ms": 10, "log_level": 3})
    for i in range(300):
        producer.produce(topic, f"v{i}".encode(), f"k{i}".encode(),
                         on_delivery=lambda err, msg: delivered.append((err, msg)))
    assert producer.flush(30) == 0 and all(err is None for err, _ in delivered)
    expected = {(m.partition(), m.offset()): (m.key(), m.value()) for _, m in delivered}
    got = {(p, r.offset): (r.key, r.value) for p in range(4) for r in _read_partition(consumer, topic, p)}
    assert got == expected
    assert all(m.partition() == murmur2_partition(m.key(), 4) for _, m in delivered)


def test_offsets_for_times_agrees_with_kcat(broker, admin, consumer):
    admin.create_topic("timed", num_partitions=2)
    base = 1_700_000_000_000
    with Producer(broker.bootstrap, linger_ms=0, batch_size=200) as producer:
        for i in range(60):
            producer.send("timed", f"t{i}".encode(), partition=i % 2, timestamp=base + i * 1000)
    for ts in (0, base, base + 1, base + 17_500, base + 59_000, base + 59_001):
        ours = consumer.offsets_for_times("timed", {0: ts, 1: ts})
        for partition in (0, 1):
            out = _kcat("-C", "-b", broker.bootstrap, "-t", "timed", "-p", str(partition),
                        "-o", f"s@{ts}", "-c", "1", "-e", "-f", "%o\n").split()
            assert ours[partition] == (int(out[0]) if out else None), (ts, partition)
    assert consumer.offsets_for_times("timed", {0: base + 59_001}) == {0: None}


def test_offset_out_of_range_after_retention_deleted_a_segment(broker, admin, consumer):
    admin.create_topic("retained", configs={"segment.bytes": "1024", "retention.ms": "60000"})
    old = int(time.time() * 1000) - 3_600_000  # an hour ago: past retention
    with Producer(broker.bootstrap, linger_ms=0) as producer:
        for i in range(30):
            producer.send("retained", bytes(100), partition=0, timestamp=old).result()
    deadline = time.monotonic() + 30
    while consumer.earliest_offset("retained", 0) == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    start = consumer.earliest_offset("retained", 0)
    assert 0 < start < 30
    with pytest.raises(OffsetOutOfRange) as caught:
        consumer.fetch("retained", 0, 0)
    assert (caught.value.log_start_offset, caught.value.high_watermark) == (start, 30)
    assert consumer.fetch("retained", 0, start).records[0].offset == start


def test_admin_topic_lifecycle(broker, admin):
    admin.create_topic("lifecycle", num_partitions=3)
    assert "lifecycle" in admin.list_topics()
    assert [p.partition for p in admin.describe_topic("lifecycle").partitions] == [0, 1, 2]
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topic("lifecycle")
    admin.delete_topic("lifecycle")
    assert "lifecycle" not in admin.list_topics()
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.describe_topic("lifecycle")


def test_client_recovers_after_broker_restart(tmp_path):
    with BrokerProcess(tmp_path / "restarting", {"num.partitions": 1}) as server:
        with Producer(server.bootstrap, retry_backoff_ms=200) as producer, \
                SimpleConsumer(server.bootstrap, retry_backoff_ms=200) as consumer, \
                Admin(server.bootstrap) as admin:
            producer.send("restarts", b"before").result(timeout=30)
            assert admin.list_topics() == ["restarts"]
            assert [r.value for r in consumer.fetch("restarts", 0, 0).records] == [b"before"]
            server.restart()
            # Both hold connections the restart killed: they must notice, refresh and reconnect.
            assert producer.send("restarts", b"after").result(timeout=30).offset == 1
            assert [r.value for r in consumer.fetch("restarts", 0, 0).records] == [b"before", b"after"]
            assert consumer.fetch_many({TopicPartition("restarts", 0): 1})[TopicPartition("restarts", 0)].next_offset == 2
            assert admin.list_topics() == ["restarts"]  # its idle connection died too


def test_non_retriable_broker_error_reaches_the_future(broker, admin):
    admin.create_topic("too-large")
    with Producer(broker.bootstrap) as producer:
        big = producer.send("too-large", bytes(2 * 1024 * 1024))  # over message.max.bytes
        small = producer.send("too-large", b"fits")
        with pytest.raises(KafkaError) as caught:
            big.result(timeout=30)
        assert caught.value.name in ("MESSAGE_TOO_LARGE", "RECORD_LIST_TOO_LARGE")
        assert not caught.value.retriable
        assert small.result(timeout=30).offset == 0


def test_fetches_take_turns_when_the_broker_caps_the_response(tmp_path):
    """With a broker's fetch.max.bytes smaller than the data, only the first partition of a
    Fetch gets records: each call starts one partition further, so none waits forever."""
    with BrokerProcess(tmp_path / "capped", {"fetch.max.bytes": 1}) as capped:
        with Admin(capped.bootstrap) as admin:
            admin.create_topic("turns", num_partitions=2)
        with Producer(capped.bootstrap, linger_ms=0) as producer:
            for i in range(10):  # one batch each: 8 in partition 0, 2 in partition 1
                producer.send("turns", b"v%d" % i, partition=0 if i < 8 else 1).result()
        with SimpleConsumer(capped.bootstrap) as consumer:
            offsets = {TopicPartition("turns", 0): 0, TopicPartition("turns", 1): 0}
            got = []
            for _ in range(4):
                for tp, result in consumer.fetch_raw_many(offsets).items():
                    if result.records:
                        got.append(tp.partition)
                        offsets[tp] += 1
            # Partition 1 is served while partition 0 still has data, one call in two.
            assert got == [0, 1, 0, 1]
