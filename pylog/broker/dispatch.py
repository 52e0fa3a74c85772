"""Route one request frame to its handler and encode the outcome.

``Dispatcher.dispatch(payload)`` returns one of:

* ``Reply`` -- the response as chunks (bytes and file regions) with its total size;
* ``None`` -- no response at all (Produce with acks=0);
* ``Parked`` -- a Fetch waiting for data, or an acks=all Produce waiting for the
  in-sync replicas; the network layer calls ``attempt`` again when a change to one of
  its partitions (append, high watermark, ISR, leadership) wakes it or its deadline
  passes.

Services beyond the built-in ones (the transaction coordinator, the marker writer) plug
in with :meth:`Dispatcher.serve`: an API key, the versions served (advertised in
ApiVersions only once registered) and a handler ``(version, body, session)`` returning a
response body, ``None`` (no response) or a waiting request: any object with
``attempt(final)``, ``deadline`` and ``partitions``, parked like a Fetch.

It raises ``CloseConnection`` for requests that cannot be answered on this connection
(unknown API key, unsupported version, malformed or truncated frame), so the caller
closes that connection and only that one.

SASL (:mod:`pylog.security.sasl`): on a SASL listener a session starts unauthenticated,
and any request but ApiVersions, SaslHandshake and SaslAuthenticate closes it, as in
Kafka. SaslHandshake/SaslAuthenticate go to the session's authenticator; after a v0
handshake the next frames are raw SASL tokens, answered without a header. A refused
authentication is answered with ``Reply.close_after`` set.
"""

from __future__ import annotations

import logging
import struct
import time
from dataclasses import dataclass
from typing import Callable

from pylog.broker.acl_handlers import AclHandlers
from pylog.broker.admin import AdminHandlers
from pylog.broker.authorization import RequestAuthorization
from pylog.broker.fetch import FetchWork, close_regions, handle_list_offsets, start_fetch
from pylog.broker.fetch_sessions import FetchSessionCache
from pylog.broker.groups import GROUP_APIS, GroupHandlers, GroupWork
from pylog.broker.metrics import BrokerMetrics
from pylog.broker.partitions import PartitionLogs
from pylog.broker.produce import ProduceWork, handle_produce, handle_produce_many
from pylog.broker.replication_handlers import handle_offset_for_leader_epoch
from pylog.broker.session import Session
from pylog.security.sasl import SaslRefused, SaslService, sasl_disabled_answer
from pylog.errors import InvalidRequestError, UnsupportedVersionError
from pylog.protocol import (
    MESSAGES, ApiKey, decode_request, encode_response_chunks)
from pylog.protocol.produce_response import encode_produce_response

log = logging.getLogger(__name__)

# (min, max) versions advertised in ApiVersions and served.
SERVED_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (0, 9),  # 0-2 advertised for librdkafka, refused per partition
    ApiKey.FETCH: (4, 12),
    ApiKey.LIST_OFFSETS: (1, 9),
    ApiKey.METADATA: (0, 12),
    ApiKey.DESCRIBE_CLUSTER: (0, 2),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: (0, 0),
    ApiKey.FIND_COORDINATOR: (0, 4),
    ApiKey.OFFSET_COMMIT: (0, 8),
    ApiKey.OFFSET_FETCH: (0, 8),
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    ApiKey.LIST_GROUPS: (0, 5),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.CREATE_TOPICS: (0, 7),
    ApiKey.DELETE_TOPICS: (0, 4),
    ApiKey.INIT_PRODUCER_ID: (0, 1),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (0, 4),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.DESCRIBE_CONFIGS: (0, 4),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.DESCRIBE_ACLS: (0, 3),
    ApiKey.CREATE_ACLS: (0, 3),
    ApiKey.DELETE_ACLS: (0, 3),
    ApiKey.SASL_HANDSHAKE: (0, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
}
# What a session of a SASL listener may send before it has authenticated.
BEFORE_AUTHENTICATION = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE,
                                   ApiKey.SASL_AUTHENTICATE})
SASL_APIS = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
UNSUPPORTED_VERSION = UnsupportedVersionError.errno
_NOT_SERVED = (0, -1)
_PEEK = struct.Struct(">hhi")
_PRODUCE = int(ApiKey.PRODUCE)  # api_key, api_version, correlation_id
# A registered service: (version, body, session) -> body | None | a waiting request.
Service = Callable[[int, dict, Session], object]


class CloseConnection(Exception):
    """The request cannot be answered: close this connection (the message says why)."""


@dataclass
class Reply:
    chunks: list  # bytes and FileRegion objects, in wire order
    size: int
    close_after: bool = False  # close the connection once this is sent (failed SASL)


@dataclass
class Parked:
    """A request waiting (a Fetch for ``min_bytes``, a Produce for the ISR);
    ``deadline`` is on the dispatcher's clock."""

    work: FetchWork | ProduceWork | GroupWork
    api_version: int
    correlation_id: int
    api_key: int = ApiKey.FETCH
    finish: Callable[[dict], dict] | None = None  # puts back what authorization refused
    request: dict | None = None  # the decoded request, for the metrics
    metrics: "BrokerMetrics | None" = None

    @property
    def deadline(self) -> float:
        return self.work.deadline

    @property
    def partitions(self):
        return self.work.partitions

    def attempt(self, final: bool) -> Reply | None:
        try:
            body = self.work.attempt(final)
            if body is None:
                return None
            if self.metrics is not None:
                self.metrics.on_response(self.api_key, self.request, body)
            if self.finish is not None:
                body = self.finish(body)
            return _reply(self.api_key, self.api_version, self.correlation_id, body)
        except (CloseConnection, OSError):
            raise
        except Exception as error:
            raise _one_line_failure(self.api_key, self.api_version, error) from None


def _one_line_failure(api_key: int, version: int, error: Exception) -> CloseConnection:
    """A request the decoder accepted but a handler could not answer closes its
    connection with one line; the traceback is logged only at DEBUG. (A plain
    ``try``, not a context manager: this wraps every request.)"""
    name = MESSAGES[api_key].name
    log.debug("handling %s v%d failed", name, version, exc_info=error)
    return CloseConnection(f"cannot handle {name} v{version}: {type(error).__name__}: {error}")


def _reply(api_key: int, version: int, correlation_id: int, body: dict) -> Reply:
    if api_key == _PRODUCE:
        frame = encode_produce_response(version, correlation_id, body)
        if frame is not None:
            return Reply([frame], len(frame))
    try:
        chunks, size = encode_response_chunks(api_key, version, correlation_id, body)
    except BaseException:
        if api_key == ApiKey.FETCH:
            close_regions(body)
        raise
    return Reply(chunks, size)


class Dispatcher:
    """Decodes requests, calls handlers, encodes responses. Shared by all processors."""

    def __init__(self, admin: AdminHandlers, logs: PartitionLogs,
                 clock: Callable[[], float] = time.monotonic,
                 groups: GroupHandlers | None = None, sasl: SaslService | None = None,
                 authorization: RequestAuthorization | None = None,
                 acls: AclHandlers | None = None) -> None:
        self.admin = admin
        self.logs = logs
        self.clock = clock
        self.groups = groups
        self.sasl = sasl
        self.authorization = authorization  # None: every request is allowed
        self.acls = acls or AclHandlers(None)
        self.metrics: BrokerMetrics | None = None  # set by the broker when metrics are on
        self.served = dict(SERVED_VERSIONS)
        self.services: dict[int, Service] = {}
        self.fetch_max_bytes: int | None = None  # fetch.max.bytes: caps consumers' Fetch
        self.fetch_sessions: FetchSessionCache | None = None  # KIP-227; None: no sessions

    def serve(self, api_key: int, versions: tuple[int, int], handler: "Service") -> None:
        """Answer ``api_key`` (``versions`` low and high, inclusive) with ``handler``."""
        self.served[api_key] = versions
        self.services[api_key] = handler

    def dispatch(self, payload, session: Session | None = None) -> Reply | Parked | None:
        """Handle one request frame from the connection of ``session``."""
        session = session or Session("")
        if session.sasl is not None and session.sasl.expects_raw_token:
            return self._raw_sasl_token(session, payload)
        decoded = self._decode(payload, session)
        if type(decoded) is Reply:
            return decoded
        api_key, version, correlation_id, request = decoded
        try:
            return self._answer(api_key, version, correlation_id, request, session)
        except (CloseConnection, OSError):
            raise
        except Exception as error:
            raise _one_line_failure(api_key, version, error) from None

    def dispatch_produce_run(self, payloads: list, session: Session) -> list[Reply | Parked | None]:
        """Handle consecutive Produce frames of one connection together, as many of them
        from the first as can be (group commit, see ``handle_produce_many``), and return
        their outcomes, in order, as :meth:`dispatch` would give them; the caller
        dispatches the rest one by one. The run stops before a frame that would close the
        connection, and after one that waits for the in-sync replicas (acks=all in a
        cluster parks the connection; such a frame is taken only as the first)."""
        if ((session.sasl is not None and session.sasl.expects_raw_token)
                or ApiKey.PRODUCE in self.services):
            return []
        cluster = self.logs.replicas is not None
        verifying = self.logs.txn_verifier is not None
        staged: list[tuple[int, int, dict, Callable | None]] = []
        order: list[Reply | int] = []  # a reply, or the index of a staged request
        for payload in payloads:
            try:
                decoded = self._decode(payload, session)
            except CloseConnection:
                break
            if type(decoded) is Reply or decoded[0] != ApiKey.PRODUCE:
                break
            _, version, correlation_id, request = decoded
            # A request that may wait comes alone: for the ISR (acks=all in a cluster), or
            # for its transaction's verification.
            waits = (cluster and request.body["acks"] == -1) or (
                verifying and request.body.get("transactional_id") is not None)
            if waits and order:
                break
            body, finish = request.body, None
            if self.authorization is not None:
                verdict = self.authorization.check(ApiKey.PRODUCE, version, body, session)
                if verdict.close is not None:
                    break
                if verdict.response is not None:
                    order.append(_reply(ApiKey.PRODUCE, version, correlation_id, verdict.response))
                    continue
                body, finish = verdict.body, verdict.finish
            order.append(len(staged))
            staged.append((version, correlation_id, body, finish))
            if waits:
                break
        if not staged:
            return order
        try:
            answers = handle_produce_many([(body, version) for version, _, body, _ in staged],
                                          self.logs, self.clock())
            outcomes = []
            for item in order:
                if type(item) is Reply:
                    outcomes.append(item)
                    continue
                version, correlation_id, body, finish = staged[item]
                outcomes.append(self._finish(ApiKey.PRODUCE, version, correlation_id, body,
                                             answers[item], finish))
            return outcomes
        except (CloseConnection, OSError):
            raise
        except Exception as error:
            raise _one_line_failure(ApiKey.PRODUCE, staged[0][0], error) from None

    def _decode(self, payload, session: Session):
        """``(api_key, version, correlation_id, request)`` of a frame, or the Reply that
        answers it at once (an ApiVersions version not served); CloseConnection when the
        frame closes the connection."""
        try:
            api_key, version, correlation_id = _PEEK.unpack_from(payload)
        except struct.error:
            raise CloseConnection(f"request of {len(payload)} bytes is too short for a header")
        if not session.authenticated and api_key not in BEFORE_AUTHENTICATION:
            raise CloseConnection(f"{_api_name(api_key)} request before SASL authentication "
                                  f"on the {session.listener} listener")
        if session.sasl is not None and session.sasl.expired() and api_key not in SASL_APIS:
            raise CloseConnection("SASL session expired without re-authentication "
                                  "(connections.max.reauth.ms)")
        low, high = self.served.get(api_key, _NOT_SERVED)
        if not low <= version <= high or api_key not in MESSAGES:
            if api_key == ApiKey.API_VERSIONS:
                return self._api_versions_fallback(correlation_id)
            if api_key not in MESSAGES:
                raise CloseConnection(f"unknown api key {api_key}")
            raise CloseConnection(f"unsupported version {version} of "
                                  f"{MESSAGES[api_key].name}")
        try:
            request = decode_request(memoryview(payload))
        except UnsupportedVersionError as error:
            raise CloseConnection(str(error)) from None
        except InvalidRequestError as error:
            raise CloseConnection(f"malformed {MESSAGES[api_key].name} v{version}: {error}") \
                from None
        return api_key, version, correlation_id, request

    def _answer(self, api_key: int, version: int, correlation_id: int, request,
                session: Session) -> Reply | Parked | None:
        if api_key in SASL_APIS:
            return self._sasl_exchange(session, api_key, version, correlation_id,
                                       request.body)
        request_body, finish = request.body, None
        if self.authorization is not None:
            verdict = self.authorization.check(api_key, version, request_body, session)
            if verdict.close is not None:
                raise CloseConnection(verdict.close)
            if verdict.response is not None:
                return _reply(api_key, version, correlation_id, verdict.response)
            request_body, finish = verdict.body, verdict.finish
        service = self.services.get(api_key)
        if service is not None:
            body = service(version, request_body, session)
        elif api_key in GROUP_APIS and self.groups is not None:
            body = self.groups.handle(api_key, version, request_body,
                                      request.header.client_id, session.client_host,
                                      session.listener)
        else:
            body = self._handle(api_key, version, request_body, session)
        return self._finish(api_key, version, correlation_id, request_body, body, finish)

    def _finish(self, api_key: int, version: int, correlation_id: int, request_body: dict,
                body, finish: Callable[[dict], dict] | None) -> Reply | Parked | None:
        """The outcome of a handled request: its reply, or its parked work."""
        metrics = self.metrics
        if type(body) is not dict:  # the rare outcomes first ruled out, cheaply
            if body is None:
                if metrics is not None and api_key == ApiKey.PRODUCE:
                    metrics.on_response(api_key, request_body, None)  # acks=0
                return None
            if isinstance(body, FetchWork):
                return self._first_attempt(body, version, correlation_id, finish,
                                           request_body)
            if isinstance(body, ProduceWork):
                return Parked(body, version, correlation_id, ApiKey.PRODUCE, finish,
                              request_body, metrics)
            if isinstance(body, GroupWork) or hasattr(body, "attempt"):
                return Parked(body, version, correlation_id, api_key, finish, request_body,
                              metrics)
        if metrics is not None:
            metrics.on_response(api_key, request_body, body)
        if finish is not None:
            body = finish(body)
        return _reply(api_key, version, correlation_id, body)

    def _sasl_exchange(self, session: Session, api_key: int, version: int,
                       correlation_id: int, body: dict) -> Reply:
        if self.sasl is None:
            answer, close = sasl_disabled_answer(api_key, session.listener), False
        else:
            answer, close = self.sasl.handle(session, api_key, version, body)
        reply = _reply(api_key, version, correlation_id, answer)
        reply.close_after = close
        return reply

    def _raw_sasl_token(self, session: Session, payload) -> Reply:
        """A SASL token framed without a request header (after SaslHandshake v0)."""
        try:
            token = self.sasl.raw_token(session, bytes(payload))
        except SaslRefused as refusal:
            raise CloseConnection(str(refusal)) from None
        return Reply([struct.pack(">i", len(token)) + token], 4 + len(token))

    def _first_attempt(self, work: FetchWork, version: int, correlation_id: int,
                       finish: Callable[[dict], dict] | None = None,
                       request: dict | None = None):
        parked = Parked(work, version, correlation_id, finish=finish, request=request,
                        metrics=self.metrics)
        reply = parked.attempt(final=work.deadline <= self.clock())
        return parked if reply is None else reply

    def _handle(self, api_key: int, version: int, body: dict, session: Session):
        if api_key == ApiKey.PRODUCE:
            return handle_produce(body, version, self.logs, self.clock())
        if api_key == ApiKey.FETCH:
            return start_fetch(body, version, self.logs, self.clock(), self.fetch_max_bytes,
                               self.fetch_sessions)
        if api_key == ApiKey.LIST_OFFSETS:
            return handle_list_offsets(body, version, self.logs)
        if api_key == ApiKey.METADATA:
            return self.admin.metadata_request(body, version, session.listener)
        if api_key == ApiKey.DESCRIBE_CLUSTER:
            return self.admin.describe_cluster(body, version, session.listener)
        if api_key == ApiKey.DESCRIBE_TOPIC_PARTITIONS:
            return self.admin.describe_topic_partitions(body, version, session.listener)
        if api_key == ApiKey.API_VERSIONS:
            return api_versions_body(0, self.served)
        if api_key == ApiKey.CREATE_TOPICS:
            return self.admin.create_topics(body, version)
        if api_key == ApiKey.DELETE_TOPICS:
            return self.admin.delete_topics(body, version)
        if api_key == ApiKey.CREATE_PARTITIONS:
            return self.admin.create_partitions(body, version)
        if api_key == ApiKey.OFFSET_FOR_LEADER_EPOCH:
            return handle_offset_for_leader_epoch(body, version, self.logs)
        if api_key == ApiKey.DESCRIBE_CONFIGS:
            return self.admin.configs.describe_configs(body, version)
        if api_key == ApiKey.ALTER_CONFIGS:
            return self.admin.configs.alter_configs(body, version)
        if api_key == ApiKey.INCREMENTAL_ALTER_CONFIGS:
            return self.admin.configs.incremental_alter_configs(body, version)
        if api_key == ApiKey.DESCRIBE_ACLS:
            return self.acls.describe_acls(body, version)
        if api_key == ApiKey.CREATE_ACLS:
            return self.acls.create_acls(body, version)
        if api_key == ApiKey.DELETE_ACLS:
            return self.acls.delete_acls(body, version)
        if api_key == ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS and self.sasl is not None:
            return self.sasl.describe_user_scram_credentials(body)
        if api_key == ApiKey.ALTER_USER_SCRAM_CREDENTIALS and self.sasl is not None:
            return self.sasl.alter_user_scram_credentials(body)
        raise CloseConnection(f"{MESSAGES[api_key].name} is not served")

    def _api_versions_fallback(self, correlation_id: int) -> Reply:
        """Unsupported ApiVersions version: error 35 with a v0 body listing our ranges."""
        return _reply(ApiKey.API_VERSIONS, 0, correlation_id, api_versions_body(UNSUPPORTED_VERSION, self.served))


def _api_name(api_key: int) -> str:
    return MESSAGES[api_key].name if api_key in MESSAGES else f"api key {api_key}"


def api_versions_body(error_code: int, served: dict[int, tuple[int, int]] | None = None) -> dict:
    return {"error_code": error_code, "throttle_time_ms": 0, "api_keys": [
        {"api_key": int(key), "min_version": low, "max_version": high}
        for key, (low, high) in sorted((served or SERVED_VERSIONS).items())]}
