"""The fast Produce response encoder writes exactly the bytes of the generic codec, for
every version it takes (3-9), and hands everything else back (None). (The generic codec
is checked against kafka-python's in test_kafka_python_crosscheck.)"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pylog.protocol import ApiKey
from pylog.protocol.framing import decode_response, encode_response_chunks
from pylog.protocol.produce_response import encode_produce_response

int32 = st.integers(-2**31, 2**31 - 1)
int64 = st.integers(-2**63, 2**63 - 1)


@st.composite
def partition_results(draw, plain: bool) -> dict:
    errors = [] if plain else draw(st.lists(st.fixed_dictionaries({
        "batch_index": int32, "batch_index_error_message": st.none() | st.text(max_size=5)}),
        max_size=2))
    return {"index": draw(int32), "error_code": draw(st.integers(-1, 120)),
            "base_offset": draw(int64), "log_append_time_ms": draw(int64),
            "log_start_offset": draw(int64), "record_errors": errors,
            "error_message": None if plain else draw(st.none() | st.text(max_size=10))}


@st.composite
def bodies(draw, plain: bool = True) -> dict:
    topics = draw(st.lists(st.fixed_dictionaries({
        "name": st.text(min_size=1, max_size=300),
        "partition_responses": st.lists(partition_results(plain), max_size=140)}),
        max_size=3))
    return {"responses": topics, "throttle_time_ms": draw(st.integers(0, 2**31 - 1))}


def _generic(version: int, correlation_id: int, body: dict) -> bytes:
    chunks, size = encode_response_chunks(ApiKey.PRODUCE, version, correlation_id, body)
    frame = b"".join(chunks)
    assert len(frame) == size
    return frame


@settings(max_examples=150, deadline=None)
@given(version=st.integers(3, 9), correlation_id=int32, body=bodies())
def test_the_same_bytes_as_the_generic_codec(version, correlation_id, body) -> None:
    assert encode_produce_response(version, correlation_id, body) == _generic(
        version, correlation_id, body)


@settings(max_examples=100, deadline=None)
@given(version=st.integers(0, 11), correlation_id=int32, body=bodies(plain=False))
def test_what_it_does_not_take_it_hands_back(version, correlation_id, body) -> None:
    fast = encode_produce_response(version, correlation_id, body)
    unusual = any(p["record_errors"] or p["error_message"] is not None
                  for t in body["responses"] for p in t["partition_responses"])
    if not 3 <= version <= 9 or unusual:
        assert fast is None
    else:
        assert fast == _generic(version, correlation_id, body)


@settings(max_examples=60, deadline=None)
@given(version=st.integers(3, 9), body=bodies(), data=st.data())
def test_fields_left_out_for_their_defaults_go_to_the_generic_codec(version, body, data) -> None:
    """As authorization's refusals leave out what they do not know (the codec's
    defaults fill them in)."""
    results = [p for t in body["responses"] for p in t["partition_responses"]]
    for result in results:
        for key in data.draw(st.sets(st.sampled_from(
                ["log_append_time_ms", "log_start_offset", "record_errors", "error_message"]))):
            del result[key]
    fast = encode_produce_response(version, 3, body)
    assert fast is None or fast == _generic(version, 3, body)


def test_it_decodes_back_to_the_body() -> None:
    body = {"responses": [{"name": "orders", "partition_responses": [
        {"index": 2, "error_code": 0, "base_offset": 41, "log_append_time_ms": -1,
         "log_start_offset": 7, "record_errors": [], "error_message": None}]}],
        "throttle_time_ms": 0}
    for version in range(3, 10):
        frame = encode_produce_response(version, 5, body)
        assert int.from_bytes(frame[:4], "big") == len(frame) - 4
        correlation_id, decoded = decode_response(ApiKey.PRODUCE, version, frame[4:])
        assert correlation_id == 5
        expected = body["responses"][0]["partition_responses"][0]
        got = decoded["responses"][0]["partition_responses"][0]
        assert decoded["responses"][0]["name"] == "orders"
        assert {k: got[k] for k in ("index", "error_code", "base_offset")} == {
            "index": 2, "error_code": 0, "base_offset": 41}
        if version >= 5:
            assert got["log_start_offset"] == expected["log_start_offset"]
