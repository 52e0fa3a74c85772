"""The C reader of Produce request bodies (``pylog/protocol/_speedups.c``) against the
generated codec it stands in for: the same body and end for every well-formed request of
every version it takes (3-11), and on damaged bytes either the codec's answer or None
(then the codec decides), never a body the codec would not give."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pylog.errors import InvalidRequestError, UnsupportedVersionError
from pylog.protocol import ApiKey, _speedups, encode_request
from pylog.protocol.framing import (
    _REQUEST_CODECS, Request, RequestHeader, _NativeProduceBody, decode_request,
    decode_request_header)
from pylog.protocol.messages import MESSAGES

VERSIONS = range(3, 12)
int32 = st.integers(-2**31, 2**31 - 1)


@st.composite
def bodies(draw) -> dict:
    partitions = st.fixed_dictionaries({
        "index": int32, "records": st.none() | st.binary(max_size=300)})
    topics = st.fixed_dictionaries({
        "name": st.text(max_size=40), "partition_data": st.lists(partitions, max_size=5)})
    return {"transactional_id": draw(st.none() | st.text(max_size=20)),
            "acks": draw(st.integers(-2**15, 2**15 - 1)), "timeout_ms": draw(int32),
            "topic_data": draw(st.lists(topics, max_size=4))}


def _body_bytes(version: int, body: dict) -> bytes:
    """The request body alone: the frame without its size and header."""
    frame = encode_request(ApiKey.PRODUCE, version, 1, None, body)
    header = 4 + 10 + (1 if version >= 9 else 0)  # size, header v1/v2 with a null client_id
    return frame[header:]


def _generated(version: int):
    return MESSAGES[ApiKey.PRODUCE].request_codec(version)


def _plain(body: dict) -> dict:
    """``body`` with its records views turned into bytes, to compare."""
    return {**body, "topic_data": [
        {**topic, "partition_data": [
            {**p, "records": None if p["records"] is None else bytes(p["records"])}
            for p in topic["partition_data"]]}
        for topic in body["topic_data"]]}


def _native(buf, version: int, offset: int = 0):
    return _speedups.produce_body(buf, offset, version >= 9)


@settings(max_examples=300, deadline=None)
@given(version=st.sampled_from(VERSIONS), body=bodies(), prefix=st.binary(max_size=8),
       suffix=st.binary(max_size=8))
def test_the_same_body_and_end_as_the_generated_codec(version, body, prefix, suffix) -> None:
    buf = memoryview(prefix + _body_bytes(version, body) + suffix)
    native = _native(buf, version, len(prefix))
    assert native is not None
    expected, end = _generated(version).read(buf, len(prefix))
    assert native[1] == end == len(buf) - len(suffix)
    assert _plain(native[0]) == _plain(expected) == body
    assert list(native[0]) == list(expected)  # the keys in the same order
    for topic in native[0]["topic_data"]:
        for partition in topic["partition_data"]:
            if partition["records"] is not None:  # a view into the frame, not a copy
                assert isinstance(partition["records"], memoryview)
                assert partition["records"].obj is buf.obj


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(version=st.sampled_from(VERSIONS), body=bodies(), data=st.data())
def test_damaged_bytes_get_the_codecs_answer_or_none(version, body, data) -> None:
    raw = bytearray(_body_bytes(version, body))
    assume(raw)
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    raw = raw[:data.draw(st.integers(0, len(raw)))]
    buf = memoryview(bytes(raw))
    native = _native(buf, version)
    try:
        expected = _generated(version).read(buf, 0)
    except InvalidRequestError:
        assert native is None
        return
    if native is not None:
        assert native[1] == expected[1]
        assert _plain(native[0]) == _plain(expected[0])


def test_tagged_fields_are_left_to_the_generated_codec() -> None:
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 5, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": b"abc"}]}]}
    plain = _body_bytes(9, body)
    assert plain[-1] == 0  # the top level's empty tag section
    tagged = memoryview(plain[:-1] + bytes([1, 5, 1, 0xAA]))  # one unknown tag: 5
    assert _native(tagged, 9) is None
    decoded, end = _NativeProduceBody(_generated(9), True).read(tagged, 0)
    assert _plain(decoded) == body and end == len(tagged)


@pytest.mark.parametrize("damage", [
    b"\xff\xfe",                     # a topic name that is not UTF-8
    None,                            # cut in the middle of the records
])
def test_what_the_codec_refuses_reaches_the_codec(damage) -> None:
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 5, "topic_data": [
        {"name": "ab", "partition_data": [{"index": 0, "records": b"abcdef"}]}]}
    raw = bytearray(_body_bytes(8, body))
    if damage is None:
        raw = raw[:-3]
    else:
        at = raw.index(b"ab")
        raw[at:at + 2] = damage
    assert _native(memoryview(bytes(raw)), 8) is None
    with pytest.raises(InvalidRequestError):
        _NativeProduceBody(_generated(8), False).read(memoryview(bytes(raw)), 0)


def test_requests_decode_through_the_c_reader() -> None:
    body = {"transactional_id": "tx", "acks": -1, "timeout_ms": 100, "topic_data": [
        {"name": "t", "partition_data": [{"index": 2, "records": b"xyz"}]}]}
    for version in VERSIONS:
        frame = memoryview(encode_request(ApiKey.PRODUCE, version, 9, "me", body))[4:]
        decode_request(frame)  # the first decode of a version picks its codec
        assert isinstance(_REQUEST_CODECS[ApiKey.PRODUCE, version][0], _NativeProduceBody)
        request = decode_request(frame)
        assert request.header.correlation_id == 9 and request.header.client_id == "me"
        assert _plain(request.body) == body


def test_with_the_switch_off_the_generated_codec_reads_them() -> None:
    code = (
        "from pylog.protocol import ApiKey, encode_request\n"
        "from pylog.protocol.framing import decode_request, native_produce, _REQUEST_CODECS\n"
        "body = {'transactional_id': None, 'acks': 1, 'timeout_ms': 5, 'topic_data': [\n"
        "    {'name': 't', 'partition_data': [{'index': 0, 'records': b'r'}]}]}\n"
        "frame = memoryview(encode_request(ApiKey.PRODUCE, 9, 1, None, body))[4:]\n"
        "decode_request(frame)\n"
        "assert not native_produce()\n"
        "print(type(_REQUEST_CODECS[ApiKey.PRODUCE, 9][0]).__name__,\n"
        "      bytes(decode_request(frame).body['topic_data'][0]['partition_data'][0]['records']))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYLOG_PROTOCOL_SPEEDUPS": "0"}, timeout=60)
    assert out.returncode == 0, out.stderr
    name, records = out.stdout.split()
    assert name != "_NativeProduceBody" and records == "b'r'"


def _frame_of(version: int, correlation_id: int, client_id, body: dict) -> memoryview:
    return memoryview(encode_request(ApiKey.PRODUCE, version, correlation_id, client_id, body))[4:]


def _generic_request(frame: memoryview):
    """The request as the general path decodes it: the header in Python, the body by the
    generated codec."""
    header, offset = decode_request_header(frame)
    if header.api_key != ApiKey.PRODUCE:  # damage made it another kind: not the C reader's
        raise InvalidRequestError(f"api key {header.api_key}")
    body, _ = _generated(header.api_version).read(frame, offset)
    return Request(header, body)


@settings(max_examples=300, deadline=None)
@given(version=st.sampled_from(VERSIONS), correlation_id=int32,
       client_id=st.none() | st.text(max_size=30), body=bodies())
def test_whole_frames_decode_as_the_general_path_does(version, correlation_id, client_id,
                                                      body) -> None:
    frame = _frame_of(version, correlation_id, client_id, body)
    native = _speedups.produce_request(frame, version >= 9, RequestHeader, Request)
    expected = _generic_request(frame)
    assert type(native) is Request and type(native.header) is RequestHeader
    assert native.header == expected.header == (0, version, correlation_id, client_id)
    assert _plain(native.body) == _plain(expected.body) == body


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(version=st.sampled_from(VERSIONS), client_id=st.none() | st.text(max_size=10),
       body=bodies(), data=st.data())
def test_damaged_frames_get_the_general_answer_or_none(version, client_id, body, data) -> None:
    raw = bytearray(_frame_of(version, 5, client_id, body))
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    frame = memoryview(bytes(raw[:data.draw(st.integers(0, len(raw)))]))
    native = _speedups.produce_request(frame, version >= 9, RequestHeader, Request)
    try:
        expected = _generic_request(frame)
    except (InvalidRequestError, UnsupportedVersionError):
        assert native is None
        return
    if native is not None:
        assert native.header == expected.header
        assert _plain(native.body) == _plain(expected.body)


def test_frames_of_other_kinds_are_not_read_as_produce() -> None:
    frame = memoryview(encode_request(ApiKey.METADATA, 9, 1, "me", {
        "topics": None, "allow_auto_topic_creation": False,
        "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False}))[4:]
    assert _speedups.produce_request(frame, True, RequestHeader, Request) is None
