"""Request and response framing: size prefix, headers, and the body codec.

Frame layout on the wire::

    int32   size            bytes that follow
    header                  request header v1/v2 or response header v0/v1
    body                    the message schema at the header's api_version

Request header (v1; v2 = flexible versions, adds tagged fields)::

    int16   request_api_key
    int16   request_api_version
    int32   correlation_id
    string  client_id       nullable, never compact, even in v2
    tagged fields           v2 only

Response header v0 is ``int32 correlation_id``; v1 (flexible versions) adds tagged
fields. ApiVersions responses always use v0, so a client that does not yet know the
broker's versions can read them.
"""

from __future__ import annotations

import os
import struct
from typing import Any, NamedTuple

from pylog.errors import InvalidRequestError, UnsupportedVersionError
from pylog.protocol import primitives as p
from pylog.protocol.messages import MESSAGES, ApiKey
from pylog.protocol.schema import ChunkedOutput, Message

try:
    from pylog.protocol import _speedups
except ImportError:  # built without a C compiler: the generated codec reads everything
    _speedups = None

SIZE = p.INT32
# api_key, api_version, correlation_id and the client_id's length: the fixed start of
# every request header.
_HEADER_START = struct.Struct(">hhih")
_SIZE_AND_CORRELATION = struct.Struct(">ii")
# (api_key, api_version) -> (request codec, flexible), for versions already decoded once.
_REQUEST_CODECS: dict[tuple[int, int], tuple[Any, bool]] = {}
# (api_key, api_version) -> (response codec, response header version).
_RESPONSE_CODECS: dict[tuple[int, int], tuple[Any, int]] = {}


# Named tuples rather than frozen dataclasses: built once per request, and a frozen
# dataclass's __init__ costs a call to object.__setattr__ per field.
class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


class Request(NamedTuple):
    """A decoded request: its header and its body as a dict."""

    header: RequestHeader
    body: dict[str, Any]

    @property
    def api_key(self) -> int:
        return self.header.api_key

    @property
    def api_version(self) -> int:
        return self.header.api_version


def message_for(api_key: int) -> Message:
    """The schema of ``api_key``; raises InvalidRequestError for an unknown key."""
    try:
        return MESSAGES[api_key]
    except KeyError:
        raise InvalidRequestError(f"unknown api key {api_key}") from None


def request_header_version(api_key: int, api_version: int) -> int:
    return 2 if message_for(api_key).is_flexible(api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    if api_key == ApiKey.API_VERSIONS:
        return 0
    return 1 if message_for(api_key).is_flexible(api_version) else 0


def peek_header(payload) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) from the first 8 bytes of a request."""
    api_key, offset = p.read_int16(payload, 0)
    api_version, offset = p.read_int16(payload, offset)
    correlation_id, _ = p.read_int32(payload, offset)
    return api_key, api_version, correlation_id


def decode_request_header(payload) -> tuple[RequestHeader, int]:
    """The header and the offset where the body starts.

    Raises InvalidRequestError (unknown key, truncated) or UnsupportedVersionError.
    """
    api_key, api_version, correlation_id = peek_header(payload)
    message = message_for(api_key)
    client_id, offset = p.read_nullable_string(payload, 8)
    if api_version not in range(message.min_version, message.max_version + 1):
        raise UnsupportedVersionError(f"{message.name} v{api_version} is not supported")
    if message.is_flexible(api_version):
        _, offset = p.read_tagged_fields(payload, offset)
    return RequestHeader(api_key, api_version, correlation_id, client_id), offset


def decode_request(payload) -> Request:
    """Decode a whole request frame (without its size prefix).

    Pass a memoryview to keep ``records`` fields zero-copy views into it.
    Raises InvalidRequestError or UnsupportedVersionError.
    """
    # The common case in few steps: a version seen before, a well-formed client_id and
    # no header tags; anything else takes the general path below.
    try:
        api_key, api_version, correlation_id, length = _HEADER_START.unpack_from(payload)
        codec, flexible = _REQUEST_CODECS[api_key, api_version]
    except (struct.error, KeyError):
        return _decode_request_generally(payload)
    if codec.__class__ is _NativeProduceBody:
        request = _speedups.produce_request(payload, flexible, RequestHeader, Request)
        if request is not None:
            return request
    if length == -1:
        client_id, offset = None, 10
    else:
        offset = 10 + length
        if length < 0 or offset > len(payload):
            return _decode_request_generally(payload)
        try:
            client_id = str(payload[10:offset], "utf-8")
        except UnicodeDecodeError:
            return _decode_request_generally(payload)
    if flexible:
        if offset >= len(payload) or payload[offset] != 0:
            return _decode_request_generally(payload)
        offset += 1
    body, _ = codec.read(payload, offset)
    return Request(RequestHeader(api_key, api_version, correlation_id, client_id), body)


def _decode_request_generally(payload) -> Request:
    header, offset = decode_request_header(payload)
    message = MESSAGES[header.api_key]
    codec = message.request_codec(header.api_version)
    body, _ = codec.read(payload, offset)
    flexible = message.is_flexible(header.api_version)
    if header.api_key == ApiKey.PRODUCE and header.api_version >= 3 and native_produce():
        codec = _NativeProduceBody(codec, flexible)
    _REQUEST_CODECS[header.api_key, header.api_version] = (codec, flexible)
    return Request(header, body)


def native_produce() -> bool:
    """Whether Produce request bodies are read in C: the extension is built and
    ``$PYLOG_PROTOCOL_SPEEDUPS`` is not ``0`` (the tests run both readers)."""
    return _speedups is not None and os.environ.get("PYLOG_PROTOCOL_SPEEDUPS", "1") != "0"


class _NativeProduceBody:
    """A Produce request body codec whose ``read`` runs the C reader, and the generated
    codec for what the C reader leaves to it (anything malformed or unusual: see
    ``pylog/protocol/_speedups.c``). Both give the same body for the same bytes.
    :func:`decode_request` reads a whole Produce frame, header too, in C when its codec
    is this one."""

    __slots__ = ("codec", "flexible")

    def __init__(self, codec, flexible: bool) -> None:
        self.codec = codec
        self.flexible = flexible

    def read(self, buf, offset: int):
        return _speedups.produce_body(buf, offset, self.flexible) or self.codec.read(buf, offset)


def encode_request(api_key: int, api_version: int, correlation_id: int,
                   client_id: str | None, body: dict[str, Any]) -> bytes:
    """A size-prefixed request frame.

    >>> frame = encode_request(ApiKey.METADATA, 1, 7, "me", {"topics": None})
    """
    message = message_for(api_key)
    out = bytearray(4)
    p.write_int16(out, api_key)
    p.write_int16(out, api_version)
    p.write_int32(out, correlation_id)
    p.write_nullable_string(out, client_id)
    if message.is_flexible(api_version):
        p.write_tagged_fields(out, {})
    message.request_codec(api_version).write(out, body)
    SIZE.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def decode_response(api_key: int, api_version: int, payload) -> tuple[int, dict[str, Any]]:
    """(correlation_id, body) of a response frame without its size prefix."""
    correlation_id, offset = p.read_int32(payload, 0)
    if response_header_version(api_key, api_version) == 1:
        _, offset = p.read_tagged_fields(payload, offset)
    body, _ = message_for(api_key).response_codec(api_version).read(payload, offset)
    return correlation_id, body


def encode_response_chunks(api_key: int, api_version: int, correlation_id: int,
                           body: dict[str, Any]) -> tuple[list, int]:
    """A size-prefixed response as ([bytes | file region, ...], total size).

    File regions (``records`` values with a ``length``) are left for the caller to send
    from the file; every other part is bytes.
    """
    plan = _RESPONSE_CODECS.get((api_key, api_version))
    if plan is None:
        plan = _RESPONSE_CODECS[api_key, api_version] = (
            message_for(api_key).response_codec(api_version),
            response_header_version(api_key, api_version))
    codec, header_version = plan
    out = ChunkedOutput()
    out += _SIZE_AND_CORRELATION.pack(0, correlation_id)
    if header_version == 1:
        out.append(0)  # no tagged fields
    codec.write(out, body)
    if not out.regions:
        SIZE.pack_into(out, 0, len(out) - 4)
        return [bytes(out)], len(out)
    total = len(out) + sum(region.length for _, region in out.regions)
    SIZE.pack_into(out, 0, total - 4)
    return out.chunks(), total


def encode_response(api_key: int, api_version: int, correlation_id: int,
                    body: dict[str, Any]) -> bytes:
    """A size-prefixed response frame (bytes-only records)."""
    chunks, _ = encode_response_chunks(api_key, api_version, correlation_id, body)
    if any(not isinstance(chunk, bytes) for chunk in chunks):
        raise TypeError("encode_response cannot inline file regions; use encode_response_chunks")
    return b"".join(chunks)
