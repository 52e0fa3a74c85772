"""SCRAM credentials: the encoding against scramp and Kafka's format, the KIP-554 answers,
and the file and ZooKeeper stores (a real ZooKeeper)."""

from __future__ import annotations

import base64
import json
import os
import re

import pytest
import scramp

from pylog.cluster.session import close_client, connect_client
from pylog.security.credentials import (
    CREDENTIALS_FILE, CredentialStoreError, FileCredentialStore, ZkCredentialStore)
from pylog.security.scram import (
    SCRAM_SHA_256, SCRAM_SHA_512, CredentialFormatError, ScramCredential, desanitize_user,
    sanitize_user)
from pylog.security.scram_admin import (
    alter_user_scram_credentials, describe_user_scram_credentials)
from pylog.testing.zookeeper import zk_chroot_fixture, zookeeper_fixture
from pylog.testing.waiting import wait_until

zookeeper = zookeeper_fixture()
zk_connect = zk_chroot_fixture()

SALT = bytes(range(32))
KAFKA_FORMAT = re.compile(r"^salt=([A-Za-z0-9+/=]+),stored_key=([A-Za-z0-9+/=]+),"
                          r"server_key=([A-Za-z0-9+/=]+),iterations=(\d+)$")


# -- the encoding ----------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512])
@pytest.mark.parametrize("password,iterations", [("pencil", 4096), ("p\u00e4ss w=rd,", 8192)])
def test_credential_matches_scramp(mechanism, password, iterations):
    salt, stored_key, server_key, i = scramp.ScramMechanism(mechanism.name).make_auth_info(
        password, iteration_count=iterations, salt=SALT)
    ours = ScramCredential.from_password(mechanism, password, iterations, salt=SALT)
    assert (ours.salt, ours.stored_key, ours.server_key, ours.iterations) == \
        (salt, stored_key, server_key, i)


def test_known_vector_in_kafka_string_form():
    # RFC 7677's user: password "pencil", salt W22ZaJ0SNY7soEsUEjb6gQ==, 4096 iterations.
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    _, stored_key, server_key, _ = scramp.ScramMechanism("SCRAM-SHA-256").make_auth_info(
        "pencil", iteration_count=4096, salt=salt)
    text = ScramCredential.from_password(SCRAM_SHA_256, "pencil", 4096, salt).to_kafka_string()
    assert text == (f"salt=W22ZaJ0SNY7soEsUEjb6gQ==,"
                    f"stored_key={base64.b64encode(stored_key).decode()},"
                    f"server_key={base64.b64encode(server_key).decode()},iterations=4096")
    assert KAFKA_FORMAT.match(text)
    assert ScramCredential.from_kafka_string(text) == \
        ScramCredential.from_password(SCRAM_SHA_256, "pencil", 4096, salt)


def test_salted_password_gives_the_same_credential_as_the_password():
    salted = SCRAM_SHA_512.salted_password("secret", SALT, 4096)
    assert ScramCredential.from_salted_password(SCRAM_SHA_512, SALT, salted, 4096) == \
        ScramCredential.from_password(SCRAM_SHA_512, "secret", 4096, SALT)


def test_matches_only_the_password():
    credential = ScramCredential.from_password(SCRAM_SHA_256, "right")
    assert credential.matches(SCRAM_SHA_256, "right")
    assert not credential.matches(SCRAM_SHA_256, "wrong")
    assert not credential.matches(SCRAM_SHA_512, "right")
    assert "right" not in repr(credential) and base64.b64encode(credential.salt).decode() \
        not in repr(credential)


@pytest.mark.parametrize("text", [
    "", "salt=AAAA", "salt=AAAA,stored_key=AAAA,server_key=AAAA",
    "salt=AAAA,stored_key=AAAA,server_key=AAAA,iterations=many",
    "salt=!!!!,stored_key=AAAA,server_key=AAAA,iterations=4096",
    "salt=AAAA,stored_key=AAAA,server_key=AAAA,iterations=4096,extra=1"])
def test_malformed_credential_strings_are_refused(text):
    with pytest.raises(CredentialFormatError):
        ScramCredential.from_kafka_string(text)


@pytest.mark.parametrize("user,node", [
    ("alice", "alice"), ("a.b-c_d", "a.b-c_d"), ("user@example.com", "user%40example.com"),
    ("a b", "a%20b"), ("*", "%2A"), ("x+y", "x%2By"), ("CN=x,O=y", "CN%3Dx%2CO%3Dy"),
    ("caf\u00e9", "caf%C3%A9"), ("~", "%7E")])
def test_user_names_are_sanitized_as_kafka_does(user, node):
    assert sanitize_user(user) == node
    assert desanitize_user(node) == user


# -- KIP-554 answers over a file store ---------------------------------------------------


def upsertion(name, mechanism=1, iterations=4096, salt=SALT, password="pw"):
    hash_name = "sha256" if mechanism != 2 else "sha512"
    import hashlib
    return {"name": name, "mechanism": mechanism, "iterations": iterations, "salt": salt,
            "salted_password": hashlib.pbkdf2_hmac(hash_name, password.encode(), salt,
                                                   max(iterations, 1))}


def codes(response):
    return {r["user"]: r["error_code"] for r in response["results"]}


def test_alter_and_describe_answer_per_user(tmp_path):
    store = FileCredentialStore(tmp_path)
    response = alter_user_scram_credentials(store, {"deletions": [], "upsertions": [
        upsertion("alice"), upsertion("alice", mechanism=2, iterations=8192),
        upsertion(""), upsertion("bad-mech", mechanism=7), upsertion("few", iterations=100),
        upsertion("many", iterations=20000), upsertion("twice"), upsertion("twice"),
        upsertion("short-salt", salt=b"salt"), upsertion("no-salt", salt=b"")]})
    assert codes(response) == {"alice": 0, "": 93, "bad-mech": 33, "few": 93, "many": 93,
                               "twice": 92, "short-salt": 0, "no-salt": 93}
    assert store.credential("alice", "SCRAM-SHA-256").matches(SCRAM_SHA_256, "pw")
    assert store.credential("alice", "SCRAM-SHA-512").iterations == 8192
    assert store.credential("short-salt", "SCRAM-SHA-256").salt == b"salt"
    assert set(store.users()) == {"alice", "short-salt"}

    everyone = describe_user_scram_credentials(store, {"users": None})
    assert everyone["error_code"] == 0
    assert everyone["results"] == [{"user": "alice", "error_code": 0, "error_message": None,
                                    "credential_infos": [{"mechanism": 1, "iterations": 4096},
                                                         {"mechanism": 2, "iterations": 8192}]},
                                   {"user": "short-salt", "error_code": 0, "error_message": None,
                                    "credential_infos": [{"mechanism": 1, "iterations": 4096}]}]
    named = describe_user_scram_credentials(store, {"users": [
        {"name": "alice"}, {"name": "nobody"}, {"name": ""}, {"name": "dup"}, {"name": "dup"}]})
    assert codes(named) == {"alice": 0, "nobody": 91, "": 91, "dup": 92}

    deleted = alter_user_scram_credentials(store, {"upsertions": [], "deletions": [
        {"name": "alice", "mechanism": 1}, {"name": "nobody", "mechanism": 1},
        {"name": "x", "mechanism": 0}]})
    assert codes(deleted) == {"alice": 0, "nobody": 91, "x": 33}
    assert set(store.user("alice")) == {"SCRAM-SHA-512"}


# -- the file store --------------------------------------------------------------------


def test_file_store_keeps_only_credentials_private_and_atomically(tmp_path):
    store = FileCredentialStore(tmp_path)
    store.alter("alice", {"SCRAM-SHA-256": ScramCredential.from_password(
        SCRAM_SHA_256, "hunter2-secret")})
    path = tmp_path / CREDENTIALS_FILE
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    text = path.read_text()
    assert "hunter2-secret" not in text
    document = json.loads(text)
    assert document["version"] == 1
    assert KAFKA_FORMAT.match(document["users"]["alice"]["SCRAM-SHA-256"])
    assert sorted(p.name for p in tmp_path.iterdir()) == [CREDENTIALS_FILE]  # no temp left

    store.alter("alice", {"SCRAM-SHA-256": None})
    assert store.users() == {}
    assert json.loads(path.read_text())["users"] == {}


def test_file_store_sees_changes_made_by_another_writer(tmp_path):
    broker = FileCredentialStore(tmp_path)
    assert broker.credential("bob", "SCRAM-SHA-512") is None
    tool = FileCredentialStore(tmp_path)  # e.g. `pylog users add --log-dirs` meanwhile
    tool.alter("bob", {"SCRAM-SHA-512": ScramCredential.from_password(SCRAM_SHA_512, "pw")})
    assert broker.credential("bob", "SCRAM-SHA-512").matches(SCRAM_SHA_512, "pw")
    tool.alter("bob", {"SCRAM-SHA-512": ScramCredential.from_password(SCRAM_SHA_512, "new")})
    assert broker.credential("bob", "SCRAM-SHA-512").matches(SCRAM_SHA_512, "new")


def test_corrupt_credentials_file_is_an_error_naming_it(tmp_path):
    (tmp_path / CREDENTIALS_FILE).write_text("{not json")
    with pytest.raises(CredentialStoreError, match=CREDENTIALS_FILE):
        FileCredentialStore(tmp_path).credential("alice", "SCRAM-SHA-256")


# -- the ZooKeeper store ---------------------------------------------------------------


@pytest.fixture
def zk_client(zk_connect):
    client = connect_client(zk_connect, session_timeout=5.0, connection_timeout=10.0)
    yield client
    close_client(client)


def test_zookeeper_store_uses_kafkas_layout_and_watches(zk_client, zk_connect):
    broker_client = connect_client(zk_connect, session_timeout=5.0, connection_timeout=10.0)
    broker = ZkCredentialStore(broker_client, watch=True, owns_client=True)
    tool = ZkCredentialStore(zk_client, watch=False)
    try:
        credential = ScramCredential.from_password(SCRAM_SHA_256, "pw", 4096, SALT)
        tool.alter("user@corp", {"SCRAM-SHA-256": credential})
        data, _ = zk_client.get("/config/users/user%40corp")
        assert json.loads(data) == {"version": 1,
                                    "config": {"SCRAM-SHA-256": credential.to_kafka_string()}}
        wait_until(lambda: broker.credential("user@corp", "SCRAM-SHA-256") == credential)

        # A node written by Kafka's tools, with a quota beside the credential.
        other = ScramCredential.from_password(SCRAM_SHA_512, "pw2", 4096, SALT)
        zk_client.create("/config/users/carol", json.dumps({"version": 1, "config": {
            "SCRAM-SHA-512": other.to_kafka_string(),
            "producer_byte_rate": "1024"}}).encode())
        wait_until(lambda: broker.credential("carol", "SCRAM-SHA-512") == other)
        tool.alter("carol", {"SCRAM-SHA-256": credential})
        config = json.loads(zk_client.get("/config/users/carol")[0])["config"]
        assert config["producer_byte_rate"] == "1024" and set(config) == {
            "producer_byte_rate", "SCRAM-SHA-512", "SCRAM-SHA-256"}
        assert set(tool.users()) == {"user@corp", "carol"}

        zk_client.delete("/config/users/user@corp".replace("@", "%40"))
        wait_until(lambda: broker.credential("user@corp", "SCRAM-SHA-256") is None)
        zk_client.create("/config/users/user%40corp", data)  # back again
        wait_until(lambda: broker.credential("user@corp", "SCRAM-SHA-256") == credential)
    finally:
        broker.close()
