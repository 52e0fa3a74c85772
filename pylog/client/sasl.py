"""The client's side of SASL: SaslHandshake v1, then SaslAuthenticate tokens.

PLAIN sends ``NUL user NUL password`` once. SCRAM-SHA-256/512 run ``scramp``'s client:
client-first, server-first, client-final, and the server-final message is checked, so a
server that does not know the password cannot pass as the broker.

Errors: SaslAuthenticationFailedError (the broker refused the credentials; not
retriable), UnsupportedSaslMechanismError (the broker does not offer the mechanism),
IllegalSaslStateError, UnsupportedVersionError (a broker without SaslHandshake v1).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import scramp

from pylog.errors import KafkaError, UnsupportedVersionError, raise_for_code
from pylog.protocol import ApiKey
from pylog.security.scram import accept_kafkas_salts

if TYPE_CHECKING:
    from pylog.client.connection import BrokerConnection
    from pylog.client.security import SecurityConfig

SaslAuthenticationFailedError = KafkaError.for_code(58)

accept_kafkas_salts()  # a Kafka credential may have any salt; its server-first carries it


def authenticate(connection: "BrokerConnection", security: "SecurityConfig") -> None:
    """Log ``connection`` in as ``security.sasl_username`` (called by connect())."""
    mechanism = security.sasl_mechanism
    handshake = connection.versions.get(ApiKey.SASL_HANDSHAKE)
    authenticate_versions = connection.versions.get(ApiKey.SASL_AUTHENTICATE)
    if not handshake or handshake[1] < 1 or not authenticate_versions:
        raise UnsupportedVersionError(f"broker {connection.address} does not offer "
                                      "SaslHandshake v1 and SaslAuthenticate")
    version = min(authenticate_versions[1], 2)
    answer = connection.roundtrip(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mechanism})
    raise_for_code(answer["error_code"],
                   f"broker {connection.address} does not offer SASL mechanism {mechanism} "
                   f"(it offers {', '.join(answer['mechanisms']) or 'none'})")

    def exchange(token: bytes) -> bytes:
        response = connection.roundtrip(ApiKey.SASL_AUTHENTICATE, version,
                                        {"auth_bytes": token})
        raise_for_code(response["error_code"],
                       response.get("error_message") or f"SASL {mechanism} login to "
                                                         f"{connection.address} failed")
        return bytes(response["auth_bytes"])

    if mechanism == "PLAIN":
        exchange(b"\0" + security.sasl_username.encode("utf-8") + b"\0"
                 + security.sasl_password.encode("utf-8"))
        return
    client = scramp.ScramClient([mechanism], security.sasl_username, security.sasl_password)
    try:
        server_first = exchange(client.get_client_first().encode("utf-8"))
        client.set_server_first(server_first.decode("utf-8"))
        server_final = exchange(client.get_client_final().encode("utf-8"))
        client.set_server_final(server_final.decode("utf-8"))
    except (scramp.ScramException, UnicodeDecodeError) as exc:
        # Never echo scramp's text: it may quote messages; say what failed.
        raise SaslAuthenticationFailedError(
            f"SCRAM exchange with {connection.address} failed: {type(exc).__name__} "
            f"(the broker's answer did not verify)") from None
