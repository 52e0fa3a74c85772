"""Bad frames cost only their own connection; a fuzzed broker keeps serving everyone."""

import random
import struct

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from pylog.protocol import ApiKey, encode_request
from pylog.testing.broker import broker_fixture
from tests.broker.wire import WireClient, batch, create_body, fetch_body, produce_body

MAX_REQUEST = 1 << 20
small_broker = broker_fixture(scope="module", overrides={
    "socket.request.max.bytes": MAX_REQUEST, "num.network.threads": 2})


@pytest.fixture
def bystander(small_broker):
    """A healthy connection that must survive every bad one."""
    with WireClient(small_broker.bootstrap) as client:
        client.call(ApiKey.METADATA, 1, {"topics": None})
        yield client


def still_served(client: WireClient) -> None:
    body = client.call(ApiKey.API_VERSIONS, 0, {})
    assert body["error_code"] == 0


def closed_after(small_broker, frame: bytes) -> bool:
    with WireClient(small_broker.bootstrap, timeout=20) as bad:
        bad.send_raw(frame)
        return bad.is_closed_by_peer()


def test_oversized_frame_closes_only_that_connection(small_broker, bystander):
    assert closed_after(small_broker, struct.pack(">i", MAX_REQUEST + 1) + b"\0" * 100)
    still_served(bystander)
    assert "socket.request.max.bytes" in small_broker.log_text()


def test_negative_size_closes_the_connection(small_broker, bystander):
    assert closed_after(small_broker, struct.pack(">i", -5))
    still_served(bystander)


def test_unknown_api_key_closes_the_connection(small_broker, bystander):
    assert closed_after(small_broker, struct.pack(">ihhi", 10, 999, 0, 1) + b"\0\0")
    still_served(bystander)
    assert "unknown api key 999" in small_broker.log_text()


def test_truncated_request_closes_the_connection(small_broker, bystander):
    frame = encode_request(ApiKey.PRODUCE, 8, 1, "c", produce_body("t", {0: batch([b"x"])}))
    cut = frame[4:40]
    assert closed_after(small_broker, struct.pack(">i", len(cut)) + cut)
    still_served(bystander)


def test_unsupported_version_of_other_apis_closes_the_connection(small_broker, bystander):
    frame = bytearray(encode_request(ApiKey.METADATA, 1, 1, "c", {"topics": None}))
    frame[6:8] = struct.pack(">h", 99)
    assert closed_after(small_broker, bytes(frame))
    still_served(bystander)


def test_no_traceback_in_the_log_for_client_mistakes(small_broker):
    assert closed_after(small_broker, struct.pack(">ihhi", 10, 999, 0, 1) + b"\0\0")
    assert "Traceback" not in small_broker.log_text()


@pytest.mark.parametrize("api_key, version, body", [
    (ApiKey.PRODUCE, 3, {"transactional_id": None, "acks": 1, "timeout_ms": 1000,
                         "topic_data": None}),
    (ApiKey.FETCH, 4, dict(fetch_body("t", {0: 0}), topics=None)),
    (ApiKey.PRODUCE, 8, {"transactional_id": None, "acks": 1, "timeout_ms": 1000,
                         "topic_data": [{"name": "t", "partition_data": None}]}),
    (ApiKey.CREATE_TOPICS, 4, dict(create_body("t"), topics=None)),
    (ApiKey.LIST_OFFSETS, 5, {"replica_id": -1, "topics": None}),
], ids=["produce-topics", "fetch-topics", "produce-partitions", "create-topics",
        "list-offsets"])
def test_null_array_where_not_nullable_closes_the_connection(small_broker, bystander,
                                                             api_key, version, body):
    frame = encode_request(api_key, version, 1, "c", body)
    before = small_broker.log_text()
    assert closed_after(small_broker, frame)
    still_served(bystander)
    new_lines = small_broker.log_text()[len(before):]
    assert "non-nullable array" in new_lines
    assert "Traceback" not in new_lines


def test_null_string_where_not_nullable_closes_the_connection(small_broker, bystander):
    frame = encode_request(ApiKey.PRODUCE, 8, 1, "c", produce_body(None, {0: batch([b"x"])}))
    assert closed_after(small_broker, frame)
    still_served(bystander)
    assert "Traceback" not in small_broker.log_text()


def null_frames() -> list[bytes]:
    """Requests with null arrays and strings in every place that is not nullable."""
    produce = produce_body("fuzz", {0: batch([b"v"])})
    return [
        encode_request(ApiKey.PRODUCE, 3, 7, "f", dict(produce, topic_data=None)),
        encode_request(ApiKey.PRODUCE, 9, 7, "f", dict(produce, topic_data=None)),
        encode_request(ApiKey.PRODUCE, 8, 7, "f", produce_body(None, {0: None})),
        encode_request(ApiKey.FETCH, 4, 8, "f", dict(fetch_body("fuzz", {0: 0}), topics=None)),
        encode_request(ApiKey.FETCH, 12, 8, "f", dict(fetch_body("fuzz", {0: 0}),
                                                      forgotten_topics_data=None)),
        encode_request(ApiKey.FETCH, 11, 8, "f", fetch_body(None, {0: 0})),
        encode_request(ApiKey.CREATE_TOPICS, 5, 9, "f", create_body(None)),
        encode_request(ApiKey.CREATE_TOPICS, 4, 9, "f", dict(create_body("n"), topics=None)),
        encode_request(ApiKey.DELETE_TOPICS, 3, 10, "f", {"topic_names": None,
                                                          "timeout_ms": 100}),
        encode_request(ApiKey.LIST_OFFSETS, 5, 11, "f", {"replica_id": -1, "topics": None}),
        encode_request(ApiKey.METADATA, 0, 12, "f", {"topics": None}),
        encode_request(ApiKey.METADATA, 12, 12, "f", {"topics": [{"name": None}]}),
        encode_request(ApiKey.INIT_PRODUCER_ID, 1, 13, "f", {"transactional_id": None,
                                                             "transaction_timeout_ms": 1}),
    ]


def valid_frames() -> list[bytes]:
    frames = [
        encode_request(ApiKey.API_VERSIONS, 3, 1, "f", {"client_software_name": "f",
                                                        "client_software_version": "1"}),
        encode_request(ApiKey.METADATA, 9, 2, "f", {"topics": [{"name": "fuzz"}],
                                                    "allow_auto_topic_creation": True}),
        encode_request(ApiKey.PRODUCE, 8, 3, "f", produce_body("fuzz", {0: batch([b"v"] * 5)})),
        encode_request(ApiKey.FETCH, 11, 4, "f", fetch_body("fuzz", {0: 0})),
        encode_request(ApiKey.CREATE_TOPICS, 4, 5, "f", create_body("fuzz2", 2)),
        encode_request(ApiKey.LIST_OFFSETS, 5, 6, "f", {"replica_id": -1, "topics": [
            {"name": "fuzz", "partitions": [{"partition_index": 0, "timestamp": -1}]}]}),
    ]
    return frames


def mutate(rng: random.Random, frame: bytes) -> bytes:
    data = bytearray(frame)
    for _ in range(rng.randint(1, 8)):
        choice = rng.random()
        position = rng.randrange(4, len(data)) if len(data) > 4 else 4
        if choice < 0.6 and position < len(data):
            data[position] = rng.randrange(256)
        elif choice < 0.8:
            del data[position:position + rng.randint(1, 16)]
        else:
            data[position:position] = rng.randbytes(rng.randint(1, 16))
    body = bytes(data[4:])
    # Usually keep the size prefix consistent so the broker has to parse the body.
    size = len(body) if rng.random() < 0.8 else rng.randint(-10, MAX_REQUEST * 2)
    return struct.pack(">i", size) + body


def test_fuzzed_frames_leave_the_broker_serving(small_broker):
    rng = random.Random(20240601)
    frames = valid_frames() + null_frames()
    for frame in null_frames():
        with WireClient(small_broker.bootstrap, timeout=20) as client:
            client.send_raw(frame)
            client.sock.shutdown(1)
            try:
                while client.sock.recv(65536):
                    pass
            except (ConnectionResetError, TimeoutError):
                pass
    for round_number in range(300):
        with WireClient(small_broker.bootstrap, timeout=20) as client:
            if round_number % 3 == 0:
                payload = rng.randbytes(rng.randint(0, 300))
            else:
                payload = b"".join(mutate(rng, rng.choice(frames)) for _ in range(rng.randint(1, 3)))
            client.send_raw(payload)
            client.sock.shutdown(1)  # no more input: the broker must answer or close
            try:
                while client.sock.recv(65536):
                    pass
            except (ConnectionResetError, TimeoutError):
                pass
    assert small_broker.alive()
    assert "Traceback" not in small_broker.log_text()
    # Memory stays bounded: nothing accumulated from 300 hostile connections.
    rss_kb = int(next(line.split()[1] for line in open(f"/proc/{small_broker.pid}/status")
                      if line.startswith("VmRSS")))
    assert rss_kb < 400_000
    # And an ordinary client still works end to end.
    producer = KafkaProducer(bootstrap_servers=small_broker.bootstrap)
    for i in range(20):
        producer.send("after-fuzz", value=b"m%d" % i)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=small_broker.bootstrap, consumer_timeout_ms=5000)
    tp = TopicPartition("after-fuzz", 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    end = consumer.end_offsets([tp])[tp]
    values = []
    for message in consumer:  # up to the end offset, not until 5 s pass without a message
        values.append(message.value)
        if consumer.position(tp) >= end:
            break
    assert [values, end] == [[b"m%d" % i for i in range(20)], 20]
    consumer.close()
