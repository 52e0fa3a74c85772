"""pylog's client against librdkafka's mock cluster, with confluent-kafka as the peer."""

import random

import confluent_kafka
import pytest

from pylog.client import (
    Admin,
    OffsetOutOfRange,
    Producer,
    RoundRobinPartitioner,
    SimpleConsumer,
    TopicPartition,
    murmur2_partition,
)
from pylog.errors import NetworkExceptionError, OffsetOutOfRangeError, UnknownTopicOrPartitionError
from pylog.records import iter_batch_headers, iter_records
from tests.client.mock_cluster import confluent_read_all

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PARTITIONS = [0, 1, 2, 3]  # the mock creates topics with 4 partitions


def _records(n, seed):
    rng = random.Random(seed)
    return [(f"key-{i}-{rng.randrange(10**6)}".encode(), rng.randbytes(rng.randrange(0, 300)),
             [("n", str(i).encode())]) for i in range(n)]


@pytest.fixture
def consumer(mock_bootstrap):
    with SimpleConsumer(mock_bootstrap) as consumer:
        yield consumer


def _read_all(consumer, topic):
    """Every record of every partition, from earliest to high watermark, with pylog."""
    out = {}
    for p in PARTITIONS:
        offset, end = consumer.earliest_offset(topic, p), consumer.latest_offset(topic, p)
        while offset < end:
            result = consumer.fetch(topic, p, offset, max_bytes=4096)
            out.update({(p, r.offset): r for r in result.records})
            offset = result.next_offset
    return out


@pytest.mark.parametrize("codec", CODECS)
def test_pylog_producer_to_confluent_consumer(mock_bootstrap, codec):
    topic = f"pylog-to-confluent-{codec}"
    records = _records(300, seed=codec)
    with Producer(mock_bootstrap, compression=codec, linger_ms=20, batch_size=4096) as producer:
        futures = [producer.send(topic, value, key=key, headers=headers) for key, value, headers in records]
        producer.flush()
        placed = [f.result(timeout=10) for f in futures]
    assert all(m.partition == murmur2_partition(key, 4) for m, (key, _, _) in zip(placed, records))
    messages = confluent_read_all(mock_bootstrap, topic, PARTITIONS, len(records))
    got = {(m.partition(), m.offset()): (m.key(), m.value(), m.headers()) for m in messages}
    expected = {(m.partition, m.offset): (key, value, headers)
                for m, (key, value, headers) in zip(placed, records)}
    assert got == expected


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_producer_to_pylog_consumer(mock_bootstrap, consumer, codec):
    topic = f"confluent-to-pylog-{codec}"
    records = _records(300, seed=f"c{codec}")
    delivered = []
    producer = confluent_kafka.Producer({"bootstrap.servers": mock_bootstrap, "compression.type": codec,
                                        "partitioner": "murmur2_random", "linger.ms": 20, "log_level": 3})
    for key, value, headers in records:
        producer.produce(topic, value, key, headers=headers,
                         on_delivery=lambda err, msg: delivered.append((err, msg)))
    assert producer.flush(20) == 0
    assert all(err is None for err, _ in delivered)
    got = _read_all(consumer, topic)
    sent = {key: (value, tuple(headers)) for key, value, headers in records}
    expected = {(m.partition(), m.offset()): (m.key(), *sent[m.key()]) for _, m in delivered}
    assert {k: (r.key, r.value, r.headers) for k, r in got.items()} == expected
    # keys land where pylog's murmur2 says they do
    assert all(m.partition() == murmur2_partition(m.key(), 4) for _, m in delivered)


def test_same_keys_same_partitions_as_confluent(mock_bootstrap):
    keys = [random.Random(i).randbytes(random.Random(i).randrange(1, 40)) for i in range(200)]
    confluent_partitions = {}
    producer = confluent_kafka.Producer({"bootstrap.servers": mock_bootstrap,
                                        "partitioner": "murmur2_random", "log_level": 3})
    for key in keys:
        producer.produce("placement", b"v", key,
                         on_delivery=lambda err, msg: confluent_partitions.__setitem__(msg.key(), msg.partition()))
    producer.flush(20)
    with Producer(mock_bootstrap) as ours:
        futures = {key: ours.send("placement", b"v", key=key) for key in keys}
        ours.flush()
        assert {key: f.result().partition for key, f in futures.items()} == confluent_partitions


def test_offsets_and_offset_out_of_range(mock_bootstrap, consumer):
    with Producer(mock_bootstrap) as producer:
        for i in range(25):
            producer.send("offsets", f"v{i}".encode(), partition=2)
    assert consumer.partitions_for("offsets") == PARTITIONS
    assert consumer.earliest_offset("offsets", 2) == 0
    assert consumer.latest_offset("offsets", 2) == 25
    assert consumer.latest_offset("offsets", 1) == 0
    result = consumer.fetch("offsets", 2, 10)
    assert [r.offset for r in result.records] == list(range(10, result.next_offset))
    assert [r.value for r in result.records][:2] == [b"v10", b"v11"]
    assert result.high_watermark == 25
    at_end = consumer.fetch("offsets", 2, 25, max_wait_ms=10)
    assert (at_end.records, at_end.next_offset) == ([], 25)
    with pytest.raises(OffsetOutOfRange) as caught:
        consumer.fetch("offsets", 2, 1000)
    error = caught.value
    assert isinstance(error, OffsetOutOfRangeError)
    assert (error.topic, error.partition, error.offset) == ("offsets", 2, 1000)
    assert (error.log_start_offset, error.high_watermark) == (0, 25)
    assert "0 to 25" in str(error)
    leader = consumer.leader_for("offsets", 2)
    assert f"{leader.host}:{leader.port}" in consumer._network.snapshot().brokers[leader.broker_id].address


def test_fetch_raw_and_fetch_many(mock_bootstrap, consumer):
    with Producer(mock_bootstrap, linger_ms=50, batch_size=1000) as producer:
        futures = [producer.send("raw", bytes(200), key=str(i).encode()) for i in range(200)]
    per_partition = {p: sum(1 for f in futures if f.result().partition == p) for p in PARTITIONS}
    headers, offset = [], 0
    while offset < consumer.latest_offset("raw", 0):
        raw = consumer.fetch_raw("raw", 0, offset)
        assert isinstance(raw.records, bytes)
        assert list(iter_records(raw.records)) == consumer.fetch("raw", 0, offset).records
        headers.extend(h for _, h in iter_batch_headers(raw.records))
        offset = headers[-1].next_offset
    assert len(headers) > 1 and all(h.size <= 1000 for h in headers)  # batch_size is honoured
    assert sum(h.records_count for h in headers) == per_partition[0]
    # The mock answers one batch per partition and fetch: loop like the loader does.
    positions = {TopicPartition("raw", p): 0 for p in PARTITIONS}
    counts = dict.fromkeys(PARTITIONS, 0)
    while any(o < per_partition[tp.partition] for tp, o in positions.items()):
        for tp, result in consumer.fetch_many(positions, max_wait_ms=10).items():
            counts[tp.partition] += len(result.records)
            positions[tp] = result.next_offset
    assert counts == per_partition


def test_acks_zero_and_all(mock_bootstrap, consumer):
    with Producer(mock_bootstrap, acks=0) as producer:
        zero = [producer.send("acks", b"zero", partition=1) for _ in range(5)]
        producer.flush()
    assert [f.result().offset for f in zero] == [-1] * 5
    with Producer(mock_bootstrap, acks="all") as producer:
        all_ = [producer.send("acks", b"all", partition=1) for _ in range(5)]
        producer.flush()
    assert [f.result().offset for f in all_] == [5, 6, 7, 8, 9]
    got = _read_all(consumer, "acks")
    assert [got[(1, offset)].value for offset in range(10)] == [b"zero"] * 5 + [b"all"] * 5


def test_failures_reach_the_future(mock_bootstrap):
    with Producer(mock_bootstrap) as producer:
        producer.send("failures", b"x").result(timeout=10)  # creates the topic
        with pytest.raises(UnknownTopicOrPartitionError, match="no partition 17"):
            producer.send("failures", b"x", partition=17).result(timeout=10)
    with Producer("127.0.0.1:1", max_block_ms=300, retry_backoff_ms=50) as producer:
        with pytest.raises(NetworkExceptionError, match="127.0.0.1:1"):
            producer.send("anything", b"x").result(timeout=10)


def test_admin_lists_and_describes(mock_bootstrap):
    with Producer(mock_bootstrap) as producer:
        producer.send("described", b"x").result(timeout=10)
    with Admin(mock_bootstrap) as admin:
        assert "described" in admin.list_topics()
        description = admin.describe_topic("described")
    assert [p.partition for p in description.partitions] == PARTITIONS
    assert all(p.leader in p.replicas and len(p.replicas) == 3 for p in description.partitions)


def test_pluggable_partitioners(mock_bootstrap):
    with Producer(mock_bootstrap, partitioner=lambda topic, key, partitions: partitions[-1]) as producer:
        last = [producer.send("pluggable", b"x", key=str(i).encode()) for i in range(10)]
    assert {f.result().partition for f in last} == {3}
    with Producer(mock_bootstrap, partitioner=RoundRobinPartitioner()) as producer:
        turns = [producer.send("pluggable", b"x", key=b"same") for i in range(8)]
    assert [f.result().partition for f in turns] == [0, 1, 2, 3, 0, 1, 2, 3]
    with Producer(mock_bootstrap, linger_ms=1000) as producer:  # sticky: one batch, one partition
        sticky = [producer.send("pluggable", b"x") for i in range(20)]
    assert len({f.result().partition for f in sticky}) == 1
