"""The Kafka wire protocol: primitives, headers, message schemas and framing.

Pure codecs over bytes and memoryview; no sockets. Typical use::

    from pylog.protocol import ApiKey, encode_request, decode_response
    frame = encode_request(ApiKey.API_VERSIONS, 0, correlation_id=1, client_id="x", body={})
    ...send frame, read the 4-byte size, then ``size`` bytes into ``payload``...
    correlation_id, body = decode_response(ApiKey.API_VERSIONS, 0, payload)
"""

from pylog.protocol.framing import (
    Request,
    RequestHeader,
    decode_request,
    decode_request_header,
    decode_response,
    encode_request,
    encode_response,
    encode_response_chunks,
    message_for,
    peek_header,
    request_header_version,
    response_header_version,
)
from pylog.protocol.messages import MESSAGES, ApiKey
from pylog.protocol.schema import ChunkedOutput, F, Message, VersionRange

__all__ = [
    "ApiKey", "ChunkedOutput", "F", "MESSAGES", "Message", "Request", "RequestHeader",
    "VersionRange", "decode_request", "decode_request_header", "decode_response",
    "encode_request", "encode_response", "encode_response_chunks", "message_for",
    "peek_header", "request_header_version", "response_header_version",
]
