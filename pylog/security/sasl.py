"""SASL on the broker: SaslHandshake and SaslAuthenticate with PLAIN, SCRAM-SHA-256, SCRAM-SHA-512.

One ``SaslAuthenticator`` per connection of a SASL listener (``SASL_PLAINTEXT``,
``SASL_SSL``) walks Kafka's states::

    HANDSHAKE --SaslHandshake(mechanism)--> AUTHENTICATE --tokens--> COMPLETE
                                                  \\--bad token--> FAILED (answer, then close)

* SaslHandshake v1 is followed by SaslAuthenticate (v0-2) requests carrying the tokens.
  v0 is followed by raw tokens, each a size-prefixed frame without a request header,
  answered the same way (Kafka 0.10.0 clients); a failure there just closes.
* PLAIN: one token ``authzid NUL user NUL password``, answered with an empty token.
  The password is checked against the user's SCRAM credential (SCRAM-SHA-512 if the
  user has one, else SCRAM-SHA-256): derive with the stored salt and iterations and
  compare keys in constant time. There is no separate PLAIN password.
* SCRAM (RFC 5802 through ``scramp``): client-first, server-first, client-final,
  server-final. For an unknown user the exchange goes on with a made-up salt derived
  from a per-broker secret, so unknown users and wrong passwords fail alike, at the
  client-final message.

Every failure answers SASL_AUTHENTICATION_FAILED (58) with the same message for a given
mechanism, logs ONE line with the peer and the mechanism (never a secret), and the
connection is closed after the answer. On success the session's principal becomes
``User:<name>``.

With ``connections.max.reauth.ms`` > 0, SaslAuthenticate v1+ answers that lifetime in
``session_lifetime_ms``; the client must re-authenticate (SaslHandshake again, same
principal) before it runs out, or its next other request closes the connection (KIP-368).
"""

from __future__ import annotations

import enum
import hmac
import logging
import secrets
import time
from typing import TYPE_CHECKING, Callable, Mapping

import scramp

from pylog.errors import KafkaError, PylogError
from pylog.security import scram_admin
from pylog.security.credentials import CredentialStore
from pylog.security.scram import (
    DEFAULT_ITERATIONS, MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS, MIN_SALT_BYTES,
    SCRAM_SHA_256, SCRAM_SHA_512, ScramCredential, ScramMechanism, accept_kafkas_salts)

if TYPE_CHECKING:
    from pylog.broker.session import Session

accept_kafkas_salts()

log = logging.getLogger(__name__)

PLAIN = "PLAIN"
SUPPORTED_MECHANISMS = (PLAIN, SCRAM_SHA_256.name, SCRAM_SHA_512.name)
DEFAULT_MECHANISMS = (SCRAM_SHA_256.name, SCRAM_SHA_512.name)
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")

NONE = 0
UNSUPPORTED_SASL_MECHANISM = KafkaError.for_code(33).errno
ILLEGAL_SASL_STATE = KafkaError.for_code(34).errno
SASL_AUTHENTICATION_FAILED = KafkaError.for_code(58).errno


class State(enum.Enum):
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    COMPLETE = "complete"
    FAILED = "failed"


class AuthenticationFailed(Exception):
    """A token was refused; ``reason`` is for the log only, never for the client."""

    def __init__(self, reason: str, user: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.user = user


class SaslRefused(Exception):
    """The connection must close without an answer (a raw v0 token failed)."""


def failure_message(mechanism: str) -> str:
    """The one message a client gets for any failed authentication with ``mechanism``."""
    return f"Authentication failed: invalid credentials with SASL mechanism {mechanism}"


# -- mechanisms (server side) -------------------------------------------------------------


class _PlainExchange:
    """PLAIN (RFC 4616): one token, checked against the user's SCRAM credential."""

    name = PLAIN

    def __init__(self, store: CredentialStore, decoy: Callable[[str], ScramCredential]) -> None:
        self._store = store
        self._decoy = decoy
        self.user: str | None = None

    def step(self, token: bytes) -> tuple[bytes, bool]:
        parts = bytes(token).split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed("malformed PLAIN token")
        try:
            authzid, user, password = (part.decode("utf-8") for part in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailed("PLAIN token is not UTF-8") from None
        if not user or not password:
            raise AuthenticationFailed("empty user name or password in the PLAIN token")
        if authzid and authzid != user:
            raise AuthenticationFailed("authorization id differs from the user name")
        found = None
        for mechanism in (SCRAM_SHA_512, SCRAM_SHA_256):
            credential = self._store.credential(user, mechanism.name)
            if credential is not None:
                found = mechanism, credential
                break
        if found is None:
            # Spend the same work as a real check, so timing does not tell users apart.
            self._decoy(user).matches(SCRAM_SHA_512, password)
            raise AuthenticationFailed("invalid credentials")
        mechanism, credential = found
        self.user = user
        if not credential.matches(mechanism, password):
            raise AuthenticationFailed("invalid credentials", user)
        return b"", True


class _ScramExchange:
    """SCRAM-SHA-256/512 through scramp's server."""

    def __init__(self, mechanism: ScramMechanism, store: CredentialStore,
                 decoy: Callable[[str], ScramCredential]) -> None:
        self.name = mechanism.name
        self._mechanism = mechanism
        self._store = store
        self._decoy = decoy
        self._server = scramp.ScramMechanism(mechanism.name).make_server(self._auth_info)
        self._known = False
        self._stage = 0
        self.user: str | None = None

    def _auth_info(self, user: str):
        credential = self._store.credential(user, self._mechanism.name)
        usable = credential is not None and len(credential.salt) >= MIN_SALT_BYTES and \
            MIN_ITERATIONS <= credential.iterations <= MAX_ITERATIONS
        if usable:
            self._known = True
            self.user = user
        else:
            credential = self._decoy(user)
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations

    def step(self, token: bytes) -> tuple[bytes, bool]:
        try:
            message = bytes(token).decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed("SCRAM message is not UTF-8", self.user) from None
        try:
            if self._stage == 0:
                self._stage = 1
                self._server.set_client_first(message)
                return self._server.get_server_first().encode("utf-8"), False
            self._stage = 2
            self._server.set_client_final(message)
            if not self._known:
                raise AuthenticationFailed("invalid credentials")
            return self._server.get_server_final().encode("utf-8"), True
        except scramp.ScramException as exc:
            stage = "client-first" if self._stage == 1 else "client-final"
            reason = "invalid credentials" if self._stage == 2 else f"malformed {stage} message"
            log.debug("SCRAM %s refused: %s", stage, exc)
            raise AuthenticationFailed(reason, self.user) from None


# -- the per-connection state machine -----------------------------------------------------


class SaslAuthenticator:
    """The SASL state of one connection (see the module docstring)."""

    def __init__(self, service: "SaslService", peer: str) -> None:
        self._service = service
        self.peer = peer
        self.state = State.HANDSHAKE
        self.raw_tokens = False  # after a v0 handshake the tokens come without headers
        self.mechanism: str | None = None
        self.principal: str | None = None
        self.expires_at: float | None = None  # on the service's clock
        self._exchange = None

    @property
    def expects_raw_token(self) -> bool:
        return self.raw_tokens and self.state is State.AUTHENTICATE

    def handshake(self, version: int, mechanism: str) -> tuple[dict, bool]:
        """The SaslHandshake answer and whether to close after sending it."""
        enabled = list(self._service.enabled_mechanisms)
        if self.state is State.COMPLETE and self._service.reauth_ms and version >= 1:
            self.state = State.HANDSHAKE  # KIP-368 re-authentication
        if self.state is not State.HANDSHAKE:
            return {"error_code": ILLEGAL_SASL_STATE, "mechanisms": enabled}, \
                self.state is not State.COMPLETE
        if mechanism not in enabled:
            self.state = State.FAILED
            log.warning("SASL handshake refused: peer %s asked for mechanism %r, enabled: %s",
                        self.peer, mechanism[:64], ",".join(enabled))
            return {"error_code": UNSUPPORTED_SASL_MECHANISM, "mechanisms": enabled}, True
        self.mechanism = mechanism
        self._exchange = self._service.exchange(mechanism)
        self.raw_tokens = version == 0
        self.state = State.AUTHENTICATE
        return {"error_code": NONE, "mechanisms": enabled}, False

    def authenticate(self, version: int, auth_bytes: bytes) -> tuple[dict, bool]:
        """The SaslAuthenticate answer and whether to close after sending it."""
        if self.state is not State.AUTHENTICATE or self.raw_tokens:
            closing = self.state is not State.COMPLETE
            if closing:
                self.state = State.FAILED
            message = ("SaslAuthenticate request received after successful authentication"
                       if not closing else "SaslAuthenticate without a SaslHandshake first")
            return self._answer(ILLEGAL_SASL_STATE, message, b""), closing
        try:
            response, done = self._step(auth_bytes)
        except AuthenticationFailed:
            return self._answer(SASL_AUTHENTICATION_FAILED, failure_message(self.mechanism),
                                b""), True
        return self._answer(NONE, None, response, done), False

    def raw_token(self, token: bytes) -> bytes:
        """The answer to a raw (v0 handshake) token; SaslRefused closes the connection."""
        try:
            response, _ = self._step(token)
        except AuthenticationFailed:
            raise SaslRefused(failure_message(self.mechanism)) from None
        return response

    def _step(self, token: bytes) -> tuple[bytes, bool]:
        exchange = self._exchange
        try:
            response, done = exchange.step(token)
        except AuthenticationFailed as failure:
            self._failed(failure.reason, failure.user)
            raise
        except PylogError as exc:  # the credential store could not be read
            self._failed(f"credential store: {exc}", None)
            raise AuthenticationFailed("store") from None
        if done:
            self._succeeded(exchange.user)
        return response, done

    def _succeeded(self, user: str) -> None:
        principal = f"User:{user}"
        if self.principal is not None and principal != self.principal:
            self._failed(f"re-authenticated as {principal}, was {self.principal}", user)
            raise AuthenticationFailed("principal changed", user)
        self.principal = principal
        self.state = State.COMPLETE
        reauth_ms = self._service.reauth_ms
        self.expires_at = self._service.clock() + reauth_ms / 1000 if reauth_ms else None
        log.debug("SASL %s authentication of %s from %s succeeded", self.mechanism,
                  principal, self.peer)

    def _failed(self, reason: str, user: str | None) -> None:
        self.state = State.FAILED
        who = f"user {user!r}" if user is not None else "an unknown user"
        log.warning("SASL authentication failed: peer %s, mechanism %s, %s: %s",
                    self.peer, self.mechanism, who, reason)

    def _answer(self, code: int, message: str | None, token: bytes, done: bool = False) -> dict:
        lifetime = self._service.reauth_ms if done and self._service.reauth_ms else 0
        return {"error_code": code, "error_message": message, "auth_bytes": token,
                "session_lifetime_ms": lifetime}

    def expired(self) -> bool:
        return self.expires_at is not None and self._service.clock() >= self.expires_at


class SaslService:
    """SASL for a broker: mechanisms, the credential store, re-authentication.

    >>> service = SaslService(FileCredentialStore(log_dir), ["SCRAM-SHA-256"])
    >>> authenticator = service.authenticator("127.0.0.1:50000")
    """

    def __init__(self, store: CredentialStore, enabled_mechanisms=DEFAULT_MECHANISMS, *,
                 reauth_ms: int = 0, clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.enabled_mechanisms = tuple(enabled_mechanisms)
        self.reauth_ms = reauth_ms
        self.clock = clock
        self._decoy_key = secrets.token_bytes(32)

    def authenticator(self, peer: str) -> SaslAuthenticator:
        return SaslAuthenticator(self, peer)

    def exchange(self, mechanism: str):
        if mechanism == PLAIN:
            return _PlainExchange(self.store, self._decoy)
        return _ScramExchange(MECHANISMS[mechanism], self.store, self._decoy)

    def _decoy(self, user: str) -> ScramCredential:
        """A stable made-up credential for an unknown user (RFC 5802 section 9)."""
        seed = hmac.new(self._decoy_key, user.encode("utf-8", "replace"), "sha512").digest()
        return ScramCredential(seed[:32], seed[32:], secrets.token_bytes(32), DEFAULT_ITERATIONS)

    # -- request handling (called by the dispatcher) ------------------------------------

    def handle(self, session: "Session", api_key: int, version: int,
               body: Mapping) -> tuple[dict, bool]:
        """Answer SaslHandshake (17) or SaslAuthenticate (36) for ``session``; the flag
        says to close the connection once the answer is sent."""
        if session.security_protocol not in SASL_PROTOCOLS:
            return sasl_disabled_answer(api_key, session.listener), False
        authenticator = self.authenticator_of(session)
        if api_key == 17:
            answer = authenticator.handshake(version, body["mechanism"])
        else:
            answer = authenticator.authenticate(version, body["auth_bytes"])
        self._apply(session, authenticator)
        return answer

    def raw_token(self, session: "Session", token: bytes) -> bytes:
        authenticator = self.authenticator_of(session)
        response = authenticator.raw_token(token)
        self._apply(session, authenticator)
        return response

    def authenticator_of(self, session: "Session") -> SaslAuthenticator:
        if session.sasl is None:
            session.sasl = self.authenticator(session.client_address)
        return session.sasl

    @staticmethod
    def _apply(session: "Session", authenticator: SaslAuthenticator) -> None:
        if authenticator.state is State.COMPLETE and authenticator.principal:
            session.principal = authenticator.principal
            session.authenticated = True
        elif authenticator.state is State.FAILED:
            session.authenticated = False  # whatever comes next closes the connection

    def describe_user_scram_credentials(self, body: Mapping) -> dict:
        return scram_admin.describe_user_scram_credentials(self.store, body)

    def alter_user_scram_credentials(self, body: Mapping) -> dict:
        return scram_admin.alter_user_scram_credentials(self.store, body)

    def close(self) -> None:
        self.store.close()


def sasl_disabled_answer(api_key: int, listener: str) -> dict:
    """What SaslHandshake (17) or SaslAuthenticate (36) gets on a listener without SASL."""
    if api_key == 17:
        return {"error_code": ILLEGAL_SASL_STATE, "mechanisms": []}
    return {"error_code": ILLEGAL_SASL_STATE, "auth_bytes": b"", "session_lifetime_ms": 0,
            "error_message": f"SASL is not enabled on the {listener} listener"}


def parse_mechanisms(key: str, text: str) -> tuple[str, ...]:
    """``sasl.enabled.mechanisms``: a comma-separated list of mechanisms pylog serves.

    Raises ConfigError naming ``key`` for an empty list or a mechanism pylog lacks
    (GSSAPI, OAUTHBEARER).
    """
    from pylog.errors import ConfigError

    names = tuple(dict.fromkeys(part.strip().upper() for part in text.split(",") if part.strip()))
    if not names:
        raise ConfigError(key, "no SASL mechanism given")
    for name in names:
        if name not in SUPPORTED_MECHANISMS:
            raise ConfigError(key, f"{name} is not supported; pylog serves "
                                   f"{', '.join(SUPPORTED_MECHANISMS)}")
    return names
