"""Certificates for TLS listeners: a CA, broker and client certificates, as PEM files.

Files are written in the layout Kafka's PEM settings read:

* a **keystore** (``ssl.keystore.location``): the private key (PKCS#8, encrypted with
  ``ssl.key.password`` when one is given) followed by the certificate chain, leaf first;
* a **truststore** (``ssl.truststore.location``, librdkafka's ``ssl.ca.location``): the
  CA certificate;
* for clients, also the certificate chain and the key as separate files
  (``ssl.certificate.location``, ``ssl.key.location``).

Every file is written to a temporary name and renamed; files holding keys are mode 0600.

From the command line (a deployment's first certificates; run again to add hosts or
clients, reusing the CA in DIR)::

    python -m pylog.security.certificates --dir certs --hosts broker1.example,10.0.0.5 \\
        --client alice --key-password-env PYLOG_KEY_PASSWORD

writes ``certs/ca.pem`` (truststore), ``certs/ca-key.pem`` (keep it safe),
``certs/broker.pem`` (keystore) and ``certs/client-alice{.pem,-cert.pem,-key.pem}``.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DAY = datetime.timedelta(days=1)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _name(common_name: str, organizational_unit: str | None = None,
          organization: str | None = None) -> x509.Name:
    attributes = []
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    if organizational_unit:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME,
                                             organizational_unit))
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


def _san(hosts: Sequence[str]) -> x509.SubjectAlternativeName:
    names = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


@dataclass
class IssuedCertificate:
    """A private key with its certificate and the chain up to (not including) the root."""

    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate
    issuer: "CertificateAuthority"

    @property
    def subject(self) -> str:
        """The subject as RFC 4514 text, as a broker names the principal."""
        return self.certificate.subject.rfc4514_string()

    def key_pem(self, password: str | None = None) -> bytes:
        encryption = (serialization.BestAvailableEncryption(password.encode()) if password
                      else serialization.NoEncryption())
        return self.key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8, encryption)

    def chain_pem(self) -> bytes:
        """Leaf certificate then the issuing CA's."""
        return (self.certificate.public_bytes(serialization.Encoding.PEM)
                + self.issuer.certificate_pem())

    def keystore_pem(self, password: str | None = None) -> bytes:
        """Kafka's PEM keystore: the key, then the chain."""
        return self.key_pem(password) + self.chain_pem()

    def write_keystore(self, path: Path, password: str | None = None) -> Path:
        return write_atomically(path, self.keystore_pem(password), secret=True)

    def write_certificate(self, path: Path) -> Path:
        return write_atomically(path, self.chain_pem())

    def write_key(self, path: Path, password: str | None = None) -> Path:
        return write_atomically(path, self.key_pem(password), secret=True)


@dataclass
class CertificateAuthority:
    """A self-signed CA that issues broker and client certificates.

    >>> ca = CertificateAuthority.create("acme CA")
    >>> broker = ca.issue("broker", hosts=["127.0.0.1", "localhost"])
    >>> broker.write_keystore(Path("broker.pem"), password="secret")
    """

    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate

    @classmethod
    def create(cls, common_name: str = "pylog CA", valid_days: int = 3650
               ) -> "CertificateAuthority":
        key = ec.generate_private_key(ec.SECP256R1())
        name = _name(common_name)
        now = _now()
        certificate = (
            x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - DAY).not_valid_after(now + valid_days * DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .sign(key, hashes.SHA256()))
        return cls(key, certificate)

    @classmethod
    def load(cls, certificate_path: Path, key_path: Path) -> "CertificateAuthority":
        certificate = x509.load_pem_x509_certificate(Path(certificate_path).read_bytes())
        key = serialization.load_pem_private_key(Path(key_path).read_bytes(), password=None)
        return cls(key, certificate)

    def certificate_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def write_truststore(self, path: Path) -> Path:
        return write_atomically(path, self.certificate_pem())

    def write_key(self, path: Path) -> Path:
        return write_atomically(path, self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()), secret=True)

    def issue(self, common_name: str, hosts: Sequence[str] = (), *,
              organizational_unit: str | None = None, organization: str | None = None,
              valid_days: int = 825, not_before: datetime.datetime | None = None,
              not_after: datetime.datetime | None = None) -> IssuedCertificate:
        """A certificate for servers (``hosts`` as subject alternative names) and clients.

        ``not_before``/``not_after`` override the validity (e.g. an expired certificate
        for tests: ``not_after`` in the past).
        """
        key = ec.generate_private_key(ec.SECP256R1())
        now = _now()
        start = not_before or now - DAY
        end = not_after or now + valid_days * DAY
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organizational_unit, organization))
            .issuer_name(self.certificate.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(min(start, end - DAY)).not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=True, key_cert_sign=False,
                crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                self.key.public_key()), critical=False))
        if hosts:
            builder = builder.add_extension(_san(hosts), critical=False)
        return IssuedCertificate(key, builder.sign(self.key, hashes.SHA256()), self)


def write_atomically(path: Path, content: bytes, secret: bool = False) -> Path:
    """Write ``content`` to a temporary file beside ``path``, then rename it into place
    (mode 0600 for secrets)."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                         0o600 if secret else 0o644)
    try:
        with os.fdopen(descriptor, "wb") as out:
            out.write(content)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return path


def generate(directory: Path, hosts: Sequence[str], clients: Sequence[str] = (),
             key_password: str | None = None, broker_name: str = "broker"
             ) -> dict[str, Path]:
    """The CLI's work: reuse or create the CA in ``directory``, then write a broker
    keystore for ``hosts`` and one keystore (plus certificate and key) per client.
    Returns the written files by role."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    ca_path, ca_key_path = directory / "ca.pem", directory / "ca-key.pem"
    if ca_path.exists() and ca_key_path.exists():
        ca = CertificateAuthority.load(ca_path, ca_key_path)
        written = {}
    else:
        ca = CertificateAuthority.create()
        written = {"truststore": ca.write_truststore(ca_path),
                   "ca key": ca.write_key(ca_key_path)}
    broker = ca.issue(hosts[0], hosts)
    written["keystore"] = broker.write_keystore(directory / f"{broker_name}.pem", key_password)
    for name in clients:
        client = ca.issue(name)
        written[f"client {name}"] = client.write_keystore(
            directory / f"client-{name}.pem", key_password)
        client.write_certificate(directory / f"client-{name}-cert.pem")
        client.write_key(directory / f"client-{name}-key.pem", key_password)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pylog.security.certificates",
        description="Write a CA and PEM keystores for pylog's TLS listeners.")
    parser.add_argument("--dir", required=True, type=Path, help="where to write the files")
    parser.add_argument("--hosts", required=True,
                        help="comma-separated host names and IP addresses of the broker")
    parser.add_argument("--client", action="append", default=[], metavar="CN",
                        help="also write a client certificate with this common name "
                             "(repeatable)")
    parser.add_argument("--name", default="broker", help="keystore file name (NAME.pem)")
    parser.add_argument("--key-password-env", metavar="VAR",
                        help="encrypt private keys with the password in this environment "
                             "variable (ssl.key.password)")
    args = parser.parse_args(argv)
    hosts = [host.strip() for host in args.hosts.split(",") if host.strip()]
    if not hosts:
        parser.error("--hosts: give at least one host")
    password = None
    if args.key_password_env:
        password = os.environ.get(args.key_password_env)
        if not password:
            parser.error(f"--key-password-env: {args.key_password_env} is not set")
    try:
        written = generate(args.dir, hosts, args.client, password, args.name)
    except (OSError, ValueError) as error:
        print(f"certificates: error: {error}", file=sys.stderr)
        return 1
    for role, path in written.items():
        print(f"{role}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
