"""Client security settings, named as librdkafka names them, shared by the client, the CLI
(``--command-config FILE``) and the loader.

=========================================  ===============================================
``security.protocol``                      PLAINTEXT (default), SSL, SASL_PLAINTEXT, SASL_SSL
``sasl.mechanism``                         PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
``sasl.username`` / ``sasl.password``      the SASL credentials
``ssl.ca.location``                        PEM file of CAs to trust (default: the system's)
``ssl.certificate.location``               PEM client certificate (mutual TLS)
``ssl.key.location``                       PEM private key of that certificate
``ssl.key.password``                       password of an encrypted private key
``ssl.endpoint.identification.algorithm``  ``https`` (default): check the broker's host
                                           name against its certificate; ``none``: do not
=========================================  ===============================================

Java-client properties files also work: ``sasl.jaas.config`` (its ``username="..."
password="..."``) and ``ssl.truststore.location`` with ``ssl.truststore.type=PEM``.

``SecurityConfig.from_mapping(settings)`` checks every key and value and raises
ConfigError naming the key. Secrets (``sasl.password``, ``ssl.key.password``) never
appear in a repr or an error message.

>>> security = SecurityConfig.from_mapping({
...     "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
...     "sasl.username": "alice", "sasl.password": os.environ["ALICE_PASSWORD"],
...     "ssl.ca.location": "ca.pem"})
>>> Producer("broker:9093", security=security)
"""

from __future__ import annotations

import functools
import re
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from pylog.errors import ConfigError

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
ENDPOINT_IDENTIFICATION = ("https", "none")

_KEYS = {
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",  # librdkafka's older spelling
    "sasl.username": "sasl_username",
    "sasl.password": "sasl_password",
    "ssl.ca.location": "ssl_ca_location",
    "ssl.certificate.location": "ssl_certificate_location",
    "ssl.key.location": "ssl_key_location",
    "ssl.key.password": "ssl_key_password",
    "ssl.endpoint.identification.algorithm": "ssl_endpoint_identification_algorithm",
}
# Java-client keys understood for --command-config files written for kafka-*.sh.
_JAVA_KEYS = ("sasl.jaas.config", "ssl.truststore.location", "ssl.truststore.type")
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class SecurityConfig:
    """How a client secures its broker connections (see the module docstring)."""

    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_ca_location: str | None = None
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    ssl_key_password: str | None = field(default=None, repr=False)
    ssl_endpoint_identification_algorithm: str = "https"

    def __post_init__(self) -> None:
        self._check()

    @classmethod
    def from_mapping(cls, settings: Mapping[str, object]) -> "SecurityConfig":
        """Settings by librdkafka name (see the module docstring); ConfigError names a
        key that is unknown or has a bad value."""
        values: dict[str, object] = {}
        java = {}
        for key, value in settings.items():
            if key in _KEYS:
                values[_KEYS[key]] = None if value is None else str(value).strip()
            elif key in _JAVA_KEYS:
                java[key] = str(value).strip()
            else:
                raise ConfigError(key, "unknown security setting; expected one of "
                                       f"{', '.join(sorted(set(_KEYS) | set(_JAVA_KEYS)))}")
        if "sasl.jaas.config" in java:
            username, password = parse_jaas_credentials("sasl.jaas.config",
                                                        java["sasl.jaas.config"])
            values.setdefault("sasl_username", username)
            values.setdefault("sasl_password", password)
        if "ssl.truststore.location" in java:
            if java.get("ssl.truststore.type", "JKS").upper() != "PEM":
                raise ConfigError("ssl.truststore.type", "only PEM truststores are supported "
                                                         "(set ssl.truststore.type=PEM)")
            values.setdefault("ssl_ca_location", java["ssl.truststore.location"])
        if values.get("security_protocol"):
            values["security_protocol"] = str(values["security_protocol"]).upper()
        if values.get("sasl_mechanism"):
            values["sasl_mechanism"] = str(values["sasl_mechanism"]).upper()
        if values.get("ssl_endpoint_identification_algorithm") == "":
            values["ssl_endpoint_identification_algorithm"] = "none"  # Java's spelling of off
        return cls(**{k: v for k, v in values.items() if v is not None})

    @classmethod
    def coerce(cls, value: "SecurityConfig | Mapping[str, object] | None") -> "SecurityConfig":
        """A SecurityConfig from itself, a settings mapping, or None (PLAINTEXT)."""
        if value is None:
            return PLAINTEXT
        if isinstance(value, SecurityConfig):
            return value
        return cls.from_mapping(value)

    def _check(self) -> None:
        if self.security_protocol not in SECURITY_PROTOCOLS:
            raise ConfigError("security.protocol", f"expected one of "
                              f"{', '.join(SECURITY_PROTOCOLS)}, got {self.security_protocol!r}")
        if self.ssl_endpoint_identification_algorithm.lower() not in ENDPOINT_IDENTIFICATION:
            raise ConfigError("ssl.endpoint.identification.algorithm",
                              f"expected https or none, got "
                              f"{self.ssl_endpoint_identification_algorithm!r}")
        if self.uses_sasl:
            if not self.sasl_mechanism:
                raise ConfigError("sasl.mechanism", f"required with security.protocol="
                                  f"{self.security_protocol}: one of {', '.join(SASL_MECHANISMS)}")
            if self.sasl_mechanism not in SASL_MECHANISMS:
                raise ConfigError("sasl.mechanism", f"{self.sasl_mechanism!r} is not supported; "
                                  f"expected one of {', '.join(SASL_MECHANISMS)}")
            for key, value in (("sasl.username", self.sasl_username),
                               ("sasl.password", self.sasl_password)):
                if not value:
                    raise ConfigError(key, f"required with security.protocol="
                                           f"{self.security_protocol}")
        if self.uses_tls:
            for key, path in (("ssl.ca.location", self.ssl_ca_location),
                              ("ssl.certificate.location", self.ssl_certificate_location),
                              ("ssl.key.location", self.ssl_key_location)):
                if path is not None and not Path(path).is_file():
                    raise ConfigError(key, f"no such file: {path}")
            if self.ssl_key_location and not self.ssl_certificate_location:
                raise ConfigError("ssl.certificate.location", "required with ssl.key.location")

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @property
    def verifies_hostname(self) -> bool:
        return self.ssl_endpoint_identification_algorithm.lower() == "https"

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context for this configuration (built once, shared by connections,
        until :func:`reload_ssl_contexts`).

        Raises ConfigError naming the key of a file that cannot be loaded.
        """
        return _ssl_context(self, _generation)

    def check_files(self) -> None:
        """Load the certificate, key and CA files into a context of their own, used by
        nobody: ConfigError names the key of a file that cannot be loaded."""
        _ssl_context.__wrapped__(self, -1)

    def describe(self) -> str:
        """A line for logs: protocol, mechanism and user, never a secret."""
        if self.uses_sasl:
            return f"{self.security_protocol} {self.sasl_mechanism} as {self.sasl_username}"
        return self.security_protocol


PLAINTEXT = SecurityConfig()


_generation = 0  # part of the cache key: a reload makes every later lookup miss


@functools.lru_cache(maxsize=32)
def _ssl_context(config: SecurityConfig, generation: int) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = config.verifies_hostname
    context.verify_mode = ssl.CERT_REQUIRED
    try:
        if config.ssl_ca_location:
            context.load_verify_locations(cafile=config.ssl_ca_location)
        else:
            context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError("ssl.ca.location", f"cannot load {config.ssl_ca_location}: "
                                             f"{_ssl_reason(exc)}") from None
    if config.ssl_certificate_location:
        try:
            context.load_cert_chain(config.ssl_certificate_location,
                                    config.ssl_key_location or None,
                                    password=config.ssl_key_password)
        except (OSError, ssl.SSLError) as exc:
            key = "ssl.key.location" if config.ssl_key_location else "ssl.certificate.location"
            raise ConfigError(key, f"cannot load the client certificate and key: "
                                   f"{_ssl_reason(exc)}") from None
    return context


def reload_ssl_contexts() -> None:
    """Forget the TLS contexts built so far: the next connection of every configuration
    reads its certificate, key and CA files again (a keystore replaced in place). A context
    being built meanwhile from the old files is cached under the old generation, which no
    later lookup asks for."""
    global _generation
    _generation += 1
    _ssl_context.cache_clear()


def _ssl_reason(exc: BaseException) -> str:
    return getattr(exc, "reason", None) or getattr(exc, "strerror", None) or type(exc).__name__


def parse_jaas_credentials(key: str, text: str) -> tuple[str, str]:
    """``username`` and ``password`` of a JAAS line such as
    ``org.apache.kafka.common.security.scram.ScramLoginModule required username="a"
    password="b";``. ConfigError naming ``key`` (never showing the text) otherwise."""
    options = {name: value.replace('\\"', '"').replace("\\\\", "\\")
               for name, value in _JAAS_OPTION.findall(text)}
    if "username" not in options or "password" not in options:
        raise ConfigError(key, 'expected a login module with username="..." and '
                               'password="..." options')
    return options["username"], options["password"]
