"""Kafka protocol primitive types: stateless readers and appending writers.

Every reader is ``read_x(buf, offset) -> (value, new_offset)`` over ``bytes`` or
``memoryview``; every writer is ``write_x(out: bytearray, value) -> None`` and appends.
No I/O, no state. A read past the end of ``buf`` raises ``InvalidRequestError`` (a
truncated frame), so callers never see ``struct.error`` or ``IndexError``.

Layouts (all integers big-endian)::

    int8/16/32/64, uint32   fixed width, two's complement (uint32 unsigned)
    float64                 IEEE 754 double
    bool                    int8, 0 or 1
    unsigned varint         7 bits per byte, low groups first, high bit = more bytes
    varint / varlong        zigzag-encoded signed value as an unsigned varint
    uuid                    16 raw bytes
    string                  int16 length N, then N UTF-8 bytes (nullable: N = -1 is null)
    bytes                   int32 length N, then N bytes (nullable: N = -1 is null)
    compact string / bytes  unsigned varint N + 1, then N bytes (0 is null)
    array                   int32 count N (-1 is null), then N elements
    compact array           unsigned varint N + 1 (0 is null), then N elements
    tagged fields           unsigned varint count, then per field: unsigned varint tag,
                            unsigned varint size, size bytes
"""

from __future__ import annotations

import base64
import struct
import uuid
from typing import Any, Callable

from pylog.errors import InvalidRequestError

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UINT32 = struct.Struct(">I")
FLOAT64 = struct.Struct(">d")

ZERO_UUID = uuid.UUID(int=0)


def uuid_text(value: uuid.UUID) -> str:
    """A UUID as Kafka writes it (topic and cluster ids): url-safe base64 of its 16
    bytes, unpadded."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()


def parse_uuid_text(text: str) -> uuid.UUID:
    """The inverse of :func:`uuid_text`; ValueError if ``text`` is not one."""
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != 16:
        raise ValueError(f"not a 16-byte id: {text!r}")
    return uuid.UUID(bytes=raw)


Reader = Callable[[Any, int], tuple[Any, int]]
Writer = Callable[[bytearray, Any], None]


def _truncated(what: str, offset: int) -> InvalidRequestError:
    return InvalidRequestError(f"truncated {what} at byte {offset}")


def _fixed(st: struct.Struct, what: str) -> tuple[Reader, Writer]:
    size = st.size
    unpack_from = st.unpack_from
    pack = st.pack

    def read(buf, offset: int):
        if offset + size > len(buf):
            raise _truncated(what, offset)
        return unpack_from(buf, offset)[0], offset + size

    def write(out: bytearray, value) -> None:
        try:
            out += pack(value)
        except struct.error as exc:
            raise ValueError(f"{what} out of range: {value!r}") from exc

    return read, write


read_int8, write_int8 = _fixed(INT8, "int8")
read_int16, write_int16 = _fixed(INT16, "int16")
read_int32, write_int32 = _fixed(INT32, "int32")
read_int64, write_int64 = _fixed(INT64, "int64")
read_uint32, write_uint32 = _fixed(UINT32, "uint32")
read_float64, write_float64 = _fixed(FLOAT64, "float64")


def read_bool(buf, offset: int) -> tuple[bool, int]:
    value, offset = read_int8(buf, offset)
    return value != 0, offset


def write_bool(out: bytearray, value: bool) -> None:
    out.append(1 if value else 0)


def read_unsigned_varint(buf, offset: int) -> tuple[int, int]:
    value = 0
    shift = 0
    end = len(buf)
    while True:
        if offset >= end:
            raise _truncated("varint", offset)
        byte = buf[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, offset
        shift += 7
        if shift > 63:
            raise InvalidRequestError(f"varint longer than 10 bytes at byte {offset}")


def write_unsigned_varint(out: bytearray, value: int) -> None:
    if value < 0:
        raise ValueError(f"unsigned varint cannot be negative: {value}")
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def read_varint(buf, offset: int) -> tuple[int, int]:
    raw, offset = read_unsigned_varint(buf, offset)
    return (raw >> 1) ^ -(raw & 1), offset


def write_varint(out: bytearray, value: int) -> None:
    write_unsigned_varint(out, ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


# Varlong has the same encoding as varint on the wire; only the range differs.
read_varlong = read_varint
write_varlong = write_varint


def read_uuid(buf, offset: int) -> tuple[uuid.UUID, int]:
    if offset + 16 > len(buf):
        raise _truncated("uuid", offset)
    return uuid.UUID(bytes=bytes(buf[offset:offset + 16])), offset + 16


def write_uuid(out: bytearray, value: uuid.UUID | None) -> None:
    out += (value or ZERO_UUID).bytes


def _slice(buf, offset: int, length: int, what: str):
    end = offset + length
    if length < 0 or end > len(buf):
        raise _truncated(what, offset)
    return buf[offset:end], end


def _text(raw, offset: int) -> str:
    try:
        return bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidRequestError(f"string at byte {offset} is not UTF-8") from None


def read_nullable_string(buf, offset: int) -> tuple[str | None, int]:
    length, offset = read_int16(buf, offset)
    if length == -1:
        return None, offset
    raw, end = _slice(buf, offset, length, "string")
    return _text(raw, offset), end


def read_string(buf, offset: int) -> tuple[str, int]:
    value, end = read_nullable_string(buf, offset)
    if value is None:
        raise InvalidRequestError(f"null in a non-nullable string at byte {offset}")
    return value, end


def write_nullable_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out += INT16.pack(-1)
        return
    raw = value.encode("utf-8")
    out += INT16.pack(len(raw))
    out += raw


write_string = write_nullable_string


def read_compact_nullable_string(buf, offset: int) -> tuple[str | None, int]:
    length, offset = read_unsigned_varint(buf, offset)
    if length == 0:
        return None, offset
    raw, end = _slice(buf, offset, length - 1, "compact string")
    return _text(raw, offset), end


def read_compact_string(buf, offset: int) -> tuple[str, int]:
    value, end = read_compact_nullable_string(buf, offset)
    if value is None:
        raise InvalidRequestError(f"null in a non-nullable string at byte {offset}")
    return value, end


def write_compact_nullable_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out.append(0)
        return
    raw = value.encode("utf-8")
    write_unsigned_varint(out, len(raw) + 1)
    out += raw


write_compact_string = write_compact_nullable_string


def read_nullable_bytes(buf, offset: int):
    """Returns a slice of ``buf`` (a memoryview stays a zero-copy view) or None."""
    length, offset = read_int32(buf, offset)
    if length == -1:
        return None, offset
    return _slice(buf, offset, length, "bytes")


def read_bytes(buf, offset: int):
    value, end = read_nullable_bytes(buf, offset)
    if value is None:
        raise InvalidRequestError(f"null in non-nullable bytes at byte {offset}")
    return value, end


def write_nullable_bytes(out: bytearray, value) -> None:
    if value is None:
        out += INT32.pack(-1)
        return
    out += INT32.pack(len(value))
    out += value


write_bytes = write_nullable_bytes


def read_compact_nullable_bytes(buf, offset: int):
    length, offset = read_unsigned_varint(buf, offset)
    if length == 0:
        return None, offset
    return _slice(buf, offset, length - 1, "compact bytes")


def read_compact_bytes(buf, offset: int):
    value, end = read_compact_nullable_bytes(buf, offset)
    if value is None:
        raise InvalidRequestError(f"null in non-nullable bytes at byte {offset}")
    return value, end


def write_compact_nullable_bytes(out: bytearray, value) -> None:
    if value is None:
        out.append(0)
        return
    write_unsigned_varint(out, len(value) + 1)
    out += value


write_compact_bytes = write_compact_nullable_bytes


def read_array_length(buf, offset: int) -> tuple[int, int]:
    """Element count of a classic array; -1 means null."""
    count, offset = read_int32(buf, offset)
    if count < -1:
        raise InvalidRequestError(f"negative array length {count} at byte {offset - 4}")
    return count, offset


def read_compact_array_length(buf, offset: int) -> tuple[int, int]:
    """Element count of a compact array; -1 means null."""
    count, offset = read_unsigned_varint(buf, offset)
    return count - 1, offset


def read_array(buf, offset: int, read_element: Reader, compact: bool = False,
               nullable: bool = True):
    """A whole array as a list (None if null; InvalidRequestError if null and not nullable)."""
    start = offset
    count, offset = (read_compact_array_length if compact else read_array_length)(buf, offset)
    if count == -1:
        if not nullable:
            raise InvalidRequestError(f"null in a non-nullable array at byte {start}")
        return None, offset
    # Each element takes at least one byte: refuse counts the buffer cannot hold,
    # so a hostile length never allocates.
    if count > len(buf) - offset:
        raise _truncated("array", offset)
    items = []
    for _ in range(count):
        item, offset = read_element(buf, offset)
        items.append(item)
    return items, offset


def write_array(out: bytearray, items, write_element: Writer, compact: bool = False) -> None:
    if items is None:
        if compact:
            out.append(0)
        else:
            out += INT32.pack(-1)
        return
    if compact:
        write_unsigned_varint(out, len(items) + 1)
    else:
        out += INT32.pack(len(items))
    for item in items:
        write_element(out, item)


def read_tagged_fields(buf, offset: int) -> tuple[dict[int, Any], int]:
    """Tagged fields as {tag: raw bytes slice}; callers decode the tags they know."""
    count, offset = read_unsigned_varint(buf, offset)
    fields: dict[int, Any] = {}
    for _ in range(count):
        tag, offset = read_unsigned_varint(buf, offset)
        size, offset = read_unsigned_varint(buf, offset)
        fields[tag], offset = _slice(buf, offset, size, "tagged field")
    return fields, offset


def write_tagged_fields(out: bytearray, fields: dict[int, bytes]) -> None:
    """Write {tag: encoded bytes} in ascending tag order, as the protocol requires."""
    write_unsigned_varint(out, len(fields))
    for tag in sorted(fields):
        raw = fields[tag]
        write_unsigned_varint(out, tag)
        write_unsigned_varint(out, len(raw))
        out += raw
