"""Single records inside a v2 batch: encode one, decode a whole records section.

Each record is a varint-prefixed structure (varints are zigzag-encoded, as in protobuf)::

    field            type
    length           varint   bytes of the record after this field
    attributes       int8     unused, 0
    timestampDelta   varlong  timestamp - batch baseTimestamp
    offsetDelta      varint   offset - batch baseOffset
    keyLength        varint   -1 for a null key
    key              bytes
    valueLength      varint   -1 for a null value
    value            bytes
    headersCount     varint
    headers          headersCount x (keyLength varint, key utf-8,
                                     valueLength varint (-1 null), value)

Decoding is the loader's hot path, so :func:`decode_records_into` works on a ``bytes``
object with the one-byte varint case inlined and appends straight to column lists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Sequence

from pylog.errors import RecordDecodeError

Header = tuple[str, "bytes | None"]
Headers = tuple[Header, ...]

_NULL_LENGTH = b"\x01"  # zigzag -1
_MIN_RECORD_BODY = 6  # attributes and five one-byte varints


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record: absolute offset, timestamp in ms, key, value and headers."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()


class RecordInput(NamedTuple):
    """A record to put in a batch; the broker assigns the offset."""

    key: bytes | None
    value: bytes | None
    headers: Sequence[Header] = ()
    timestamp: int = 0


def _encode_varint_uncached(value: int) -> bytes:
    zigzag = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while zigzag >= 0x80:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


# Varints of -8192..8191 (one and two bytes: lengths, deltas) come from a table.
_SMALL_VARINTS = {v: _encode_varint_uncached(v) for v in range(-8192, 8192)}


def encode_varint(value: int) -> bytes:
    """Zigzag varint encoding of a signed 64-bit integer."""
    small = _SMALL_VARINTS.get(value)
    return small if small is not None else _encode_varint_uncached(value)


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Decode the zigzag varint at ``buf[pos:]``; return ``(value, next position)``."""
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise RecordDecodeError(f"varint runs past the end of the records at position {pos}")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise RecordDecodeError(f"varint longer than 10 bytes ending at position {pos}")


def _encode_bytes(value: bytes | None) -> bytes:
    if value is None:
        return _NULL_LENGTH
    return encode_varint(len(value)) + bytes(value)


def encode_record(offset_delta: int, timestamp_delta: int, key: bytes | None,
                  value: bytes | None, headers: Sequence[Header] = ()) -> bytes:
    """The bytes of one record, length prefix included."""
    parts = [b"\x00", encode_varint(timestamp_delta), encode_varint(offset_delta),
             _encode_bytes(key), _encode_bytes(value), encode_varint(len(headers))]
    for header_key, header_value in headers:
        parts.append(_encode_bytes(header_key.encode("utf-8")))
        parts.append(_encode_bytes(header_value))
    body = b"".join(parts)
    return encode_varint(len(body)) + body


def record_size_bound(key: bytes | None, value: bytes | None, headers: Sequence[Header] = ()) -> int:
    """An upper bound of :func:`encode_record`'s output size, without encoding."""
    size = 5 + 1 + 10 + 5 + 5 + 5 + 5
    size += len(key) if key is not None else 0
    size += len(value) if value is not None else 0
    for header_key, header_value in headers:
        size += 10 + len(header_key) * 4 + (len(header_value) if header_value is not None else 0)
    return size


def _decode_headers(data: bytes, pos: int, count: int, end: int) -> tuple[Headers, int]:
    if count < 0:
        raise RecordDecodeError(f"negative header count {count}")
    headers = []
    for _ in range(count):
        key_length, pos = read_varint(data, pos)
        if key_length < 0 or pos + key_length > end:
            raise RecordDecodeError(f"header key length {key_length} out of range")
        try:
            key = data[pos:pos + key_length].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RecordDecodeError(f"header key is not UTF-8: {exc}") from None
        pos += key_length
        value_length, pos = read_varint(data, pos)
        if value_length < -1 or pos + value_length > end:
            raise RecordDecodeError(f"header value length {value_length} out of range")
        value = None if value_length == -1 else data[pos:pos + value_length]
        pos += max(value_length, 0)
        headers.append((key, value))
    return tuple(headers), pos


def decode_records_into(data: bytes, count: int, base_offset: int, base_timestamp: int,
                        offsets: list, timestamps: list, keys: list, values: list,
                        headers: list) -> None:
    """Decode ``count`` records filling all of ``data``; append each field to its list.

    Raises RecordDecodeError when a record is malformed, the count does not match or
    bytes are left over. Nothing is appended for a batch that fails.
    """
    n_before = len(offsets)
    try:
        _decode_loop(data, count, base_offset, base_timestamp,
                     offsets.append, timestamps.append, keys.append, values.append, headers.append)
    except (IndexError, RecordDecodeError) as exc:
        for column in (offsets, timestamps, keys, values, headers):
            del column[n_before:]
        if isinstance(exc, RecordDecodeError):
            raise
        raise RecordDecodeError("record runs past the end of the batch") from None


def _decode_loop(data, count, base_offset, base_timestamp,
                 add_offset, add_timestamp, add_key, add_value, add_headers) -> None:
    # One- and two-byte varints (values -8192..8191) are decoded inline; longer ones
    # call read_varint.
    pos = 0
    end = len(data)
    for _ in range(count):
        b = data[pos]
        if b < 128:
            length = (b >> 1) ^ -(b & 1)
            pos += 1
        elif data[pos + 1] < 128:  # two bytes
            length = (b & 0x7F) | (data[pos + 1] << 7)
            length = (length >> 1) ^ -(length & 1)
            pos += 2
        else:
            length, pos = read_varint(data, pos)
        record_end = pos + length
        if length < _MIN_RECORD_BODY or record_end > end:
            raise RecordDecodeError(f"record length {length} at position {pos} out of range")
        b = data[pos + 1]  # skip attributes
        if b < 128:
            ts_delta = (b >> 1) ^ -(b & 1)
            pos += 2
        elif data[pos + 2] < 128:  # two bytes
            ts_delta = (b & 0x7F) | (data[pos + 2] << 7)
            ts_delta = (ts_delta >> 1) ^ -(ts_delta & 1)
            pos += 3
        else:
            ts_delta, pos = read_varint(data, pos + 1)
        b = data[pos]
        if b < 128:
            offset_delta = (b >> 1) ^ -(b & 1)
            pos += 1
        elif data[pos + 1] < 128:  # two bytes
            offset_delta = (b & 0x7F) | (data[pos + 1] << 7)
            offset_delta = (offset_delta >> 1) ^ -(offset_delta & 1)
            pos += 2
        else:
            offset_delta, pos = read_varint(data, pos)
        b = data[pos]
        if b < 128:
            key_length = (b >> 1) ^ -(b & 1)
            pos += 1
        elif data[pos + 1] < 128:  # two bytes
            key_length = (b & 0x7F) | (data[pos + 1] << 7)
            key_length = (key_length >> 1) ^ -(key_length & 1)
            pos += 2
        else:
            key_length, pos = read_varint(data, pos)
        if key_length >= 0:
            key = data[pos:pos + key_length]
            pos += key_length
        elif key_length == -1:
            key = None
        else:
            raise RecordDecodeError(f"key length {key_length} out of range")
        b = data[pos]
        if b < 128:
            value_length = (b >> 1) ^ -(b & 1)
            pos += 1
        elif data[pos + 1] < 128:  # two bytes
            value_length = (b & 0x7F) | (data[pos + 1] << 7)
            value_length = (value_length >> 1) ^ -(value_length & 1)
            pos += 2
        else:
            value_length, pos = read_varint(data, pos)
        if value_length >= 0:
            value = data[pos:pos + value_length]
            pos += value_length
        elif value_length == -1:
            value = None
        else:
            raise RecordDecodeError(f"value length {value_length} out of range")
        b = data[pos]
        if b == 0:
            record_headers = ()
            pos += 1
        else:
            header_count, pos = read_varint(data, pos)
            record_headers, pos = _decode_headers(data, pos, header_count, record_end)
        if pos != record_end:
            raise RecordDecodeError(
                f"record ending at position {record_end} has {record_end - pos} bytes left over")
        add_offset(base_offset + offset_delta)
        add_timestamp(base_timestamp + ts_delta)
        add_key(key)
        add_value(value)
        add_headers(record_headers)
    if pos != end:
        raise RecordDecodeError(f"{end - pos} bytes after the last of {count} records")
