"""TLS on broker listeners: Kafka's PEM settings, the server context, the peer's principal.

Settings use Kafka's names (``ssl.keystore.location`` and friends); ``TlsSettings`` holds
one listener's values and remembers which key each came from, so a mistake names the
key the operator wrote (``listener.name.client.ssl.keystore.location`` or the
broker-wide one).

The keystore is one PEM file holding the private key (PKCS#8, encrypted with
``ssl.key.password`` or not) and the certificate chain, leaf first. The truststore is a
PEM file of CA certificates. ``ssl.client.auth`` asks clients for a certificate:
``none`` (never), ``requested`` (verified if sent) or ``required`` (no certificate, no
connection). The principal of a client that presented one is ``User:`` plus its subject
as an RFC 4514 string, most specific first (``User:CN=alice,OU=eng,O=acme``), the name
Kafka's default principal builder gives.
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from pylog.errors import ConfigError

CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
               "required": ssl.CERT_REQUIRED}
_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


@dataclass(frozen=True)
class TlsSettings:
    """One listener's TLS settings. ``keys`` maps each setting to the key it was read
    from (for error messages)."""

    keystore_type: str = "PEM"
    keystore_location: str | None = None
    key_password: str | None = field(default=None, repr=False)
    truststore_type: str = "PEM"
    truststore_location: str | None = None
    client_auth: str = "none"
    enabled_protocols: str = "TLSv1.2,TLSv1.3"
    endpoint_identification_algorithm: str = "https"
    keys: dict = field(default_factory=dict, compare=False, repr=False)

    _FIELDS = {"keystore_type": "ssl.keystore.type",
               "keystore_location": "ssl.keystore.location",
               "key_password": "ssl.key.password",
               "truststore_type": "ssl.truststore.type",
               "truststore_location": "ssl.truststore.location",
               "client_auth": "ssl.client.auth",
               "enabled_protocols": "ssl.enabled.protocols",
               "endpoint_identification_algorithm": "ssl.endpoint.identification.algorithm"}

    @classmethod
    def from_lookup(cls, lookup: Callable[[str], tuple[str, object]]) -> "TlsSettings":
        """Build from ``lookup(setting) -> (key used, value)``."""
        values, keys = {}, {}
        for name, setting in cls._FIELDS.items():
            key, value = lookup(setting)
            keys[name] = key
            if value is not None:
                values[name] = value
        return cls(**values, keys=keys)

    def _key(self, name: str) -> str:
        return self.keys.get(name, self._FIELDS[name])

    def check_server(self) -> None:
        """Raise ConfigError naming the key unless a server context can be built from
        these settings (files are read by ``server_context``)."""
        for name in ("keystore_type", "truststore_type"):
            if str(getattr(self, name)).upper() != "PEM":
                raise ConfigError(self._key(name), f"only PEM is supported, got "
                                                   f"{getattr(self, name)!r}")
        if not self.keystore_location:
            raise ConfigError(self._key("keystore_location"),
                              "required by a listener whose protocol is SSL or SASL_SSL")
        if self.client_auth.strip().lower() not in CLIENT_AUTH:
            raise ConfigError(self._key("client_auth"), f"expected none, requested or "
                                                        f"required, got {self.client_auth!r}")
        self._versions()

    def _versions(self) -> list[ssl.TLSVersion]:
        names = [part.strip() for part in self.enabled_protocols.split(",") if part.strip()]
        unknown = [name for name in names if name not in _VERSIONS]
        if unknown or not names:
            raise ConfigError(self._key("enabled_protocols"),
                              f"expected some of {', '.join(_VERSIONS)}, got "
                              f"{self.enabled_protocols!r}")
        return sorted(_VERSIONS[name] for name in names)

    def server_context(self) -> ssl.SSLContext:
        """An SSLContext for a listener. Raises ConfigError naming the key when a file
        cannot be read, the key password is wrong or the key does not match."""
        self.check_server()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        versions = self._versions()
        context.minimum_version, context.maximum_version = versions[0], versions[-1]
        self._load_keystore(context)
        context.verify_mode = CLIENT_AUTH[self.client_auth.strip().lower()]
        if self.truststore_location:
            self._load_truststore(context)
        elif context.verify_mode != ssl.CERT_NONE:
            context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        return context

    def _load_keystore(self, context: ssl.SSLContext) -> None:
        path = self.keystore_location
        if not Path(path).is_file():
            raise ConfigError(self._key("keystore_location"), f"cannot read {path}")
        try:
            encrypted = b"ENCRYPTED" in Path(path).read_bytes()
            # One PEM file holds both the key and the chain, as Kafka's PEM keystore does.
            # A callable password: OpenSSL must never prompt on the terminal.
            context.load_cert_chain(path, password=lambda: (self.key_password or "").encode())
        except ssl.SSLError as error:
            if encrypted:
                raise ConfigError(self._key("key_password"), f"cannot decrypt the private key "
                                  f"in {path} (wrong or missing password?)") from None
            raise ConfigError(self._key("keystore_location"), f"{path} must hold a private key "
                              f"and its certificate chain in PEM: {error.reason or error}"
                              ) from None
        except (OSError, TypeError, ValueError) as error:
            raise ConfigError(self._key("keystore_location"),
                              f"cannot load {path}: {error}") from None

    def _load_truststore(self, context: ssl.SSLContext) -> None:
        path = self.truststore_location
        try:
            context.load_verify_locations(cafile=path)
        except (ssl.SSLError, OSError) as error:
            raise ConfigError(self._key("truststore_location"),
                              f"cannot load CA certificates from {path}: "
                              f"{getattr(error, 'reason', None) or error}") from None


def peer_principal(sock: ssl.SSLSocket) -> str | None:
    """``User:<subject>`` of the verified client certificate, or None if none was sent."""
    der = sock.getpeercert(binary_form=True)
    if not der:
        return None
    from cryptography import x509  # imported on first use: only mutual TLS needs it

    return "User:" + x509.load_der_x509_certificate(der).subject.rfc4514_string()


def failure_reason(error: BaseException) -> str:
    """OpenSSL's reason for a failed handshake, as a short phrase ("certificate has
    expired", "tlsv1 alert unknown ca", "wrong version number")."""
    message = getattr(error, "verify_message", None)
    if message:
        return message
    reason = getattr(error, "reason", None)
    if reason:
        return reason.lower().replace("_", " ")
    text = getattr(error, "strerror", None) or str(error) or type(error).__name__
    return re.sub(r"\s*\(_ssl\.c:\d+\)$", "", text)
