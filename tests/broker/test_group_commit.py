"""Group commit at the wire: Produce requests a connection pipelines are handled together
(one write per partition) yet answered exactly as one by one: in order, each with its
own offsets or its own error, acks=0 unanswered, a request of another kind in between
answered in its place, a malformed frame closing the connection only after the frames
before it were answered. Real clients pipelining (confluent-kafka, kafka-python) read
every record back once, in order."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaProducer

from pylog.protocol import ApiKey, encode_request
from tests.broker.test_wire import create, records_of, values
from tests.broker.wire import WireClient, batch, fetch_body, produce_body

CORRUPT_MESSAGE, UNKNOWN_TOPIC, UNSUPPORTED_VERSION = 2, 3, 35


def _frame(correlation_id: int, body: dict, version: int = 7) -> bytes:
    return encode_request(ApiKey.PRODUCE, version, correlation_id, "pipeline", body)


def _malformed(frame: bytes) -> bytes:
    """``frame`` cut short inside its records, its size prefix saying so: well framed, but
    the records run past the end."""
    cut = bytearray(frame)
    del cut[-20:]
    cut[:4] = (len(cut) - 4).to_bytes(4, "big")
    return bytes(cut)


def _send_in_pieces(wire: WireClient, data: bytes, cuts) -> None:
    """Send ``data`` cut at the offsets ``cuts``, pausing so the broker reads each piece
    on its own."""
    previous = 0
    for cut in [*cuts, len(data)]:
        wire.send_raw(data[previous:cut])
        previous = cut
        time.sleep(0.05)


def test_pipelined_requests_are_answered_one_by_one_in_order(broker) -> None:
    topic = f"gc-{uuid.uuid4().hex[:8]}"
    with WireClient(broker.bootstrap) as wire:
        create(wire, topic, partitions=2)
        corrupt = bytearray(batch([b"bad"]))
        corrupt[-1] ^= 0xFF
        frames = [
            _frame(1, produce_body(topic, {0: batch([b"a0", b"a1"])})),
            _frame(2, produce_body(topic, {0: batch([b"b0"]), 1: batch([b"p1-0"])})),
            _frame(3, produce_body(topic, {0: bytes(corrupt)})),
            _frame(4, produce_body(topic, {0: batch([b"c0"])}, acks=0)),
            _frame(5, produce_body("gc-no-such-topic", {0: batch([b"x"])})),
            encode_request(ApiKey.METADATA, 8, 6, "pipeline", {
                "topics": [{"name": topic}], "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False}),
            _frame(7, produce_body(topic, {0: batch([b"d0", b"d1", b"d2"])})),
            _frame(8, produce_body(topic, {0: batch([b"old"])}), version=2),
            _frame(9, produce_body(topic, {1: batch([b"p1-1"]), 0: batch([b"e0"])})),
        ]
        wire.send_raw(b"".join(frames))  # one send: the broker reads them together
        answers = {}
        for api_key, version in [(ApiKey.PRODUCE, 7)] * 4 + [(ApiKey.METADATA, 8)] + \
                [(ApiKey.PRODUCE, 7), (ApiKey.PRODUCE, 2), (ApiKey.PRODUCE, 7)]:
            correlation_id, body = wire.receive(api_key, version)
            answers[correlation_id] = body

        def partitions(correlation_id):
            return {(t["name"], p["index"]): (p["error_code"], p["base_offset"])
                    for t in answers[correlation_id]["responses"]
                    for p in t["partition_responses"]}

        assert list(answers) == [1, 2, 3, 5, 6, 7, 8, 9]  # in order; acks=0 unanswered
        assert partitions(1) == {(topic, 0): (0, 0)}
        assert partitions(2) == {(topic, 0): (0, 2), (topic, 1): (0, 0)}
        assert partitions(3)[(topic, 0)][0] == CORRUPT_MESSAGE
        assert partitions(5) == {("gc-no-such-topic", 0): (UNKNOWN_TOPIC, -1)}
        assert answers[6]["topics"][0]["name"] == topic
        assert partitions(7) == {(topic, 0): (0, 4)}  # after c0 (acks=0) at 3
        assert partitions(8)[(topic, 0)][0] == UNSUPPORTED_VERSION
        assert partitions(9) == {(topic, 1): (0, 1), (topic, 0): (0, 7)}
        fetched = wire.call(ApiKey.FETCH, 11, fetch_body(topic, {0: 0, 1: 0}))
        assert values(records_of(fetched, 0)["records"]) == [
            b"a0", b"a1", b"b0", b"c0", b"d0", b"d1", b"d2", b"e0"]
        assert values(records_of(fetched, 1)["records"]) == [b"p1-0", b"p1-1"]


def test_a_malformed_frame_closes_the_connection_after_the_frames_before_it(broker) -> None:
    topic = f"gc-{uuid.uuid4().hex[:8]}"
    with WireClient(broker.bootstrap) as setup:
        create(setup, topic)
    malformed = _malformed(_frame(3, produce_body(topic, {0: batch([b"never"])})))
    with WireClient(broker.bootstrap) as wire:
        wire.send_raw(_frame(1, produce_body(topic, {0: batch([b"one"])}))
                      + _frame(2, produce_body(topic, {0: batch([b"two"])}))
                      + malformed
                      + _frame(4, produce_body(topic, {0: batch([b"after"])})))
        assert [wire.receive(ApiKey.PRODUCE, 7)[0] for _ in range(2)] == [1, 2]
        assert wire.is_closed_by_peer()
    with WireClient(broker.bootstrap) as wire:
        fetched = wire.call(ApiKey.FETCH, 11, fetch_body(topic, {0: 0}))
        assert values(records_of(fetched)["records"]) == [b"one", b"two"]


def test_pipelining_clients_read_back_every_record_once_in_order(broker) -> None:
    topic = f"gc-{uuid.uuid4().hex[:8]}"
    with WireClient(broker.bootstrap) as wire:
        create(wire, topic, partitions=2)
    count = 4000
    # One record per request, many requests in flight: the broker sees them together.
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0,
                         "batch.num.messages": 1, "acks": 1})
    for i in range(count):
        producer.produce(topic, b"ck-%d" % i, partition=i % 2)
        producer.poll(0)
    assert producer.flush(60) == 0
    legacy = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0, batch_size=1,
                           max_in_flight_requests_per_connection=20, acks=1)
    for i in range(500):
        legacy.send(topic, b"kp-%d" % i, partition=0)
    legacy.flush(60)
    legacy.close()
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": topic,
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
    seen: dict[int, list[bytes]] = {0: [], 1: []}
    while sum(map(len, seen.values())) < count + 500:
        messages = consumer.consume(1000, timeout=10)
        assert messages, f"stalled after {sum(map(len, seen.values()))} records"
        for message in messages:
            assert message.error() is None
            seen[message.partition()].append(message.value())
    consumer.close()
    assert seen[1] == [b"ck-%d" % i for i in range(1, count, 2)]
    ours = [v for v in seen[0] if v.startswith(b"ck-")]
    assert ours == [b"ck-%d" % i for i in range(0, count, 2)]
    assert [v for v in seen[0] if v.startswith(b"kp-")] == [b"kp-%d" % i for i in range(500)]


def test_large_frames_in_pieces_between_small_ones_keep_every_byte(broker) -> None:
    # A frame of 64 KiB or more is read straight into a buffer of its own once its
    # size prefix arrives: its bytes come in pieces of every size, the pieces also carry
    # the small frames around it, and a malformed large frame still closes the connection.
    topic = f"gc-{uuid.uuid4().hex[:8]}"
    with WireClient(broker.bootstrap) as wire:
        create(wire, topic)
    big = [bytes([i]) * 90_000 + b"|%d" % i for i in range(3)]
    frames = [_frame(1, produce_body(topic, {0: batch([b"small-1"])})),
              _frame(2, produce_body(topic, {0: batch([big[0], big[1]])})),
              _frame(3, produce_body(topic, {0: batch([b"small-3"])})),
              _frame(4, produce_body(topic, {0: batch([big[2]])})),
              _frame(5, produce_body(topic, {0: batch([b"small-5"])}))]
    stream = b"".join(frames)
    # Cuts: inside a size prefix, one byte into a large frame, across the boundary
    # between a large frame and the next, and in the middle of each.
    start_big = len(frames[0])
    cuts = sorted({2, start_big + 2, start_big + 5, start_big + 70_000, start_big + 120_000,
                   start_big + len(frames[1]) + 10, len(stream) - len(frames[4]) - 3,
                   len(stream) - 1})
    with WireClient(broker.bootstrap) as wire:
        _send_in_pieces(wire, stream, cuts)
        answers = [wire.receive(ApiKey.PRODUCE, 7) for _ in frames]
    assert [correlation_id for correlation_id, _ in answers] == [1, 2, 3, 4, 5]
    assert [body["responses"][0]["partition_responses"][0]["base_offset"]
            for _, body in answers] == [0, 1, 3, 4, 5]
    with WireClient(broker.bootstrap) as wire:
        fetched = wire.call(ApiKey.FETCH, 11, fetch_body(topic, {0: 0}))
    assert values(records_of(fetched)["records"]) == [
        b"small-1", big[0], big[1], b"small-3", big[2], b"small-5"]
    malformed = _malformed(_frame(6, produce_body(topic, {0: batch([big[0]])})))
    with WireClient(broker.bootstrap) as wire:
        _send_in_pieces(wire, malformed, [1000])
        assert wire.is_closed_by_peer()
    with WireClient(broker.bootstrap) as wire:
        fetched = wire.call(ApiKey.FETCH, 11, fetch_body(topic, {0: 0}))
    assert len(values(records_of(fetched)["records"])) == 6  # the malformed one: none


def test_a_frame_larger_than_its_first_buffer_grows_as_it_arrives(broker) -> None:
    # The buffer of a large frame starts at 2 MiB and doubles as bytes arrive: a 2.4 MB
    # request sent in pieces keeps every byte of its sixteen partitions' records.
    topic = f"gc-{uuid.uuid4().hex[:8]}"
    with WireClient(broker.bootstrap) as wire:
        create(wire, topic, partitions=16)
    values_by_partition = {p: bytes([p]) * 150_000 + b"|%d" % p for p in range(16)}
    frame = _frame(1, produce_body(topic, {p: batch([v]) for p, v in values_by_partition.items()}))
    assert len(frame) > 2 << 20
    with WireClient(broker.bootstrap) as wire:
        _send_in_pieces(wire, frame, range(700_000, len(frame), 700_000))
        _, answer = wire.receive(ApiKey.PRODUCE, 7)
        assert [p["error_code"] for p in answer["responses"][0]["partition_responses"]] == [0] * 16
        fetched = wire.call(ApiKey.FETCH, 11, fetch_body(topic, {p: 0 for p in range(16)}))
    for p, value in values_by_partition.items():
        assert values(records_of(fetched, p)["records"]) == [value]
