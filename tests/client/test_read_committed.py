"""SimpleConsumer(isolation_level="read_committed") against a pylog broker and librdkafka's mock.

Without transactions a pylog broker's read_committed reads the same records, and the last
stable offset is the high watermark (its transactions are tested with this consumer in
tests/client/test_transactional_producer.py). librdkafka's mock cluster stores transactions (with
their ABORT/COMMIT control batches) but reports neither aborted transactions nor a last
stable offset below the high watermark in its Fetch responses -- even librdkafka's own
read_committed consumer gets aborted records from it. So the aborted-range filter is
proven on the mock's real bytes, with the ``aborted_transactions`` list a Kafka broker
sends for them (producer id, first offset of the aborted transaction).
"""

import confluent_kafka
import pytest

from pylog.client import Admin, Producer, SimpleConsumer
from pylog.client.transactions import drop_aborted
from pylog.errors import ConfigError
from pylog.records import decode_columns, iter_batches
from pylog.testing.broker import broker_fixture

broker = broker_fixture(scope="module", overrides={"num.partitions": 2})


def read_all(consumer: SimpleConsumer, topic: str, partition: int) -> list[tuple[int, bytes]]:
    offset, end, found = consumer.earliest_offset(topic, partition), consumer.latest_offset(topic, partition), []
    while offset < end:
        result = consumer.fetch(topic, partition, offset)
        assert result.next_offset > offset
        found += [(r.offset, r.value) for r in result.records]
        offset = result.next_offset
    return found


def test_read_committed_against_a_pylog_broker(broker):
    with Admin(broker.bootstrap) as admin:
        admin.create_topic("rc", num_partitions=2)
    with Producer(broker.bootstrap, linger_ms=5) as producer:
        for i in range(300):
            producer.send("rc", f"v{i}".encode(), partition=i % 2)
    with SimpleConsumer(broker.bootstrap) as plain, \
            SimpleConsumer(broker.bootstrap, isolation_level="read_committed") as committed:
        for partition in (0, 1):
            assert committed.latest_offset("rc", partition) == plain.latest_offset("rc", partition) == 150
            records = read_all(committed, "rc", partition)
            assert records == read_all(plain, "rc", partition)
            assert [v for _, v in records] == [f"v{i}".encode() for i in range(partition, 300, 2)]
            raw = committed.fetch_raw("rc", partition, 0)
            assert raw.last_stable_offset == raw.high_watermark == 150


def test_bad_isolation_level_names_the_option():
    with pytest.raises(ConfigError, match="isolation_level.*'serializable'"):
        SimpleConsumer("127.0.0.1:9", isolation_level="serializable")


def transactional(bootstrap: str, transactional_id: str) -> confluent_kafka.Producer:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                                         "log_level": 3})
    producer.init_transactions(30)
    return producer


def in_transaction(producer, topic: str, values: list[bytes], commit: bool) -> None:
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value=value, partition=0)
    producer.flush(30)
    (producer.commit_transaction if commit else producer.abort_transaction)(30)


def raw_partition(bootstrap: str, topic: str, isolation_level: str) -> tuple[bytes, int]:
    """Every batch of partition 0 as fetched (back to back) and the high watermark."""
    with SimpleConsumer(bootstrap, isolation_level=isolation_level) as consumer:
        end, offset, chunks = consumer.latest_offset(topic, 0), 0, []
        while offset < end:
            raw = consumer.fetch_raw(topic, 0, offset)
            columns = decode_columns(raw.records, start_offset=offset)
            chunks.append(raw.records[:columns.bytes_consumed])
            offset = columns.next_offset
        return b"".join(chunks), end


def first_offset_and_producer(buf: bytes, value_prefix: bytes) -> tuple[int, int]:
    columns = decode_columns(buf)
    first = next(o for o, v in zip(columns.offsets, columns.values) if v.startswith(value_prefix))
    producer_id = next(h.producer_id for _, h in iter_batches(buf) if h.base_offset <= first <= h.last_offset)
    return first, producer_id


def test_aborted_transaction_records_are_dropped(mock_bootstrap):
    producer = transactional(mock_bootstrap, "rc-t1")
    in_transaction(producer, "rc-tx", [b"c1-%d" % i for i in range(5)], commit=True)
    in_transaction(producer, "rc-tx", [b"ab-%d" % i for i in range(5)], commit=False)
    in_transaction(producer, "rc-tx", [b"c2-%d" % i for i in range(3)], commit=True)
    # Control batches (CRC 0 from the mock) are readable at either level.
    buf, end = raw_partition(mock_bootstrap, "rc-tx", "read_committed")
    assert raw_partition(mock_bootstrap, "rc-tx", "read_uncommitted") == (buf, end)
    everything = decode_columns(buf)
    assert sum(v.startswith(b"ab-") for v in everything.values) == 5  # the mock does not filter
    first, producer_id = first_offset_and_producer(buf, b"ab-")

    kept = decode_columns(drop_aborted(buf, [{"producer_id": producer_id, "first_offset": first}]))
    assert kept.values == [b"c1-%d" % i for i in range(5)] + [b"c2-%d" % i for i in range(3)]
    assert kept.next_offset == everything.next_offset == end  # offsets still move past them
    assert kept.offsets == [o for o, v in zip(everything.offsets, everything.values) if not v.startswith(b"ab-")]
    assert decode_columns(drop_aborted(buf, [])).values == everything.values


def test_only_the_aborting_producer_records_are_dropped(mock_bootstrap):
    one, two = transactional(mock_bootstrap, "rc-p1"), transactional(mock_bootstrap, "rc-p2")
    one.begin_transaction()
    two.begin_transaction()
    for i in range(4):  # interleaved on one partition
        one.produce("rc-mix", value=b"one-%d" % i, partition=0)
        one.flush(30)
        two.produce("rc-mix", value=b"two-%d" % i, partition=0)
        two.flush(30)
    one.abort_transaction(30)
    two.commit_transaction(30)
    in_transaction(one, "rc-mix", [b"one-later"], commit=True)  # the same producer, committed
    buf, _ = raw_partition(mock_bootstrap, "rc-mix", "read_committed")
    first, producer_id = first_offset_and_producer(buf, b"one-")
    kept = decode_columns(drop_aborted(buf, [{"producer_id": producer_id, "first_offset": first}]))
    assert kept.values == [b"two-%d" % i for i in range(4)] + [b"one-later"]
