"""Headers and framing against hand-built frames; schema derivation per version."""

import pytest

from pylog.errors import InvalidRequestError, UnsupportedVersionError
from pylog.protocol import (
    MESSAGES, ApiKey, decode_request, decode_response, encode_request, encode_response,
    encode_response_chunks, response_header_version)


def test_metadata_v1_request_bytes():
    frame = encode_request(ApiKey.METADATA, 1, 7, "me", {"topics": None})
    assert frame == (b"\x00\x00\x00\x10"            # size
                     b"\x00\x03\x00\x01"            # api key 3, version 1
                     b"\x00\x00\x00\x07"            # correlation id
                     b"\x00\x02me"                  # client id
                     b"\xff\xff\xff\xff")           # topics: null (all topics)


def test_flexible_request_uses_header_v2_and_compact_body():
    frame = encode_request(ApiKey.API_VERSIONS, 3, 1, "c", {
        "client_software_name": "x", "client_software_version": "1"})
    assert frame[4:] == (b"\x00\x12\x00\x03\x00\x00\x00\x01\x00\x01c"
                         b"\x00"          # header tagged fields
                         b"\x02x\x021"    # compact strings
                         b"\x00")         # body tagged fields
    request = decode_request(memoryview(frame)[4:])
    assert request.header.client_id == "c"
    assert request.body == {"client_software_name": "x", "client_software_version": "1"}


def test_fields_absent_in_a_version_get_defaults():
    frame = encode_request(ApiKey.PRODUCE, 3, 1, None, {"acks": -1, "timeout_ms": 5,
                                                       "topic_data": []})
    body = decode_request(frame[4:]).body
    assert body["transactional_id"] is None and body["acks"] == -1
    response = encode_response(ApiKey.PRODUCE, 3, 9, {"responses": [{"name": "t",
        "partition_responses": [{"index": 0, "error_code": 0, "base_offset": 5}]}]})
    _, decoded = decode_response(ApiKey.PRODUCE, 3, response[4:])
    partition = decoded["responses"][0]["partition_responses"][0]
    assert partition["log_start_offset"] == -1          # v5+ only: default
    assert partition["log_append_time_ms"] == -1        # v2+: sent, defaulted on encode
    assert decoded["throttle_time_ms"] == 0


def test_api_versions_response_header_is_always_v0():
    assert response_header_version(ApiKey.API_VERSIONS, 3) == 0
    assert response_header_version(ApiKey.METADATA, 9) == 1
    assert response_header_version(ApiKey.METADATA, 8) == 0
    raw = encode_response(ApiKey.API_VERSIONS, 3, 42, {"error_code": 0, "api_keys": [
        {"api_key": 0, "min_version": 0, "max_version": 9}]})
    assert raw[4:8] == b"\x00\x00\x00\x2a" and raw[8:10] == b"\x00\x00"   # no header tags
    assert decode_response(ApiKey.API_VERSIONS, 3, raw[4:])[1]["api_keys"][0]["max_version"] == 9


def test_unknown_key_and_version_are_refused():
    frame = bytearray(encode_request(ApiKey.METADATA, 1, 7, "me", {"topics": None}))
    frame[4:6] = b"\x00\x63"
    with pytest.raises(InvalidRequestError):
        decode_request(bytes(frame[4:]))
    frame[4:8] = b"\x00\x03\x00\x63"
    with pytest.raises(UnsupportedVersionError):
        decode_request(bytes(frame[4:]))


def test_truncated_request_body_is_invalid_request():
    frame = encode_request(ApiKey.PRODUCE, 8, 1, "c", {"acks": 1, "timeout_ms": 5, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": b"x" * 40}]}]})
    for cut in range(12, len(frame) - 1, 7):
        with pytest.raises(InvalidRequestError):
            decode_request(frame[4:cut])


class Region:
    """A stand-in file region value: only its length matters to the encoder."""

    def __init__(self, length):
        self.length = length


@pytest.mark.parametrize("version", [4, 11, 12])
def test_fetch_response_chunks_leave_room_for_file_regions(version):
    region = Region(1000)
    body = {"responses": [{"topic": "t", "partitions": [
        {"partition_index": 0, "high_watermark": 10, "records": region}]}]}
    chunks, total = encode_response_chunks(ApiKey.FETCH, version, 3, body)
    assert chunks[1] is region and all(isinstance(c, bytes) for c in chunks[2:])
    assert total == sum(len(c) if isinstance(c, bytes) else c.length for c in chunks)
    assert int.from_bytes(chunks[0][:4], "big") == total - 4
    # Replacing the region by bytes of that length gives a frame that decodes.
    frame = b"".join(c if isinstance(c, bytes) else b"r" * c.length for c in chunks)
    _, decoded = decode_response(ApiKey.FETCH, version, frame[4:])
    assert bytes(decoded["responses"][0]["partitions"][0]["records"]) == b"r" * 1000


def test_every_declared_version_round_trips_its_defaults():
    for message in MESSAGES.values():
        for version in range(message.min_version, message.max_version + 1):
            for codec in (message.request_codec(version), message.response_codec(version)):
                value = codec.default_value()
                out = bytearray()
                codec.write(out, value)
                assert codec.read(bytes(out), 0) == (value, len(out))


def test_generated_codecs_match_the_interpreted_reference():
    from tests.protocol.test_kafka_python_crosscheck import CASES

    samples = {key: (request, response) for key, _, _, request, response, _ in CASES}
    for message in MESSAGES.values():
        for version in range(message.min_version, message.max_version + 1):
            for side in ("request", "response"):
                codec = getattr(message, f"{side}_codec")(version)
                bodies = [codec.default_value()]
                if message.key in samples:
                    bodies.append(samples[message.key][side == "response"])
                for body in bodies:
                    fast, reference = bytearray(), bytearray()
                    codec.write(fast, body)
                    codec.interpreted_write(reference, body)
                    assert fast == reference, (message.name, version, side)
                    assert codec.read(bytes(fast), 0) == codec.interpreted_read(bytes(fast), 0)
                    if len(fast) > 1:
                        with pytest.raises(InvalidRequestError):
                            codec.read(bytes(fast[:-1]), 0)


def test_out_of_range_values_are_refused_when_encoding():
    with pytest.raises(ValueError, match="acks"):
        encode_request(ApiKey.PRODUCE, 8, 1, "c", {"acks": 70000, "timeout_ms": 1,
                                                   "topic_data": []})
