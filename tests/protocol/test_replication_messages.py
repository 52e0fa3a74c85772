"""OffsetForLeaderEpoch and CreatePartitions: hand-built bytes, every version round trip,
and byte equality with kafka-python's hand-written (pre-JSON) protocol classes.

test_kafka_python_crosscheck covers the versions kafka-python's JSON-driven classes know
(OffsetForLeaderEpoch 2-4, CreatePartitions 0-3); the hand-written classes here also
cover OffsetForLeaderEpoch v0-1, which Kafka 4.0 dropped from its spec.
"""

from io import BytesIO

import pytest
from kafka.protocol.old import admin as old_admin
from kafka.protocol.old import offset_for_leader_epoch as old_epoch
from kafka.protocol.old.types import Array, Schema

from pylog.protocol import (
    MESSAGES, ApiKey, decode_request, decode_response, encode_request, encode_response)

EPOCH = MESSAGES[ApiKey.OFFSET_FOR_LEADER_EPOCH]
CREATE_PARTITIONS = MESSAGES[ApiKey.CREATE_PARTITIONS]

EPOCH_REQ = {"replica_id": 2, "topics": [{"topic": "events", "partitions": [
    {"partition": 0, "current_leader_epoch": 5, "leader_epoch": 4}]}]}
EPOCH_RESP = {"throttle_time_ms": 100, "topics": [{"topic": "events", "partitions": [
    {"error_code": 0, "partition": 0, "leader_epoch": 4, "end_offset": 1200},
    {"error_code": 75, "partition": 1, "leader_epoch": -1, "end_offset": -1}]}]}
CREATE_REQ = {"topics": [
    {"name": "events", "count": 6, "assignments": None},
    {"name": "placed", "count": 2, "assignments": [{"broker_ids": [1, 2]}]}],
    "timeout_ms": 5000, "validate_only": False}
CREATE_RESP = {"throttle_time_ms": 0, "results": [
    {"name": "events", "error_code": 0, "error_message": None},
    {"name": "placed", "error_code": 37, "error_message": "cannot shrink"}]}


def request_body_bytes(message, version: int, body: dict) -> bytes:
    out = bytearray()
    message.request_codec(version).write(out, body)
    return bytes(out)


def response_body_bytes(message, version: int, body: dict) -> bytes:
    out = bytearray()
    message.response_codec(version).write(out, body)
    return bytes(out)


# -- expected bytes, built by hand ------------------------------------------------------

def test_offset_for_leader_epoch_v3_request_bytes():
    frame = encode_request(ApiKey.OFFSET_FOR_LEADER_EPOCH, 3, 7, "me", EPOCH_REQ)
    assert frame[4:] == (b"\x00\x17\x00\x03"          # api key 23, version 3
                         b"\x00\x00\x00\x07"          # correlation id
                         b"\x00\x02me"                # client id
                         b"\x00\x00\x00\x02"          # replica_id
                         b"\x00\x00\x00\x01"          # topics: 1
                         b"\x00\x06events"            # topic
                         b"\x00\x00\x00\x01"          # partitions: 1
                         b"\x00\x00\x00\x00"          # partition
                         b"\x00\x00\x00\x05"          # current_leader_epoch
                         b"\x00\x00\x00\x04")         # leader_epoch


def test_offset_for_leader_epoch_v4_is_flexible():
    assert request_body_bytes(EPOCH, 4, EPOCH_REQ) == (
        b"\x00\x00\x00\x02"                          # replica_id
        b"\x02"                                      # compact array: 1 topic
        b"\x07events"                                # compact string
        b"\x02"                                      # 1 partition
        b"\x00\x00\x00\x00\x00\x00\x00\x05\x00\x00\x00\x04"
        b"\x00"                                      # partition tagged fields
        b"\x00"                                      # topic tagged fields
        b"\x00")                                     # body tagged fields


def test_offset_for_leader_epoch_v0_request_and_v1_response_bytes():
    assert request_body_bytes(EPOCH, 0, EPOCH_REQ) == (
        b"\x00\x00\x00\x01\x00\x06events\x00\x00\x00\x01"
        b"\x00\x00\x00\x00"                          # partition
        b"\x00\x00\x00\x04")                         # leader_epoch only
    assert response_body_bytes(EPOCH, 1, EPOCH_RESP) == (
        b"\x00\x00\x00\x01\x00\x06events\x00\x00\x00\x02"
        b"\x00\x00" b"\x00\x00\x00\x00" b"\x00\x00\x00\x04"
        b"\x00\x00\x00\x00\x00\x00\x04\xb0"          # error, partition, epoch, end_offset
        b"\x00\x4b" b"\x00\x00\x00\x01" b"\xff\xff\xff\xff"
        b"\xff\xff\xff\xff\xff\xff\xff\xff")


def test_create_partitions_v0_request_bytes():
    assert request_body_bytes(CREATE_PARTITIONS, 0, CREATE_REQ) == (
        b"\x00\x00\x00\x02"                          # topics: 2
        b"\x00\x06events\x00\x00\x00\x06"            # name, count
        b"\xff\xff\xff\xff"                          # assignments: null
        b"\x00\x06placed\x00\x00\x00\x02"
        b"\x00\x00\x00\x01"                          # assignments: 1
        b"\x00\x00\x00\x02\x00\x00\x00\x01\x00\x00\x00\x02"  # broker_ids [1, 2]
        b"\x00\x00\x13\x88"                          # timeout_ms
        b"\x00")                                     # validate_only


def test_create_partitions_v2_is_flexible():
    assert request_body_bytes(CREATE_PARTITIONS, 2, CREATE_REQ) == (
        b"\x03"
        b"\x07events\x00\x00\x00\x06" b"\x00" b"\x00"  # null compact array, topic tags
        b"\x07placed\x00\x00\x00\x02"
        b"\x02" b"\x03\x00\x00\x00\x01\x00\x00\x00\x02" b"\x00"  # assignment and its tags
        b"\x00"
        b"\x00\x00\x13\x88\x00"
        b"\x00")
    assert response_body_bytes(CREATE_PARTITIONS, 2, CREATE_RESP) == (
        b"\x00\x00\x00\x00" b"\x03"
        b"\x07events\x00\x00" b"\x00" b"\x00"        # null compact string, tags
        b"\x07placed\x00\x25" b"\x0ecannot shrink" b"\x00"
        b"\x00")


def test_defaults_of_absent_fields():
    body = decode_request(encode_request(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, 1, "c", {
        "topics": [{"topic": "t", "partitions": [{"partition": 0, "leader_epoch": 3}]}]})[4:]).body
    assert body["replica_id"] == -2        # a consumer, not a follower
    assert body["topics"][0]["partitions"][0]["current_leader_epoch"] == -1
    request = decode_request(encode_request(ApiKey.CREATE_PARTITIONS, 0, 1, "c", {
        "topics": [{"name": "t", "count": 3}], "timeout_ms": 1, "validate_only": True})[4:]).body
    assert request["topics"][0]["assignments"] is None  # the controller places them


# -- every version round trips ----------------------------------------------------------

def epoch_request_at(version: int) -> dict:
    """EPOCH_REQ as a broker decodes it at ``version``: absent fields take defaults."""
    partition = dict(EPOCH_REQ["topics"][0]["partitions"][0])
    if version < 2:
        partition["current_leader_epoch"] = -1
    return {"replica_id": EPOCH_REQ["replica_id"] if version >= 3 else -2,
            "topics": [{"topic": "events", "partitions": [partition]}]}


def epoch_response_at(version: int) -> dict:
    partitions = [dict(p, leader_epoch=p["leader_epoch"] if version >= 1 else -1)
                  for p in EPOCH_RESP["topics"][0]["partitions"]]
    return {"throttle_time_ms": 100 if version >= 2 else 0,
            "topics": [{"topic": "events", "partitions": partitions}]}


@pytest.mark.parametrize("version", range(5))
def test_offset_for_leader_epoch_round_trips(version):
    frame = encode_request(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, 5, "c", EPOCH_REQ)
    assert decode_request(frame[4:]).body == epoch_request_at(version)
    frame = encode_response(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, 6, EPOCH_RESP)
    assert decode_response(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, frame[4:]) == (
        6, epoch_response_at(version))


@pytest.mark.parametrize("version", range(4))
def test_create_partitions_round_trips(version):
    frame = encode_request(ApiKey.CREATE_PARTITIONS, version, 5, "c", CREATE_REQ)
    assert decode_request(frame[4:]).body == CREATE_REQ
    frame = encode_response(ApiKey.CREATE_PARTITIONS, version, 6, CREATE_RESP)
    assert decode_response(ApiKey.CREATE_PARTITIONS, version, frame[4:]) == (6, CREATE_RESP)


def test_versions_outside_the_spec_are_refused():
    with pytest.raises(ValueError):
        EPOCH.request_codec(5)
    with pytest.raises(ValueError):
        CREATE_PARTITIONS.response_codec(4)


# -- kafka-python's hand-written classes ------------------------------------------------

def as_tuples(body: dict, schema: Schema) -> tuple:
    """``body`` as the positional tuples one of kafka-python's ``Schema`` objects encodes."""
    values = []
    for name, field in zip(schema.names, schema.fields):
        if name == "tags":
            continue  # Schema.encode adds empty tagged fields itself
        value = body[name]
        inner = getattr(field, "array_of", None)
        if isinstance(field, Array) and isinstance(inner, Schema) and value is not None:
            value = [as_tuples(item, inner) for item in value]
        values.append(value)
    return tuple(values)


def old_class(classes: list, version: int):
    cls = classes[version]
    assert cls.API_VERSION == version
    return cls


@pytest.mark.parametrize("version", range(5))
def test_offset_for_leader_epoch_matches_kafka_python_bytes(version):
    request = old_class(old_epoch.OffsetForLeaderEpochRequest, version).SCHEMA
    theirs = request.encode(as_tuples(epoch_request_at(version), request))
    assert request_body_bytes(EPOCH, version, EPOCH_REQ) == theirs
    assert EPOCH.request_codec(version).read(theirs, 0) == (epoch_request_at(version), len(theirs))
    response = old_class(old_epoch.OffsetForLeaderEpochResponse, version).SCHEMA
    theirs = response.encode(as_tuples(epoch_response_at(version), response))
    assert response_body_bytes(EPOCH, version, EPOCH_RESP) == theirs
    assert EPOCH.response_codec(version).read(theirs, 0) == (
        epoch_response_at(version), len(theirs))


@pytest.mark.parametrize("version", [0, 1])
def test_create_partitions_matches_kafka_python_bytes(version):
    # Their request nests count and assignments in a struct (the pre-JSON layout);
    # the wire bytes are the same.
    request = old_class(old_admin.CreatePartitionsRequest, version).SCHEMA
    theirs = request.encode((
        [("events", (6, None)), ("placed", (2, [[1, 2]]))], 5000, False))
    assert request_body_bytes(CREATE_PARTITIONS, version, CREATE_REQ) == theirs
    assert request.decode(BytesIO(request_body_bytes(CREATE_PARTITIONS, version, CREATE_REQ))) == (
        [("events", (6, None)), ("placed", (2, [[1, 2]]))], 5000, False)
    response = old_class(old_admin.CreatePartitionsResponse, version).SCHEMA
    theirs = response.encode(as_tuples(CREATE_RESP, response))
    assert response_body_bytes(CREATE_PARTITIONS, version, CREATE_RESP) == theirs
    assert CREATE_PARTITIONS.response_codec(version).read(theirs, 0) == (CREATE_RESP, len(theirs))
