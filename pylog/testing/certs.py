"""Certificates for TLS tests, made with ``pylog.security.certificates``.

``TestCertificates.create(directory)`` writes a CA (the truststore), a broker keystore
for 127.0.0.1 and localhost (key and chain in one PEM file, the key encrypted with
``key_password``), and a stranger CA nobody trusts. Client certificates come on demand::

    certs = TestCertificates.create(tmp_path, key_password="changeit")
    broker = BrokerProcess(tmp_path / "b", {**certs.broker_settings(), ...})
    alice = certs.client("alice", organizational_unit="eng", organization="acme")
    confluent_kafka.Producer({..., **alice.librdkafka()})
    certs.stranger_client("mallory"); certs.expired_client("old")
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from pylog.security.certificates import CertificateAuthority, IssuedCertificate

HOSTS = ("127.0.0.1", "localhost")


@dataclass(frozen=True)
class ClientCertificate:
    """A client's files: certificate chain, key (encrypted with ``password`` if set),
    and both in one PEM keystore; ``principal`` is what a broker names it."""

    certificate: Path
    key: Path
    keystore: Path
    password: str | None
    principal: str

    def librdkafka(self) -> dict[str, str]:
        """confluent-kafka / kcat settings presenting this certificate."""
        settings = {"ssl.certificate.location": str(self.certificate),
                    "ssl.key.location": str(self.key)}
        if self.password:
            settings["ssl.key.password"] = self.password
        return settings

    def kafka_python(self) -> dict[str, str]:
        """kafka-python settings presenting this certificate."""
        return {"ssl_certfile": str(self.certificate), "ssl_keyfile": str(self.key),
                "ssl_password": self.password}


@dataclass
class TestCertificates:
    directory: Path
    ca: CertificateAuthority
    stranger_ca: CertificateAuthority
    truststore: Path  # the CA, PEM
    stranger_truststore: Path  # a CA that signed nothing the broker has
    keystore: Path  # the broker's key and chain
    key_password: str | None

    __test__ = False  # not a pytest class

    @classmethod
    def create(cls, directory: Path, key_password: str | None = "changeit",
               hosts: tuple[str, ...] = HOSTS) -> "TestCertificates":
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        ca = CertificateAuthority.create("pylog test CA")
        stranger = CertificateAuthority.create("stranger CA")
        broker = ca.issue("broker", hosts, organizational_unit="brokers", organization="pylog")
        return cls(directory, ca, stranger,
                   ca.write_truststore(directory / "ca.pem"),
                   stranger.write_truststore(directory / "stranger-ca.pem"),
                   broker.write_keystore(directory / "broker.pem", key_password),
                   key_password)

    def broker_settings(self, client_auth: str = "none", prefix: str = "") -> dict[str, str]:
        """``ssl.*`` broker settings (``prefix``: e.g. ``listener.name.ssl.``)."""
        settings = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(self.keystore),
                    "ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.truststore),
                    "ssl.client.auth": client_auth}
        if self.key_password:
            settings["ssl.key.password"] = self.key_password
        return {prefix + key: value for key, value in settings.items()}

    def client(self, common_name: str, *, organizational_unit: str | None = None,
               organization: str | None = None) -> ClientCertificate:
        """A client certificate from the trusted CA."""
        return self._write(common_name, self.ca.issue(
            common_name, organizational_unit=organizational_unit, organization=organization))

    def stranger_client(self, common_name: str) -> ClientCertificate:
        """A client certificate from a CA the broker does not trust."""
        return self._write(f"stranger-{common_name}", self.stranger_ca.issue(common_name))

    def expired_client(self, common_name: str) -> ClientCertificate:
        """A client certificate from the trusted CA that expired yesterday."""
        now = datetime.datetime.now(datetime.timezone.utc)
        return self._write(f"expired-{common_name}", self.ca.issue(
            common_name, not_before=now - datetime.timedelta(days=30),
            not_after=now - datetime.timedelta(days=1)))

    def _write(self, stem: str, issued: IssuedCertificate) -> ClientCertificate:
        password = self.key_password
        return ClientCertificate(
            issued.write_certificate(self.directory / f"{stem}-cert.pem"),
            issued.write_key(self.directory / f"{stem}-key.pem", password),
            issued.write_keystore(self.directory / f"{stem}.pem", password),
            password, "User:" + issued.subject)
