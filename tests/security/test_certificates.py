"""``python -m pylog.security.certificates``: the files it writes serve a TLS listener and
a client certificate, in memory (no sockets), and a second run keeps the CA."""

from __future__ import annotations

import os
import ssl
import stat
import subprocess
import sys

from pylog.broker.config import BrokerConfig
from pylog.security.tls import peer_principal


def handshake(server: ssl.SSLContext, client: ssl.SSLContext, hostname: str):
    """Drive both ends of a TLS handshake through memory; returns the server's end."""
    server_in, server_out, client_in, client_out = (ssl.MemoryBIO() for _ in range(4))
    server_end = server.wrap_bio(server_in, server_out, server_side=True)
    client_end = client.wrap_bio(client_in, client_out, server_hostname=hostname)
    done = {"server": False, "client": False}
    for _ in range(20):
        for name, end in (("client", client_end), ("server", server_end)):
            if not done[name]:
                try:
                    end.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        server_in.write(client_out.read())
        client_in.write(server_out.read())
        if all(done.values()):
            return server_end
    raise AssertionError("the handshake did not finish")


def test_generated_files_serve_a_listener_and_mutual_tls(tmp_path):
    directory = tmp_path / "certs"
    env = dict(os.environ, KEY_PASSWORD="s3cret")
    command = [sys.executable, "-m", "pylog.security.certificates", "--dir", str(directory),
               "--hosts", "broker1.example,127.0.0.1", "--client", "alice",
               "--key-password-env", "KEY_PASSWORD"]
    first = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    assert first.returncode == 0, first.stderr
    assert "s3cret" not in first.stdout + first.stderr
    for name in ("broker.pem", "ca-key.pem", "client-alice.pem", "client-alice-key.pem"):
        assert stat.S_IMODE((directory / name).stat().st_mode) == 0o600, name
    assert b"ENCRYPTED PRIVATE KEY" in (directory / "broker.pem").read_bytes()

    config = BrokerConfig.load(None, {
        "listeners": "SSL://127.0.0.1:9093", "ssl.client.auth": "required",
        "ssl.keystore.location": str(directory / "broker.pem"), "ssl.key.password": "s3cret",
        "ssl.truststore.location": str(directory / "ca.pem")})
    server = config.tls_settings("SSL").server_context()
    client = ssl.create_default_context(cafile=str(directory / "ca.pem"))
    client.load_cert_chain(directory / "client-alice-cert.pem",
                           directory / "client-alice-key.pem", password="s3cret")
    for hostname in ("broker1.example", "127.0.0.1"):
        server_end = handshake(server, client, hostname)
        der = server_end.getpeercert(binary_form=True)
        assert der and peer_principal(server_end) == "User:CN=alice"

    ca_before = (directory / "ca.pem").read_bytes()
    again = subprocess.run([*command[:6], "broker2.example"], capture_output=True, text=True,
                           env=env, timeout=60)
    assert again.returncode == 0, again.stderr
    assert (directory / "ca.pem").read_bytes() == ca_before
    server = BrokerConfig.load(None, {
        "listeners": "SSL://127.0.0.1:9093",
        "ssl.keystore.location": str(directory / "broker.pem"),
        "ssl.truststore.location": str(directory / "ca.pem")}).tls_settings("SSL").server_context()
    handshake(server, ssl.create_default_context(cafile=str(directory / "ca.pem")),
              "broker2.example")


def test_missing_password_variable_is_one_line(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "pylog.security.certificates", "--dir", str(tmp_path),
         "--hosts", "h", "--key-password-env", "PYLOG_NO_SUCH_VARIABLE"],
        capture_output=True, text=True, timeout=60,
        env={k: v for k, v in os.environ.items() if k != "PYLOG_NO_SUCH_VARIABLE"})
    assert result.returncode == 2
    assert "PYLOG_NO_SUCH_VARIABLE is not set" in result.stderr.splitlines()[-1]
