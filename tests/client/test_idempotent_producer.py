"""pylog's Producer with idempotence (the default) against a real broker: through
connections cut after the broker wrote a batch, and across a broker restart."""

from __future__ import annotations

import uuid

import pytest

from pylog.client.admin import Admin
from pylog.client.producer import Producer
from pylog.errors import ConfigError
from pylog.protocol import ApiKey
from pylog.records import decode_batch, iter_batch_headers
from pylog.testing.broker import BrokerProcess
from pylog.testing.cutting_proxy import proxied_broker
from tests.broker.wire import WireClient, fetch_body


@pytest.fixture(scope="module")
def proxied(tmp_path_factory):
    with proxied_broker(tmp_path_factory.mktemp("idempotent-client"), cuts=0) as pair:
        yield pair


def new_topic(broker: BrokerProcess) -> str:
    topic = f"idem-{uuid.uuid4().hex[:8]}"
    with Admin(broker.bootstrap) as admin:
        admin.create_topic(topic, 1, 1, {})
    return topic


def log_batches(broker: BrokerProcess, topic: str) -> list[tuple[int, list[bytes]]]:
    """(producer id, values) of every batch in partition 0."""
    found, offset = [], 0
    with WireClient(broker.bootstrap) as wire:
        while True:
            response = wire.call(ApiKey.FETCH, 11, fetch_body(topic, {0: offset}))
            raw = bytes(response["responses"][0]["partitions"][0]["records"] or b"")
            if not raw:
                return found
            for position, header in iter_batch_headers(raw):
                found.append((header.producer_id,
                              [r.value[:6] for r in decode_batch(raw, position).records]))
                offset = header.next_offset


def values_of(batches) -> list[bytes]:
    return [v for _, values in batches for v in values]


def send_all(producer: Producer, topic: str, numbers: range) -> None:
    futures = [producer.send(topic, b"%06d" % i + b"." * 100, partition=0) for i in numbers]
    producer.flush(60)
    offsets = [f.result(timeout=0).offset for f in futures]
    assert offsets == sorted(offsets)


def test_every_record_once_and_in_order_through_cut_connections(proxied):
    broker, proxy = proxied
    topic = new_topic(broker)
    proxy.rearm(cuts=4)
    with Producer(broker.bootstrap, linger_ms=2, batch_size=2000, retry_backoff_ms=10) as producer:
        send_all(producer, topic, range(2000))
    assert proxy.cuts_done == 4
    batches = log_batches(broker, topic)
    assert values_of(batches) == [b"%06d" % i for i in range(2000)]
    assert all(pid >= 0 for pid, _ in batches)


def test_a_restarted_broker_still_recognises_the_producers_batches(proxied):
    broker, proxy = proxied
    topic = new_topic(broker)
    proxy.rearm(cuts=0)
    with Producer(broker.bootstrap, linger_ms=2, batch_size=2000, retry_backoff_ms=50,
                  request_timeout_ms=5000) as producer:
        send_all(producer, topic, range(500))
        broker.stop()
        broker.start()
        proxy.rearm(cuts=2)  # and the first batches after the restart are retried
        send_all(producer, topic, range(500, 1500))
    assert values_of(log_batches(broker, topic)) == [b"%06d" % i for i in range(1500)]


def test_idempotence_settings(proxied):
    broker, _ = proxied
    with pytest.raises(ConfigError, match="acks"):
        Producer(broker.bootstrap, acks=1, enable_idempotence=True)
    with pytest.raises(ConfigError, match="max_in_flight"):
        Producer(broker.bootstrap, max_in_flight=6, enable_idempotence=True)
    topic = new_topic(broker)
    with Producer(broker.bootstrap, acks=1) as plain:  # a conflicting default turns it off
        assert not plain.enable_idempotence
        send_all(plain, topic, range(3))
    with Producer(broker.bootstrap, enable_idempotence=False) as off:
        send_all(off, topic, range(3, 6))
    assert [pid for pid, _ in log_batches(broker, topic)] == [-1, -1]
