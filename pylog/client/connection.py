"""One TCP connection to one broker: framing, correlation ids, version negotiation.

Right after connecting, the connection asks the broker for its ApiVersions and from then
on picks, for each API, the highest version both sides support. Every socket call has a
timeout. Any I/O failure closes the connection (its byte stream is no longer in a known
state) and raises a retriable error: NetworkExceptionError or RequestTimedOutError.

Responses on one connection come back in request order, so callers may pipeline:
``send()`` several requests, then ``receive()`` each in turn while holding ``lock``.

Security (``security``, a :class:`~pylog.client.security.SecurityConfig`): with SSL or
SASL_SSL the socket is wrapped in TLS before anything is sent (the broker's host name
checked unless ``ssl.endpoint.identification.algorithm=none``); with SASL_PLAINTEXT or
SASL_SSL the connection authenticates right after ApiVersions (SaslHandshake v1, then
SaslAuthenticate: PLAIN, or SCRAM through ``scramp``). A refused login raises
SaslAuthenticationFailedError, which is not retriable; a failed TLS handshake is a
NetworkExceptionError naming the reason.
"""

from __future__ import annotations

import itertools
import logging
import socket
import ssl
import struct
import threading
from dataclasses import dataclass
from typing import Any

from pylog.client.sasl import authenticate
from pylog.client.security import SecurityConfig
from pylog.errors import (
    NetworkExceptionError,
    RequestTimedOutError,
    UnsupportedVersionError,
    raise_for_code,
)
from pylog.protocol import ApiKey, decode_response, encode_request

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_ERROR_CODE = struct.Struct(">h")
MAX_RESPONSE_BYTES = 512 * 1024 * 1024

# The versions this client knows how to fill in and read, per API. Fetch stops at 12
# (13+ name topics by id); Produce starts at 3 and Fetch at 4 (record batch v2).
CLIENT_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (3, 11),
    ApiKey.FETCH: (4, 12),
    ApiKey.LIST_OFFSETS: (1, 9),
    ApiKey.METADATA: (1, 12),
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.CREATE_TOPICS: (0, 7),
    ApiKey.DELETE_TOPICS: (0, 6),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.ELECT_LEADERS: (1, 2),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (3, 4),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.DESCRIBE_CONFIGS: (0, 4),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.DESCRIBE_ACLS: (0, 3),
    ApiKey.CREATE_ACLS: (0, 3),
    ApiKey.DELETE_ACLS: (0, 3),
    ApiKey.FIND_COORDINATOR: (0, 4),
    ApiKey.OFFSET_COMMIT: (2, 8),
    ApiKey.OFFSET_FETCH: (1, 8),
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    ApiKey.LIST_GROUPS: (0, 5),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.INIT_PRODUCER_ID: (0, 1),
    ApiKey.SASL_HANDSHAKE: (1, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
}


@dataclass(frozen=True, slots=True)
class PendingRequest:
    """A request written to the socket whose response has not been read yet."""

    api_key: int
    version: int
    correlation_id: int


class BrokerConnection:
    """A blocking connection to ``host:port`` with timeouts on every call."""

    def __init__(self, host: str, port: int, *, client_id: str = "pylog",
                 timeout_s: float = 30.0, security=None) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.security = SecurityConfig.coerce(security)
        self.lock = threading.RLock()
        self._sock: socket.socket | None = None
        self._correlation = itertools.count(1)
        self._versions: dict[int, tuple[int, int]] = {}

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def connect(self) -> None:
        """Open the socket (if not open) and negotiate API versions."""
        with self.lock:
            if self._sock is not None:
                return
            try:
                sock = socket.create_connection((self.host, self.port), timeout=self.timeout_s)
            except OSError as exc:
                raise NetworkExceptionError(f"cannot connect to {self.address}: {_reason(exc)}") from None
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(self.timeout_s)
            if self.security.uses_tls:
                sock = self._wrap_tls(sock)
            self._sock = sock
            try:
                self._versions = self._negotiate_versions()
                if self.security.uses_sasl:
                    authenticate(self, self.security)
            except BaseException:
                self.close()
                raise

    def _wrap_tls(self, sock: socket.socket) -> ssl.SSLSocket:
        context = self.security.ssl_context()
        try:
            return context.wrap_socket(sock, server_hostname=self.host)
        except (OSError, ssl.SSLError) as exc:
            sock.close()
            if isinstance(exc, (socket.timeout, TimeoutError)):
                raise RequestTimedOutError(f"TLS handshake with {self.address} took more than "
                                           f"{self.timeout_s:g}s") from None
            reason = getattr(exc, "verify_message", None) or getattr(exc, "reason", None) \
                or _reason(exc)
            raise NetworkExceptionError(f"TLS handshake with {self.address} failed: "
                                        f"{reason}") from None

    @property
    def versions(self) -> dict[int, tuple[int, int]]:
        """The broker's (min, max) version of each API it advertised."""
        return self._versions

    def roundtrip(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        """One request at an explicit version on the open socket (no connect()): for the
        SASL exchange that runs inside connect()."""
        return self._roundtrip(api_key, version, body)

    def _negotiate_versions(self) -> dict[int, tuple[int, int]]:
        # v3 first. A server that does not know v3 answers error 35; the error code sits
        # right after the correlation id whatever the layout.
        self._send(ApiKey.API_VERSIONS, 3, {"client_software_name": "pylog",
                                            "client_software_version": "0.1.0"})
        payload = self._read_frame()
        if len(payload) >= 6 and _ERROR_CODE.unpack_from(payload, 4)[0] == UnsupportedVersionError.errno:
            # Not every server lays that error body out alike; v0 is understood by all.
            body = self._roundtrip(ApiKey.API_VERSIONS, 0, {})
        else:
            _, body = decode_response(ApiKey.API_VERSIONS, 3, payload)
        raise_for_code(body["error_code"], f"ApiVersions from {self.address}")
        return {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}

    def version_for(self, api_key: int) -> int:
        """The highest version of ``api_key`` both this client and the broker support."""
        self.connect()
        ours = CLIENT_VERSIONS[api_key]
        theirs = self._versions.get(api_key)
        if theirs is None:
            raise UnsupportedVersionError(f"broker {self.address} does not support {ApiKey(api_key).name}")
        version = min(ours[1], theirs[1])
        if version < max(ours[0], theirs[0]):
            raise UnsupportedVersionError(
                f"broker {self.address} supports {ApiKey(api_key).name} v{theirs[0]}-{theirs[1]}, "
                f"this client v{ours[0]}-{ours[1]}")
        return version

    def request(self, api_key: int, body: dict[str, Any], version: int | None = None) -> dict[str, Any]:
        """Send one request and return the decoded response body."""
        with self.lock:
            if version is None:
                version = self.version_for(api_key)
            else:
                self.connect()
            return self._roundtrip(api_key, version, body)

    def send(self, api_key: int, body: dict[str, Any], version: int) -> PendingRequest:
        """Write a request without waiting; pair with :meth:`receive` (hold ``lock``)."""
        self.connect()
        return self._send(api_key, version, body)

    def receive(self, pending: PendingRequest) -> dict[str, Any]:
        """Read the response to ``pending`` (responses arrive in request order)."""
        payload = self._read_frame()
        correlation_id, body = decode_response(pending.api_key, pending.version, payload)
        if correlation_id != pending.correlation_id:
            self.close()
            raise NetworkExceptionError(
                f"{self.address}: response for request {correlation_id}, expected {pending.correlation_id}")
        return body

    def _roundtrip(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        return self.receive(self._send(api_key, version, body))

    def _send(self, api_key: int, version: int, body: dict[str, Any]) -> PendingRequest:
        correlation_id = next(self._correlation) & 0x7FFFFFFF
        frame = encode_request(api_key, version, correlation_id, self.client_id, body)
        sock = self._require_socket()
        try:
            sock.sendall(frame)
        except OSError as exc:
            self._fail(exc)
        return PendingRequest(api_key, version, correlation_id)

    def _read_frame(self) -> memoryview:
        header = self._read_exactly(4)
        (size,) = _SIZE.unpack(header)
        if size < 4 or size > MAX_RESPONSE_BYTES:
            self.close()
            raise NetworkExceptionError(f"{self.address}: response size {size} out of range")
        return memoryview(self._read_exactly(size))

    def _read_exactly(self, size: int) -> bytearray:
        sock = self._require_socket()
        buf = bytearray(size)
        view = memoryview(buf)
        got = 0
        try:
            while got < size:
                n = sock.recv_into(view[got:], size - got)
                if n == 0:
                    raise ConnectionResetError("connection closed by the broker")
                got += n
        except OSError as exc:
            self._fail(exc)
        return buf

    def _require_socket(self) -> socket.socket:
        if self._sock is None:
            raise NetworkExceptionError(f"not connected to {self.address}")
        return self._sock

    def _fail(self, exc: OSError) -> None:
        self.close()
        if isinstance(exc, (socket.timeout, TimeoutError)):
            raise RequestTimedOutError(
                f"no answer from {self.address} within {self.timeout_s:g}s") from None
        raise NetworkExceptionError(f"connection to {self.address} failed: {_reason(exc)}") from None

    def close(self) -> None:
        with self.lock:
            if self._sock is not None:
                try:
                    self._sock.close()
                finally:
                    self._sock = None

    def __repr__(self) -> str:
        return f"BrokerConnection({self.address}, connected={self.connected})"


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__
