"""The SASL authenticator's states in-process, with an injected clock: re-authentication
(KIP-368) keeps the principal, a changed principal or an expired session is refused."""

from __future__ import annotations

import scramp

from pylog.broker.session import Session
from pylog.security.credentials import FileCredentialStore
from pylog.security.sasl import SaslService
from pylog.security.scram import SCRAM_SHA_256, ScramCredential


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def service(tmp_path, clock, reauth_ms=0):
    store = FileCredentialStore(tmp_path)
    for user in ("alice", "bob"):
        store.alter(user, {"SCRAM-SHA-256": ScramCredential.from_password(
            SCRAM_SHA_256, f"{user}-pw")})
    return SaslService(store, ["PLAIN", "SCRAM-SHA-256"], reauth_ms=reauth_ms, clock=clock)


def scram_login(sasl, session, user, password):
    handshake, close = sasl.handle(session, 17, 1, {"mechanism": "SCRAM-SHA-256"})
    if handshake["error_code"]:
        return handshake, close
    client = scramp.ScramClient(["SCRAM-SHA-256"], user, password)
    first, _ = sasl.handle(session, 36, 2, {"auth_bytes": client.get_client_first().encode()})
    client.set_server_first(first["auth_bytes"].decode())
    return sasl.handle(session, 36, 2, {"auth_bytes": client.get_client_final().encode()})


def test_reauthentication_keeps_the_principal_and_refuses_another(tmp_path):
    clock = Clock()
    sasl = service(tmp_path, clock, reauth_ms=60000)
    session = Session("10.0.0.1:5000", "SASL", "SASL_PLAINTEXT", authenticated=False)
    answer, close = scram_login(sasl, session, "alice", "alice-pw")
    assert (answer["error_code"], answer["session_lifetime_ms"], close) == (0, 60000, False)
    assert session.principal == "User:alice" and session.authenticated
    clock.now += 59
    assert not session.sasl.expired()
    answer, close = scram_login(sasl, session, "alice", "alice-pw")
    assert answer["error_code"] == 0 and not close
    clock.now += 59  # counted from the re-authentication
    assert not session.sasl.expired()
    clock.now += 2
    assert session.sasl.expired()
    answer, close = scram_login(sasl, session, "bob", "bob-pw")
    assert answer["error_code"] == 58 and close
    assert not session.authenticated


def test_without_reauth_a_second_handshake_is_an_illegal_state(tmp_path):
    sasl = service(tmp_path, Clock())
    session = Session("10.0.0.1:5000", "SASL", "SASL_PLAINTEXT", authenticated=False)
    answer, _ = scram_login(sasl, session, "alice", "alice-pw")
    assert answer["session_lifetime_ms"] == 0 and not session.sasl.expired()
    again, close = sasl.handle(session, 17, 1, {"mechanism": "SCRAM-SHA-256"})
    assert again["error_code"] == 34 and not close and session.authenticated


def test_sasl_requests_on_a_plaintext_listener_are_an_illegal_state(tmp_path):
    sasl = service(tmp_path, Clock())
    session = Session("10.0.0.1:5000")
    assert sasl.handle(session, 17, 1, {"mechanism": "PLAIN"}) == (
        {"error_code": 34, "mechanisms": []}, False)
    answer, close = sasl.handle(session, 36, 1, {"auth_bytes": b"\0alice\0alice-pw"})
    assert answer["error_code"] == 34 and not close and session.principal == "User:ANONYMOUS"
