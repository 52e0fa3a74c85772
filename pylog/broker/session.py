"""Who is on the other end of a connection: its address, listener and principal.

The network layer makes one ``Session`` per connection. Authentication fills in the
principal (TLS: the client certificate's subject; SASL: the user name); request handlers
and the authorizer read it, and group handlers report ``client_host`` as Kafka does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pylog.security.sasl import SaslAuthenticator

ANONYMOUS = "User:ANONYMOUS"


@dataclass
class Session:
    client_address: str  # "host:port" of the client
    listener: str = "PLAINTEXT"  # the listener's name
    security_protocol: str = "PLAINTEXT"  # PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL
    principal: str = ANONYMOUS  # "User:<name>" once authenticated
    authenticated: bool = True  # a SASL listener's sessions start False
    sasl: SaslAuthenticator | None = None  # the SASL exchange, once one started

    @property
    def client_host(self) -> str:
        return self.client_address.rsplit(":", 1)[0]
