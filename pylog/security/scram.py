"""SCRAM credentials as Kafka stores them: pure code, no I/O.

A credential never holds the password, only what RFC 5802 lets a server keep::

    salted_password = PBKDF2-HMAC-H(password, salt, iterations)
    client_key      = HMAC-H(salted_password, "Client Key")
    stored_key      = H(client_key)
    server_key      = HMAC-H(salted_password, "Server Key")

Kafka writes one credential per user and mechanism as a string (``ScramCredentialUtils``),
in ZooKeeper under ``/config/users/<user>`` and in pylog's standalone credentials file::

    salt=<base64>,stored_key=<base64>,server_key=<base64>,iterations=4096

Mechanisms have a wire number in the KIP-554 admin APIs (``ScramMechanism.type``):
0 UNKNOWN, 1 SCRAM-SHA-256, 2 SCRAM-SHA-512. Iterations must lie in 4096..16384 (Kafka's
bounds for upserted credentials).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from dataclasses import dataclass

MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096
# Kafka takes any salt an administrator gives (AlterUserScramCredentials, kafka-configs.sh
# --add-config 'SCRAM-SHA-256=[salt=...]'); its own salts are about 26 bytes.
MIN_SALT_BYTES = 1


def accept_kafkas_salts() -> None:
    """Let scramp's server and client take the salts Kafka takes: scramp refuses salts under
    12 bytes in server-first (``scramp.core.Salt.MIN_LENGTH``), which would lock out a
    user whose credential Kafka, and so pylog, accepted."""
    import scramp.core

    scramp.core.Salt.MIN_LENGTH = MIN_SALT_BYTES


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    name: str  # "SCRAM-SHA-256"
    type: int  # the KIP-554 wire number
    hash_name: str  # hashlib name

    def digest(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()

    def salted_password(self, password: str | bytes, salt: bytes, iterations: int) -> bytes:
        """PBKDF2 of the password's UTF-8 bytes, as Kafka's ScramFormatter does."""
        secret = password.encode("utf-8") if isinstance(password, str) else password
        return hashlib.pbkdf2_hmac(self.hash_name, secret, salt, iterations)


SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", 1, "sha256")
SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", 2, "sha512")
MECHANISMS: dict[str, ScramMechanism] = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
MECHANISMS_BY_TYPE: dict[int, ScramMechanism] = {m.type: m for m in MECHANISMS.values()}


class CredentialFormatError(ValueError):
    """A stored credential string is not ``salt=..,stored_key=..,server_key=..,iterations=N``."""


def mechanism_named(name: str) -> ScramMechanism | None:
    return MECHANISMS.get(name.strip().upper())


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the broker keeps of one user's password for one mechanism."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def from_salted_password(cls, mechanism: ScramMechanism, salt: bytes,
                             salted_password: bytes, iterations: int) -> "ScramCredential":
        """The credential for a salted password (what AlterUserScramCredentials carries)."""
        client_key = mechanism.hmac(salted_password, b"Client Key")
        return cls(salt, mechanism.digest(client_key),
                   mechanism.hmac(salted_password, b"Server Key"), iterations)

    @classmethod
    def from_password(cls, mechanism: ScramMechanism, password: str,
                      iterations: int = DEFAULT_ITERATIONS,
                      salt: bytes | None = None) -> "ScramCredential":
        """A new credential with a random 32-byte salt unless ``salt`` is given.

        >>> cred = ScramCredential.from_password(SCRAM_SHA_256, "secret")
        >>> cred.matches(SCRAM_SHA_256, "secret")
        True
        """
        salt = secrets.token_bytes(32) if salt is None else salt
        return cls.from_salted_password(
            mechanism, salt, mechanism.salted_password(password, salt, iterations), iterations)

    def matches(self, mechanism: ScramMechanism, password: str | bytes) -> bool:
        """Whether ``password`` yields this credential (constant-time comparison)."""
        candidate = ScramCredential.from_salted_password(
            mechanism, self.salt, mechanism.salted_password(password, self.salt, self.iterations),
            self.iterations)
        return hmac.compare_digest(candidate.stored_key, self.stored_key) & \
            hmac.compare_digest(candidate.server_key, self.server_key)

    def to_kafka_string(self) -> str:
        """Kafka's ``ScramCredentialUtils.credentialToString`` form."""
        return (f"salt={_b64(self.salt)},stored_key={_b64(self.stored_key)},"
                f"server_key={_b64(self.server_key)},iterations={self.iterations}")

    @classmethod
    def from_kafka_string(cls, text: str) -> "ScramCredential":
        """Parse Kafka's credential string; CredentialFormatError if it is not one."""
        fields = {}
        for part in text.split(","):
            key, sep, value = part.partition("=")
            if not sep:
                raise CredentialFormatError(f"credential part {key[:20]!r} is not key=value")
            fields[key.strip()] = value.strip()
        if set(fields) != {"salt", "stored_key", "server_key", "iterations"}:
            raise CredentialFormatError(f"credential has fields {sorted(fields)}, expected "
                                        "salt, stored_key, server_key, iterations")
        try:
            return cls(_unb64(fields["salt"]), _unb64(fields["stored_key"]),
                       _unb64(fields["server_key"]), int(fields["iterations"]))
        except (binascii.Error, ValueError) as exc:
            raise CredentialFormatError(f"credential value is malformed: {exc}") from None

    def __repr__(self) -> str:  # keys are secret-equivalent for offline attacks
        return f"ScramCredential(iterations={self.iterations})"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


def sanitize_user(name: str) -> str:
    """A user name as a ZooKeeper node name, as Kafka's ``Sanitizer.sanitize``: UTF-8
    percent-encoding of everything but ASCII letters, digits and ``.-_``."""
    out = []
    for byte in name.encode("utf-8"):
        char = chr(byte)
        out.append(char if char.isascii() and (char.isalnum() or char in ".-_") else f"%{byte:02X}")
    return "".join(out)


def desanitize_user(node: str) -> str:
    from urllib.parse import unquote

    return unquote(node, encoding="utf-8")
