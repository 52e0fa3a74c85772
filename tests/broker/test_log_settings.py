"""Log settings through the broker: flushed-only reads, retention, topic configs."""

import time

from pylog.protocol import ApiKey
from pylog.testing.broker import broker_fixture
from tests.broker.wire import WireClient, batch, create_body, fetch_body, produce_body

OFFSET_OUT_OF_RANGE = 1

# The seeds' mode: consumers see only flushed messages; flush every 5 messages.
flushed_only = broker_fixture(scope="module", overrides={
    "log.flush.expose.unflushed": "false", "log.flush.interval.messages": 5,
    "log.retention.check.interval.ms": 200})


def partition(response):
    return response["responses"][0]["partitions"][0]


def list_offset(wire, topic, timestamp):
    body = {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": timestamp}]}]}
    return wire.call(ApiKey.LIST_OFFSETS, 5, body)["topics"][0]["partitions"][0]["offset"]


def test_consumers_see_only_flushed_messages(flushed_only):
    with WireClient(flushed_only.bootstrap) as wire, \
            WireClient(flushed_only.bootstrap) as waiting:
        wire.call(ApiKey.CREATE_TOPICS, 4, create_body("flushed", 1))
        for i in range(3):
            wire.call(ApiKey.PRODUCE, 8, produce_body("flushed", {0: batch([b"m%d" % i])}))
        fetched = partition(wire.call(ApiKey.FETCH, 11, fetch_body("flushed", {0: 0})))
        assert fetched["high_watermark"] == 0 and bytes(fetched["records"]) == b""
        assert list_offset(wire, "flushed", -1) == 0
        # A long poll waiting now is woken by the flush that the fifth message triggers.
        waiting.sock.settimeout(30)
        waiting.send(ApiKey.FETCH, 11, fetch_body("flushed", {0: 0}, max_wait_ms=600000))
        for i in range(3, 5):
            wire.call(ApiKey.PRODUCE, 8, produce_body("flushed", {0: batch([b"m%d" % i])}))
        _, woken = waiting.receive(ApiKey.FETCH, 11)
        assert partition(woken)["high_watermark"] == 5
        assert list_offset(wire, "flushed", -1) == 5


def test_retention_from_topic_config_deletes_old_segments(flushed_only):
    topic = "short-lived"
    with WireClient(flushed_only.bootstrap) as wire:
        created = wire.call(ApiKey.CREATE_TOPICS, 4, create_body(topic, 1, {
            "retention.ms": "60000", "segment.bytes": "2000", "flush.messages": "1"}))
        assert created["topics"][0]["error_code"] == 0
        old = int(time.time() * 1000) - 3600_000
        for i in range(20):  # an hour old: past retention, in several small segments
            wire.call(ApiKey.PRODUCE, 8, produce_body(topic, {0: batch([b"x" * 500],
                                                                       timestamp=old)}))
        wire.call(ApiKey.PRODUCE, 8, produce_body(topic, {0: batch([b"fresh"])}))
        deadline = time.monotonic() + 60
        while list_offset(wire, topic, -2) == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        gone = partition(wire.call(ApiKey.FETCH, 11, fetch_body(topic, {0: 0})))
        assert gone["error_code"] == OFFSET_OUT_OF_RANGE
        # Retention may still be deleting: read from the log start as it is now.
        while True:
            earliest = list_offset(wire, topic, -2)
            assert 0 < earliest <= 20
            kept = partition(wire.call(ApiKey.FETCH, 11, fetch_body(topic, {0: earliest})))
            if kept["error_code"] != OFFSET_OUT_OF_RANGE or time.monotonic() > deadline:
                break
        assert kept["error_code"] == 0 and kept["log_start_offset"] >= earliest
