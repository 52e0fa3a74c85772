"""Produce responses the fast way.

A broker answers every Produce request, and nearly all answers look alike: a topic or
a few, a partition or a few each, an error code and offsets, no record errors and no
error message. ``encode_produce_response`` writes those with precompiled structs, several
times faster than the generic codec; anything else (record errors, an error message,
versions outside 3-9) gets None and the generic codec writes it. The tests check that
both give the same bytes for every version.
"""

from __future__ import annotations

import struct

from pylog.protocol.primitives import write_unsigned_varint

_HEADER = struct.Struct(">ii")  # size, correlation id
_COUNT = struct.Struct(">i")
_NAME_LENGTH = struct.Struct(">h")
_THROTTLE = struct.Struct(">i")
_FLEXIBLE_END = struct.Struct(">iB")  # throttle time, no tagged fields

# Per partition: index, error code, base offset, log append time, then by version the
# log start offset; v8 adds an empty record_errors array (int32 0) and a null
# error_message (int16 -1); v9 the same in compact form plus no tagged fields.
_PARTITION = {
    3: struct.Struct(">ihqq"), 4: struct.Struct(">ihqq"),
    5: struct.Struct(">ihqqq"), 6: struct.Struct(">ihqqq"), 7: struct.Struct(">ihqqq"),
    8: struct.Struct(">ihqqqih"), 9: struct.Struct(">ihqqqBBB"),
}
_PARTITION_TAIL = {8: (0, -1), 9: (1, 0, 0)}

_names: dict[tuple[str, bool], bytes] = {}
_MAX_NAMES = 100_000  # encoded topic names kept


def encode_produce_response(version: int, correlation_id: int, body: dict) -> bytes | None:
    """The size-prefixed response frame, or None if the generic codec must write it
    (also when a field is left out for the codec's default, or a value is out of range:
    the codec knows the defaults and gives the errors)."""
    try:
        return _encode(version, correlation_id, body)
    except (KeyError, struct.error):
        return None


def _encode(version: int, correlation_id: int, body: dict) -> bytes | None:
    partition = _PARTITION.get(version)
    if partition is None:
        return None
    flexible = version >= 9
    tail = _PARTITION_TAIL.get(version, ())
    responses = body["responses"]
    if len(responses) == 1 and len(responses[0]["partition_responses"]) == 1 and version >= 5:
        return _one_partition(version, flexible, tail, correlation_id, body, partition)
    parts = [b""]  # the header, once the size is known
    parts.append(_count(len(responses), flexible))
    pack = partition.pack
    for topic in responses:
        parts.append(_name(topic["name"], flexible))
        results = topic["partition_responses"]
        parts.append(_count(len(results), flexible))
        for result in results:
            if result["record_errors"] or result["error_message"] is not None:
                return None
            if version >= 5:
                parts.append(pack(result["index"], result["error_code"], result["base_offset"],
                                  result["log_append_time_ms"], result["log_start_offset"],
                                  *tail))
            else:
                parts.append(pack(result["index"], result["error_code"], result["base_offset"],
                                  result["log_append_time_ms"]))
        if flexible:
            parts.append(b"\x00")  # no tagged fields in the topic
    if flexible:
        parts.append(_FLEXIBLE_END.pack(body["throttle_time_ms"], 0))
    else:
        parts.append(_THROTTLE.pack(body["throttle_time_ms"]))
    size = sum(map(len, parts)) + (5 if flexible else 4)
    parts[0] = _HEADER.pack(size, correlation_id) + (b"\x00" if flexible else b"")
    return b"".join(parts)


def _one_partition(version: int, flexible: bool, tail: tuple, correlation_id: int, body: dict,
                   partition: struct.Struct) -> bytes | None:
    """The usual answer, one topic and one partition, in four pieces."""
    topic = body["responses"][0]
    result = topic["partition_responses"][0]
    if result["record_errors"] or result["error_message"] is not None:
        return None
    if flexible:  # header tags, one topic, its name, one partition
        prefix = b"\x00\x02" + _name(topic["name"], True) + b"\x02"
        end = _FLEXIBLE_TOPIC_END.pack(0, body["throttle_time_ms"], 0)
    else:
        prefix = _ONE + _name(topic["name"], False) + _ONE
        end = _THROTTLE.pack(body["throttle_time_ms"])
    middle = partition.pack(result["index"], result["error_code"], result["base_offset"],
                            result["log_append_time_ms"], result["log_start_offset"], *tail)
    size = 4 + len(prefix) + len(middle) + len(end)
    return _HEADER.pack(size, correlation_id) + prefix + middle + end


_ONE = _COUNT.pack(1)
_FLEXIBLE_TOPIC_END = struct.Struct(">BiB")  # no topic tags, throttle time, no tags


def _count(n: int, flexible: bool) -> bytes:
    if not flexible:
        return _COUNT.pack(n)
    if n < 127:
        return bytes((n + 1,))
    out = bytearray()
    write_unsigned_varint(out, n + 1)
    return bytes(out)


def _name(name: str, flexible: bool) -> bytes:
    encoded = _names.get((name, flexible))
    if encoded is None:
        raw = name.encode("utf-8")
        if flexible:
            out = bytearray()
            write_unsigned_varint(out, len(raw) + 1)
            encoded = bytes(out) + raw
        else:
            encoded = _NAME_LENGTH.pack(len(raw)) + raw
        if len(_names) >= _MAX_NAMES:
            _names.clear()
        _names[name, flexible] = encoded
    return encoded
