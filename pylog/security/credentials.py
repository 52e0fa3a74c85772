"""Where SCRAM credentials live: ZooKeeper in cluster mode, a file in the log dir standalone.

Both stores keep, per user, one Kafka credential string per mechanism (see
:mod:`pylog.security.scram`); neither ever sees a password.

**ZooKeeper** (Kafka's layout): ``/config/users/<sanitized user>`` holds::

    {"version": 1, "config": {"SCRAM-SHA-256": "salt=...,stored_key=...,server_key=...,iterations=4096"}}

Other keys of ``config`` (client quotas) are kept untouched. A broker's store watches
``/config/users`` and each user node, so credentials added, changed or deleted by any
broker or tool apply to new logins without a restart.

**Standalone**: ``<first log dir>/credentials.json`` (mode 0600), replaced whole by a
temporary file and a rename::

    {"version": 1, "users": {"alice": {"SCRAM-SHA-512": "salt=...,...,iterations=4096"}}}

The broker stats the file on every lookup and re-reads it when it changed, so
``pylog users add --log-dirs`` applies to a running broker too.

``alter(user, changes)`` sets (credential) or deletes (None) mechanisms of one user.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Protocol

from pylog.errors import PylogError
from pylog.log.checkpoint import write_text_atomically
from pylog.security.scram import (
    MECHANISMS, CredentialFormatError, ScramCredential, desanitize_user, sanitize_user)

if TYPE_CHECKING:
    from kazoo.client import KazooClient

log = logging.getLogger(__name__)

CREDENTIALS_FILE = "credentials.json"
USERS_PATH = "/config/users"
UserCredentials = dict[str, ScramCredential]  # mechanism name -> credential


class CredentialStoreError(PylogError):
    """The credential store could not be read or written (bad file, ZooKeeper failure)."""


class CredentialStore(Protocol):
    def credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """The user's credential for ``mechanism`` (None: no such user or mechanism)."""

    def user(self, user: str) -> UserCredentials:
        """Every credential of ``user`` (empty when unknown), read fresh."""

    def users(self) -> dict[str, UserCredentials]:
        """Every user with at least one SCRAM credential, read fresh."""

    def alter(self, user: str, changes: Mapping[str, ScramCredential | None]) -> None:
        """Set (a credential) or delete (None) mechanisms of ``user`` in one write."""

    def close(self) -> None: ...


def decode_user_config(config: Mapping[str, object], where: str) -> UserCredentials:
    """The SCRAM entries of a user's config; malformed ones are skipped with a warning."""
    found = {}
    for name in MECHANISMS:
        text = config.get(name)
        if not isinstance(text, str):
            continue
        try:
            found[name] = ScramCredential.from_kafka_string(text)
        except CredentialFormatError as exc:
            log.warning("%s: ignoring the %s credential: %s", where, name, exc)
    return found


def _apply(config: dict, changes: Mapping[str, ScramCredential | None]) -> dict:
    for mechanism, credential in changes.items():
        if credential is None:
            config.pop(mechanism, None)
        else:
            config[mechanism] = credential.to_kafka_string()
    return config


class FileCredentialStore:
    """Credentials of a standalone broker in ``<log dir>/credentials.json``.

    >>> store = FileCredentialStore(Path("/var/lib/pylog"))
    >>> store.alter("alice", {"SCRAM-SHA-256": ScramCredential.from_password(SCRAM_SHA_256, pw)})
    """

    def __init__(self, log_dir: Path) -> None:
        self.path = Path(log_dir) / CREDENTIALS_FILE
        self._lock = threading.Lock()
        self._seen: tuple | None = None
        self._users: dict[str, dict] = {}

    def _stat_key(self) -> tuple | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def _current(self) -> dict[str, dict]:
        """The file's users (raw configs), re-read when the file changed."""
        key = self._stat_key()
        if key != self._seen:
            self._users = self._read() if key is not None else {}
            self._seen = key
        return self._users

    def _read(self) -> dict[str, dict]:
        try:
            document = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise CredentialStoreError(f"cannot read {self.path}: {exc}") from None
        users = document.get("users") if isinstance(document, dict) else None
        if not isinstance(users, dict) or document.get("version") != 1:
            raise CredentialStoreError(f"{self.path}: not a version 1 credentials file")
        return {name: config for name, config in users.items() if isinstance(config, dict)}

    def credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.user(user).get(mechanism)

    def user(self, user: str) -> UserCredentials:
        with self._lock:
            config = self._current().get(user, {})
        return decode_user_config(config, f"{self.path} user {user!r}")

    def users(self) -> dict[str, UserCredentials]:
        with self._lock:
            current = dict(self._current())
        decoded = {name: decode_user_config(config, f"{self.path} user {name!r}")
                   for name, config in current.items()}
        return {name: creds for name, creds in sorted(decoded.items()) if creds}

    def alter(self, user: str, changes: Mapping[str, ScramCredential | None]) -> None:
        with self._lock:
            self._seen = None  # always start from what is on disk
            users = {name: dict(config) for name, config in self._current().items()}
            config = _apply(users.get(user, {}), changes)
            if config:
                users[user] = config
            else:
                users.pop(user, None)
            text = json.dumps({"version": 1, "users": users}, indent=1, sort_keys=True)
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                write_text_atomically(self.path, text + "\n", mode=0o600)
            except OSError as exc:
                raise CredentialStoreError(f"cannot write {self.path}: "
                                           f"{exc.strerror or exc}") from None
            self._seen = None

    def close(self) -> None:
        pass


class ZkCredentialStore:
    """Credentials of a cluster under ``/config/users`` (Kafka's layout).

    With ``watch`` (the broker), lookups come from a cache kept current by ZooKeeper
    watches; without (the CLI), every call reads ZooKeeper. The client belongs to the
    caller unless ``owns_client``.
    """

    def __init__(self, client: KazooClient, *, watch: bool = True,
                 owns_client: bool = False) -> None:
        self._client = client
        self._owns_client = owns_client
        self._watch = watch
        self._cache: dict[str, UserCredentials] = {}
        self._watched: set[str] = set()
        self._lock = threading.Lock()
        self._closed = False
        if watch:
            from kazoo.recipe.watchers import ChildrenWatch

            client.ensure_path(USERS_PATH)
            ChildrenWatch(client, USERS_PATH, self._on_children)

    # -- watches (kazoo's callback thread) ---------------------------------------------

    def _on_children(self, children: list[str]):
        if self._closed:
            return False
        from kazoo.recipe.watchers import DataWatch

        with self._lock:
            new = [child for child in children if child not in self._watched]
            self._watched.update(new)
        for node in new:
            DataWatch(self._client, f"{USERS_PATH}/{node}", self._data_callback(node))
        return None

    def _data_callback(self, node: str):
        # Two parameters exactly: kazoo passes the event too to a callback that takes three.
        def on_data(data, stat):
            return self._on_data(node, data)
        return on_data

    def _on_data(self, node: str, data: bytes | None):
        user = desanitize_user(node)
        with self._lock:
            if data is None or self._closed:
                self._cache.pop(user, None)
                self._watched.discard(node)
                return False
            self._cache[user] = self._decode(user, data)
        return None

    # -- reads and writes --------------------------------------------------------------

    @staticmethod
    def _decode(user: str, data: bytes) -> UserCredentials:
        return decode_user_config(_config_of(data, user), f"{USERS_PATH} user {user!r}")

    def credential(self, user: str, mechanism: str) -> ScramCredential | None:
        if self._watch:
            with self._lock:
                return self._cache.get(user, {}).get(mechanism)
        return self.user(user).get(mechanism)

    def user(self, user: str) -> UserCredentials:
        from kazoo.exceptions import NoNodeError

        try:
            with _zookeeper_errors():
                data, _ = self._client.get(f"{USERS_PATH}/{sanitize_user(user)}")
        except NoNodeError:
            return {}
        return self._decode(user, data)

    def users(self) -> dict[str, UserCredentials]:
        from kazoo.exceptions import NoNodeError

        try:
            with _zookeeper_errors():
                nodes = self._client.get_children(USERS_PATH)
        except NoNodeError:
            return {}
        found = {}
        for node in sorted(nodes):
            user = desanitize_user(node)
            credentials = self.user(user)
            if credentials:
                found[user] = credentials
        return found

    def alter(self, user: str, changes: Mapping[str, ScramCredential | None]) -> None:
        """Read-modify-write of the user's node, conditional on its version."""
        path = f"{USERS_PATH}/{sanitize_user(user)}"
        with _zookeeper_errors():
            config = self._write(path, changes)
        if self._watch:
            # Apply at once on this broker; the watch confirms it shortly.
            with self._lock:
                self._cache[user] = decode_user_config(config, path)

    def _write(self, path: str, changes: Mapping[str, ScramCredential | None]) -> dict:
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        while True:
            try:
                data, stat = self._client.get(path)
                document, version = json.loads(data.decode("utf-8") or "{}"), stat.version
            except NoNodeError:
                document, version = {}, None
            except ValueError:
                raise CredentialStoreError(f"{path} does not hold JSON") from None
            config = _apply(dict(_config_of_document(document)), changes)
            encoded = json.dumps({"version": 1, "config": config}).encode("utf-8")
            try:
                if version is None:
                    self._client.create(path, encoded, makepath=True)
                else:
                    self._client.set(path, encoded, version=version)
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # someone else wrote it in between: read again
            return config

    def close(self) -> None:
        self._closed = True
        if self._owns_client:
            from pylog.cluster.session import close_client

            close_client(self._client)


@contextlib.contextmanager
def _zookeeper_errors():
    """ZooKeeper failures (connection loss, timeouts) as CredentialStoreError; a missing
    node (NoNodeError) is left to the caller."""
    from kazoo.exceptions import KazooException, NoNodeError
    from kazoo.handlers.threading import KazooTimeoutError

    try:
        yield
    except NoNodeError:
        raise
    except (KazooException, KazooTimeoutError) as exc:
        raise CredentialStoreError(f"ZooKeeper request failed: {type(exc).__name__}") from None


def _config_of(data: bytes, user: str) -> dict:
    try:
        document = json.loads(data.decode("utf-8") or "{}")
    except ValueError:
        log.warning("%s/%s does not hold JSON; no credentials for %r", USERS_PATH,
                    sanitize_user(user), user)
        return {}
    return _config_of_document(document)


def _config_of_document(document) -> dict:
    config = document.get("config") if isinstance(document, dict) else None
    return config if isinstance(config, dict) else {}


def open_broker_store(log_dirs: list[Path], zookeeper_connect: str | None, *,
                      session_timeout_ms: int = 18000,
                      connection_timeout_ms: int = 18000) -> CredentialStore:
    """The store a broker authenticates against: ZooKeeper when ``zookeeper.connect`` is
    set (its own watched session), else the credentials file in the first log dir."""
    if zookeeper_connect:
        from pylog.cluster.session import connect_client

        client = connect_client(zookeeper_connect, session_timeout_ms / 1000,
                                connection_timeout_ms / 1000)
        try:
            return ZkCredentialStore(client, watch=True, owns_client=True)
        except BaseException:
            from pylog.cluster.session import close_client

            close_client(client)
            raise
    return FileCredentialStore(log_dirs[0])
