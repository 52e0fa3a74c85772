"""TLS listeners against stock clients: confluent-kafka, kafka-python and kcat over SSL,
per-listener Metadata, mutual TLS and its refusals, wrong protocols on either port,
malformed TLS input and stalled handshakes, and a large fetch through TLS.

One broker serves the module with three listeners: PLAINTEXT, SSL (no client
certificates) and MTLS (an SSL listener named MTLS whose ``ssl.client.auth=required``
comes from a ``listener.name.mtls.`` override). Its authorizer lets ANONYMOUS and alice's
certificate subject do anything, so the principal taken from a certificate shows in what
a client may do.
"""

from __future__ import annotations

import errno
import random
import socket
import ssl
import struct
import subprocess
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition

from pylog.testing.broker import BrokerProcess
from pylog.testing.certs import TestCertificates

ALICE = "User:CN=alice,OU=eng,O=acme"
QUICK = {"socket.timeout.ms": 5000, "socket.connection.setup.timeout.ms": 3000,
         "message.timeout.ms": 5000, "reconnect.backoff.max.ms": 500}


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return TestCertificates.create(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory, certs):
    overrides = {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
        **certs.broker_settings("none"),
        "listener.name.mtls.ssl.client.auth": "required",
        "num.network.threads": "2",
        "group.initial.rebalance.delay.ms": "0",
        "offsets.topic.num.partitions": "2",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": f"User:ANONYMOUS;{ALICE}",
    }
    process = BrokerProcess(tmp_path_factory.mktemp("broker"), overrides,
                            extra_listeners=["SSL", "MTLS"])
    with process:
        yield process


def ssl_settings(broker, certs, listener="SSL", client=None) -> dict:
    settings = {"bootstrap.servers": broker.bootstrap_for(listener), "security.protocol": "SSL",
                "ssl.ca.location": str(certs.truststore), **QUICK}
    if client is not None:
        settings.update(client.librdkafka())
    return settings


def produce(settings: dict, topic: str, values: list[bytes]) -> None:
    failures = []
    producer = Producer({**settings, "linger.ms": 5})
    for value in values:
        producer.produce(topic, value, partition=0,
                         on_delivery=lambda error, _msg: error and failures.append(error))
    assert producer.flush(15) == 0
    assert failures == []


def consume(settings: dict, topic: str, count: int, group: str | None = None) -> list[bytes]:
    consumer = Consumer({**settings, "group.id": group or f"{topic}-reader",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    if group is None:
        consumer.assign([TopicPartition(topic, 0, 0)])
    else:
        consumer.subscribe([topic])
    values, deadline = [], time.monotonic() + 20
    try:
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None:
                assert message.error() is None, message.error()
                values.append(message.value())
    finally:
        consumer.close()
    return values


def first_error(settings: dict) -> KafkaError:
    """The first error a client reports while trying to reach the broker (it must not
    reach it)."""
    errors = []
    admin = AdminClient({**settings, "error_cb": errors.append})
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=0.5)
            pytest.fail("the broker answered Metadata")
        except KafkaException:
            pass
        admin.poll(0.1)
    assert errors, "the client reported no error"
    return errors[0]


def wait_for_log(broker, text: str) -> str:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        lines = [line for line in broker.log_text().splitlines() if text in line]
        if lines:
            return lines[-1]
        time.sleep(0.05)
    raise AssertionError(f"no broker log line with {text!r}")


def still_serves(broker, certs) -> None:
    """A well-behaved TLS client is answered (the broker survived what came before)."""
    metadata = AdminClient(ssl_settings(broker, certs)).list_topics(timeout=10)
    assert [b.port for b in metadata.brokers.values()] == [broker.ports["SSL"]]


def client_hello() -> bytes:
    """The first flight of a TLS client, as bytes."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def read_until_closed(sock: socket.socket, timeout: float = 10.0) -> bytes:
    """Everything the broker sends until it closes the connection."""
    sock.settimeout(timeout)
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass
    return received


# -- stock clients over SSL ----------------------------------------------------------------

def test_confluent_produces_and_consumes_over_ssl_with_a_group(broker, certs):
    settings = ssl_settings(broker, certs)
    values = [b"confluent-%d" % i for i in range(300)]
    produce(settings, "tls-confluent", values)
    # Subscribing goes through FindCoordinator: the coordinator's SSL address must come back.
    assert consume(settings, "tls-confluent", 300, group="tls-group") == values


def test_kafka_python_produces_and_consumes_over_ssl(broker, certs):
    common = {"bootstrap_servers": broker.bootstrap_for("SSL"), "security_protocol": "SSL",
              "ssl_cafile": str(certs.truststore)}
    producer = KafkaProducer(**common)
    futures = [producer.send("tls-kafka-python", value=b"kp-%d" % i, partition=0)
               for i in range(200)]
    producer.flush()
    assert [f.get(timeout=10).offset for f in futures] == list(range(200))
    producer.close()
    consumer = KafkaConsumer(**common, consumer_timeout_ms=5000)
    partition = KafkaTopicPartition("tls-kafka-python", 0)
    consumer.assign([partition])
    consumer.seek_to_beginning()
    values = []
    for record in consumer:
        values.append(record.value)
        if len(values) == 200:
            break
    consumer.close()
    assert values == [b"kp-%d" % i for i in range(200)]


def test_kcat_produces_and_consumes_over_ssl(broker, certs):
    base = ["kcat", "-b", broker.bootstrap_for("SSL"), "-X", "security.protocol=SSL",
            "-X", f"ssl.ca.location={certs.truststore}"]
    lines = "".join(f"kcat-{i}\n" for i in range(100))
    produced = subprocess.run([*base, "-P", "-t", "tls-kcat", "-p", "0"], input=lines,
                              capture_output=True, text=True, timeout=30)
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run([*base, "-C", "-t", "tls-kcat", "-p", "0", "-o", "beginning",
                               "-e", "-q"], capture_output=True, text=True, timeout=30)
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout == lines


def test_metadata_answers_with_the_addresses_of_the_clients_listener(broker, certs):
    alice = certs.client("alice", organizational_unit="eng", organization="acme")
    asked = {"PLAINTEXT": {"bootstrap.servers": broker.bootstrap, **QUICK},
             "SSL": ssl_settings(broker, certs),
             "MTLS": ssl_settings(broker, certs, "MTLS", alice)}
    for listener, settings in asked.items():
        metadata = AdminClient(settings).list_topics(timeout=10)
        assert [(b.id, b.host, b.port) for b in metadata.brokers.values()] == [
            (0, "127.0.0.1", broker.ports[listener])], listener
    kcat = subprocess.run(["kcat", "-b", broker.bootstrap, "-L"], capture_output=True,
                          text=True, timeout=30)
    assert f"broker 0 at {broker.bootstrap}" in kcat.stdout


def test_fetch_of_a_large_partition_over_tls_returns_every_byte(broker, certs):
    # Distinct, incompressible-ish values: ~6 MB, so each Fetch response spans many
    # pread chunks and TLS records.
    rng = random.Random(14)
    values = [b"%06d:" % i + rng.randbytes(2000) for i in range(3000)]
    produce({"bootstrap.servers": broker.bootstrap, **QUICK}, "tls-large", values)
    settings = {**ssl_settings(broker, certs), "max.partition.fetch.bytes": 4 * 1024 * 1024,
                "fetch.max.bytes": 8 * 1024 * 1024}
    assert consume(settings, "tls-large", len(values)) == values


# -- mutual TLS ------------------------------------------------------------------------------

def test_mutual_tls_accepts_a_trusted_certificate_and_names_the_principal_by_it(broker, certs):
    alice = certs.client("alice", organizational_unit="eng", organization="acme")
    assert alice.principal == ALICE
    values = [b"alice-%d" % i for i in range(20)]
    produce(ssl_settings(broker, certs, "MTLS", alice), "tls-mtls", values)
    assert consume(ssl_settings(broker, certs, "MTLS", alice), "tls-mtls", 20) == values
    # bob's certificate is just as trusted, but the authorizer knows only alice's subject.
    bob = certs.client("bob", organizational_unit="eng", organization="acme")
    producer = Producer({**ssl_settings(broker, certs, "MTLS", bob), "linger.ms": 0})
    failures = []
    producer.produce("tls-mtls", b"from bob", partition=0,
                     on_delivery=lambda error, _msg: failures.append(error))
    producer.flush(15)
    assert [f.code() for f in failures] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    # ...and kcat with alice's certificate reads what she wrote, not bob's record.
    read = subprocess.run(
        ["kcat", "-b", broker.bootstrap_for("MTLS"), "-X", "security.protocol=SSL",
         "-X", f"ssl.ca.location={certs.truststore}",
         "-X", f"ssl.certificate.location={alice.certificate}",
         "-X", f"ssl.key.location={alice.key}", "-X", f"ssl.key.password={alice.password}",
         "-C", "-t", "tls-mtls", "-p", "0", "-o", "beginning", "-e", "-q"],
        capture_output=True, text=True, timeout=30)
    assert read.returncode == 0, read.stderr
    assert read.stdout.splitlines() == [v.decode() for v in values]


@pytest.mark.parametrize("case, logged", [
    ("no certificate", "peer did not return a certificate"),
    ("stranger CA", "self-signed certificate in certificate chain"),  # its own root came along
    ("expired", "certificate has expired"),
])
def test_mutual_tls_refuses_a_missing_untrusted_or_expired_certificate(broker, certs, case,
                                                                        logged):
    client = {"no certificate": None, "stranger CA": certs.stranger_client("mallory"),
              "expired": certs.expired_client("old")}[case]
    error = first_error(ssl_settings(broker, certs, "MTLS", client))
    assert error.code() in (KafkaError._SSL, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)
    line = wait_for_log(broker, logged)
    assert "TLS handshake on listener MTLS failed" in line and "127.0.0.1:" in line
    still_serves(broker, certs)


# -- the wrong protocol on either port ------------------------------------------------------

def api_versions_request() -> bytes:
    body = struct.pack(">hhih", 18, 0, 7, 4) + b"test"  # ApiVersions v0, correlation id 7
    return struct.pack(">i", len(body)) + body


def test_a_plaintext_client_on_the_tls_port_is_refused(broker, certs):
    with socket.create_connection(("127.0.0.1", broker.ports["SSL"])) as sock:
        sock.sendall(api_versions_request())
        answer = read_until_closed(sock)
    # No Kafka response: at most a TLS alert record (content type 21).
    assert answer == b"" or answer[0] == 21
    wait_for_log(broker, "TLS handshake on listener SSL failed")
    error = first_error({"bootstrap.servers": broker.bootstrap_for("SSL"), **QUICK})
    assert error.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)
    still_serves(broker, certs)


def test_a_tls_client_on_the_plaintext_port_is_refused(broker, certs):
    with socket.create_connection(("127.0.0.1", broker.port)) as sock:
        sock.sendall(client_hello())
        assert read_until_closed(sock) == b""
    wait_for_log(broker, "it looks like a TLS handshake, but listener PLAINTEXT is PLAINTEXT")
    settings = {**ssl_settings(broker, certs), "bootstrap.servers": broker.bootstrap}
    assert first_error(settings).code() in (KafkaError._SSL, KafkaError._TRANSPORT,
                                            KafkaError._ALL_BROKERS_DOWN)
    still_serves(broker, certs)


# -- malformed input and stalls --------------------------------------------------------------

def handshaken(port: int) -> tuple[socket.socket, ssl.SSLObject, ssl.MemoryBIO, ssl.MemoryBIO]:
    """A raw socket with a completed TLS handshake, so that raw records can follow it."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    while True:
        try:
            tls.do_handshake()
            break
        except ssl.SSLWantReadError:
            sock.sendall(outgoing.read())
            incoming.write(sock.recv(65536))
    sock.sendall(outgoing.read())
    return sock, tls, incoming, outgoing


def test_garbage_and_truncated_tls_records_cost_only_their_connection(broker, certs):
    rng = random.Random(1414)
    hello = client_hello()
    port = broker.ports["SSL"]
    cases = [rng.randbytes(rng.randint(1, 600)) for _ in range(15)]
    cases += [b"\x16\x03\x01" + rng.randbytes(rng.randint(2, 300)) for _ in range(10)]
    for _ in range(10):
        corrupt = bytearray(hello)
        for _ in range(5):
            corrupt[rng.randrange(5, len(corrupt))] = rng.randrange(256)
        cases.append(bytes(corrupt))
    for payload in cases:
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(payload)
            # The stream ends there (mid-record for most): the broker must close it (a
            # corrupted hello may still be answered with a ServerHello first).
            try:
                sock.shutdown(socket.SHUT_WR)
            except OSError as error:  # the broker closed (reset) it before we ended it
                assert error.errno == errno.ENOTCONN, error
            assert read_until_closed(sock)[:1] in (b"", b"\x15", b"\x16")
    for _ in range(10):  # after a good handshake: records that fail to decrypt
        sock, *_ = handshaken(port)
        with sock:
            length = rng.randint(1, 2000)
            sock.sendall(b"\x17\x03\x03" + struct.pack(">H", length) + rng.randbytes(length))
            read_until_closed(sock)  # session tickets, maybe an alert, then the close
    sock, tls, _, outgoing = handshaken(port)
    with sock:  # half a record, then the client goes away
        tls.write(api_versions_request())
        sock.sendall(outgoing.read()[:-7])
    still_serves(broker, certs)
    produce(ssl_settings(broker, certs), "tls-after-fuzz", [b"still here"])
    assert consume(ssl_settings(broker, certs), "tls-after-fuzz", 1) == [b"still here"]


def test_a_stalled_handshake_does_not_hold_up_other_clients(broker, certs):
    hello = client_hello()
    stalled = []
    for _ in range(4):  # at least one on each of the two processors
        sock = socket.create_connection(("127.0.0.1", broker.ports["SSL"]))
        sock.sendall(hello[:len(hello) // 2])
        stalled.append(sock)
    try:
        settings = ssl_settings(broker, certs)
        produce(settings, "tls-beside-stalls", [b"a", b"b"])
        assert consume(settings, "tls-beside-stalls", 2) == [b"a", b"b"]
        for sock in stalled:  # still open, still waiting for the rest of their hello
            with pytest.raises(BlockingIOError):
                sock.recv(1, socket.MSG_DONTWAIT)
    finally:
        for sock in stalled:
            sock.close()


def test_a_broker_with_a_wrong_key_password_names_the_key(tmp_path, certs):
    overrides = {**certs.broker_settings(), "ssl.key.password": "hunter2",
                 "listeners": "SSL://127.0.0.1:0", "log.dirs": str(tmp_path / "logs")}
    argv = BrokerProcess(tmp_path, overrides).argv()
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(errors) == 1, result.stderr
    assert errors[0].startswith("pylog broker: error: ssl.key.password: cannot decrypt")
    assert "hunter2" not in result.stderr + result.stdout


def test_connections_idle_past_connections_max_idle_ms_are_closed(tmp_path, certs):
    overrides = {**certs.broker_settings(), "connections.max.idle.ms": "1000"}
    with BrokerProcess(tmp_path, overrides, extra_listeners=["SSL"]) as broker:
        hello = client_hello()
        stalled = socket.create_connection(("127.0.0.1", broker.ports["SSL"]))
        stalled.sendall(hello[:len(hello) // 2])
        silent = socket.create_connection(("127.0.0.1", broker.port))
        for sock in (stalled, silent):
            sock.settimeout(30)
            with sock:
                assert sock.recv(1) == b""  # closed by the broker, not by the timeout
        still_serves(broker, certs)
        text = broker.log_text()
        assert "idle for more than 1000 ms (connections.max.idle.ms) during the TLS handshake" \
            in text
        assert text.count("(connections.max.idle.ms)") >= 2


def served_certificate(broker, certs) -> bytes:
    """The certificate a new connection to the SSL listener is given (DER)."""
    context = ssl.create_default_context(cafile=str(certs.truststore))
    host, port = broker.bootstrap_for("SSL").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname=host) as tls:
            return tls.getpeercert(binary_form=True)


def test_a_listener_certificate_is_rotated_without_a_restart(broker, certs):
    """A dynamic broker config (KIP-226) points the SSL listener at a new keystore, or
    names the same file again once it was replaced: new connections get the new
    certificate, open ones keep working, a keystore that cannot load is refused."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    from pylog.client import Admin
    from pylog.errors import InvalidRequestError
    from pylog.testing.certs import HOSTS

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    key = "listener.name.ssl.ssl.keystore.location"

    def alter(operation, value=None, name="0"):
        resource = ConfigResource(ResourceType.BROKER, name, incremental_configs=[
            ConfigEntry(key, value, incremental_operation=operation)])
        return admin.incremental_alter_configs([resource])[resource]

    def der(path) -> bytes:
        pem = path.read_bytes()
        start = pem.index(b"-----BEGIN CERTIFICATE-----")
        return x509.load_pem_x509_certificate(pem[start:]).public_bytes(Encoding.DER)

    original = served_certificate(broker, certs)
    assert original == der(certs.keystore)
    open_consumer_settings = ssl_settings(broker, certs)
    produce(open_consumer_settings, "rotated", [b"before"])
    rotated = certs.directory / "rotated.pem"
    certs.ca.issue("broker-2", HOSTS).write_keystore(rotated, certs.key_password)
    alter(AlterConfigOpType.SET, str(rotated)).result(15)
    try:
        assert served_certificate(broker, certs) == der(rotated) != original
        # Replaced in place and named again: read again.
        certs.ca.issue("broker-3", HOSTS).write_keystore(rotated, certs.key_password)
        alter(AlterConfigOpType.SET, str(rotated)).result(15)
        assert served_certificate(broker, certs) == der(rotated)
        with pytest.raises(KafkaException) as refused:
            alter(AlterConfigOpType.SET, str(certs.directory / "missing.pem")).result(15)
        assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
        assert key in refused.value.args[0].str()
        assert served_certificate(broker, certs) == der(rotated)
        # Per broker only (librdkafka cannot name the cluster default; pylog's Admin can).
        with Admin(broker.bootstrap) as pylog_admin, \
                pytest.raises(InvalidRequestError, match="per broker"):
            pylog_admin.incremental_alter_configs("broker", "", set_configs={
                key: str(rotated)})
        produce(open_consumer_settings, "rotated", [b"after"])
        assert consume(ssl_settings(broker, certs), "rotated", 2) == [b"before", b"after"]
        broker.restart()  # the listener starts with the dynamic keystore
        assert served_certificate(broker, certs) == der(rotated)
    finally:
        alter(AlterConfigOpType.DELETE).result(15)
    assert served_certificate(broker, certs) == original
