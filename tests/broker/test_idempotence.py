"""Idempotent producing against a real broker: raw Produce requests with producer ids,
and confluent-kafka through a proxy that cuts connections after the broker wrote a batch."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer

from pylog.protocol import ApiKey
from pylog.records import build_batch, decode_batch, iter_batch_headers
from pylog.testing.cutting_proxy import proxied_broker
from tests.broker.wire import WireClient, create_body, fetch_body, produce_body

OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH = 45, 47
@pytest.fixture(scope="module")
def proxied(tmp_path_factory):
    """A broker advertising a cutting proxy in front of it: (broker, proxy)."""
    with proxied_broker(tmp_path_factory.mktemp("idempotence")) as pair:
        yield pair


@pytest.fixture
def wire(proxied):
    with WireClient(proxied[0].bootstrap) as client:
        yield client


def create(wire: WireClient, name: str) -> None:
    result = wire.call(ApiKey.CREATE_TOPICS, 4, create_body(name, 1))
    assert result["topics"][0]["error_code"] == 0, result


def idempotent_batch(producer_id: int, epoch: int, sequence: int, values: list[bytes]) -> bytes:
    return build_batch([(None, v, (), 1_700_000_000_000) for v in values], producer_id=producer_id,
                       producer_epoch=epoch, base_sequence=sequence)


def produce(wire: WireClient, topic: str, records: bytes) -> dict:
    response = wire.call(ApiKey.PRODUCE, 8, produce_body(topic, {0: records}, acks=-1))
    return response["responses"][0]["partition_responses"][0]


def log_values(wire: WireClient, topic: str) -> list[bytes]:
    found, offset = [], 0
    while True:
        response = wire.call(ApiKey.FETCH, 11, fetch_body(topic, {0: offset}))
        raw = bytes(response["responses"][0]["partitions"][0]["records"] or b"")
        if not raw:
            return found
        for position, header in iter_batch_headers(raw):
            found += [r.value for r in decode_batch(raw, position).records]
            offset = header.next_offset


def producer_id(wire: WireClient) -> int:
    response = wire.call(ApiKey.INIT_PRODUCER_ID, 1, {"transactional_id": None,
                                                      "transaction_timeout_ms": 60000})
    assert response["error_code"] == 0 and response["producer_epoch"] == 0
    return response["producer_id"]


def test_a_batch_sent_twice_is_written_once_with_the_same_offsets(wire):
    topic = f"dup-{uuid.uuid4().hex[:8]}"
    create(wire, topic)
    pid = producer_id(wire)
    first = produce(wire, topic, idempotent_batch(pid, 0, 0, [b"a", b"b"]))
    again = produce(wire, topic, idempotent_batch(pid, 0, 0, [b"a", b"b"]))
    assert first["error_code"] == again["error_code"] == 0
    assert first["base_offset"] == again["base_offset"] == 0
    assert produce(wire, topic, idempotent_batch(pid, 0, 2, [b"c"]))["base_offset"] == 2
    assert log_values(wire, topic) == [b"a", b"b", b"c"]


def test_a_sequence_gap_and_an_old_epoch_are_refused(wire):
    topic = f"gap-{uuid.uuid4().hex[:8]}"
    create(wire, topic)
    pid = producer_id(wire)
    assert produce(wire, topic, idempotent_batch(pid, 1, 0, [b"a"]))["error_code"] == 0
    assert produce(wire, topic, idempotent_batch(pid, 1, 2, [b"gap"]))["error_code"] == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert produce(wire, topic, idempotent_batch(pid, 0, 1, [b"old"]))["error_code"] == INVALID_PRODUCER_EPOCH
    assert produce(wire, topic, idempotent_batch(pid, 2, 5, [b"new"]))["error_code"] == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert produce(wire, topic, idempotent_batch(pid, 2, 0, [b"b"]))["error_code"] == 0
    assert log_values(wire, topic) == [b"a", b"b"]


def test_producer_ids_come_from_one_block_and_survive_a_restart_unique(proxied, wire):
    ids = {producer_id(wire) for _ in range(3)}
    assert len(ids) == 3
    block = (proxied[0].log_dir / "producer-id-block").read_text()
    assert '"block_start": "0"' in block and '"block_end": "999"' in block


def produce_through_cuts(proxied, topic: str, count: int, idempotence: bool) -> list[bytes]:
    broker, proxy = proxied
    proxy.rearm(cuts=5)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": idempotence,
                         "acks": "all", "linger.ms": 2, "batch.num.messages": 50,
                         "max.in.flight.requests.per.connection": 5, "retry.backoff.ms": 20,
                         "message.timeout.ms": 60000, "socket.connection.setup.timeout.ms": 5000})
    failures = []
    for i in range(count):
        producer.produce(topic, b"%06d" % i + b"." * 200, partition=0,
                         on_delivery=lambda err, _msg: err and failures.append(err))
        producer.poll(0)
    assert producer.flush(60) == 0
    assert failures == []
    assert proxy.cuts_done == 5
    with WireClient(broker.bootstrap) as reader:
        return [v[:6] for v in log_values(reader, topic)]


def test_confluent_kafka_idempotent_producer_writes_each_message_once_through_cut_connections(proxied, wire):
    topic = f"cut-{uuid.uuid4().hex[:8]}"
    create(wire, topic)
    values = produce_through_cuts(proxied, topic, 3000, idempotence=True)
    assert values == [b"%06d" % i for i in range(3000)]


def test_without_idempotence_the_same_cuts_write_duplicates(proxied, wire):
    topic = f"nocut-{uuid.uuid4().hex[:8]}"
    create(wire, topic)
    values = produce_through_cuts(proxied, topic, 3000, idempotence=False)
    assert len(values) > len(set(values)) == 3000  # the proxy really makes clients retry
