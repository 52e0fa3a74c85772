"""Primitive types against hand-built bytes, and round trips over a reference model."""

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pylog.errors import InvalidRequestError
from pylog.protocol import primitives as p


def written(writer, value) -> bytes:
    out = bytearray()
    writer(out, value)
    return bytes(out)


@pytest.mark.parametrize("value, raw", [
    (0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (-2, b"\x03"), (63, b"\x7e"),
    (-64, b"\x7f"), (64, b"\x80\x01"), (150, b"\xac\x02"), (-150, b"\xab\x02"),
])
def test_zigzag_varint_bytes(value, raw):
    assert written(p.write_varint, value) == raw
    assert p.read_varint(raw, 0) == (value, len(raw))


@pytest.mark.parametrize("value, raw", [(0, b"\x00"), (127, b"\x7f"), (128, b"\x80\x01"),
                                        (300, b"\xac\x02"), (2 ** 32, b"\x80\x80\x80\x80\x10")])
def test_unsigned_varint_bytes(value, raw):
    assert written(p.write_unsigned_varint, value) == raw
    assert p.read_unsigned_varint(raw, 0) == (value, len(raw))


@given(st.integers(min_value=-(2 ** 63), max_value=2 ** 63 - 1))
def test_varlong_round_trip(value):
    raw = written(p.write_varlong, value)
    assert p.read_varlong(raw, 0) == (value, len(raw))
    assert len(raw) <= 10


def test_strings_classic_and_compact():
    assert written(p.write_string, "héllo") == b"\x00\x06h\xc3\xa9llo"
    assert written(p.write_nullable_string, None) == b"\xff\xff"
    assert written(p.write_compact_string, "ab") == b"\x03ab"
    assert written(p.write_compact_nullable_string, None) == b"\x00"
    assert p.read_nullable_string(b"\xff\xff", 0) == (None, 2)
    assert p.read_compact_string(b"\x03ab!", 0) == ("ab", 3)
    assert p.read_compact_nullable_string(b"\x00", 0) == (None, 1)
    with pytest.raises(InvalidRequestError):
        p.read_string(b"\xff\xff", 0)


def test_bytes_stay_zero_copy_views():
    buf = memoryview(b"\x00\x00\x00\x03abcZ")
    value, offset = p.read_bytes(buf, 0)
    assert isinstance(value, memoryview) and bytes(value) == b"abc" and offset == 7
    assert p.read_compact_nullable_bytes(b"\x04xyz", 0)[0] == b"xyz"
    assert written(p.write_compact_bytes, b"xyz") == b"\x04xyz"


def test_arrays_and_null_arrays():
    raw = b"\x00\x00\x00\x02\x00\x00\x00\x07\x00\x00\x00\x09"
    assert p.read_array(raw, 0, p.read_int32) == ([7, 9], 12)
    assert written(lambda o, v: p.write_array(o, v, p.write_int32), [7, 9]) == raw
    assert p.read_array(b"\xff\xff\xff\xff", 0, p.read_int32) == (None, 4)
    assert written(lambda o, v: p.write_array(o, v, p.write_int32, compact=True), [1]) == \
        b"\x02\x00\x00\x00\x01"
    assert p.read_array(b"\x00", 0, p.read_int8, compact=True) == (None, 1)


def test_null_in_a_non_nullable_array_is_invalid_request():
    with pytest.raises(InvalidRequestError, match="non-nullable array"):
        p.read_array(b"\xff\xff\xff\xff", 0, p.read_int32, nullable=False)
    with pytest.raises(InvalidRequestError, match="non-nullable array"):
        p.read_array(b"\x00", 0, p.read_int8, compact=True, nullable=False)


def test_schema_arrays_are_null_only_where_declared_nullable():
    from pylog.protocol import ApiKey, MESSAGES
    produce = MESSAGES[ApiKey.PRODUCE].request_codec(3)
    raw = b"\xff\xff" + b"\x00\x01" + b"\x00\x00\x03\xe8" + b"\xff\xff\xff\xff"
    with pytest.raises(InvalidRequestError, match="non-nullable array"):
        produce.read(raw, 0)
    metadata = MESSAGES[ApiKey.METADATA].request_codec(1)
    assert metadata.read(b"\xff\xff\xff\xff", 0)[0]["topics"] is None


def test_hostile_array_length_does_not_allocate():
    with pytest.raises(InvalidRequestError):
        p.read_array(b"\x7f\xff\xff\xff\x00", 0, p.read_int8)


def test_tagged_fields_sorted_and_skipped():
    raw = written(p.write_tagged_fields, {5: b"\x01", 1: b"ab"})
    assert raw == b"\x02\x01\x02ab\x05\x01\x01"
    fields, offset = p.read_tagged_fields(raw + b"tail", 0)
    assert {k: bytes(v) for k, v in fields.items()} == {1: b"ab", 5: b"\x01"}
    assert offset == len(raw)


def test_uuid():
    value = uuid.uuid4()
    assert p.read_uuid(written(p.write_uuid, value), 0) == (value, 16)


@pytest.mark.parametrize("reader, raw", [
    (p.read_int32, b"\x00\x00"), (p.read_int64, b"\x00" * 7), (p.read_string, b"\x00\x05ab"),
    (p.read_bytes, b"\x00\x00\x00\x09abc"), (p.read_unsigned_varint, b"\x80\x80"),
    (p.read_compact_string, b"\x09ab"), (p.read_uuid, b"\x00" * 15),
    (p.read_string, b"\x00\x02\xff\xfe"),
])
def test_truncated_or_invalid_input_is_invalid_request(reader, raw):
    with pytest.raises(InvalidRequestError):
        reader(raw, 0)
