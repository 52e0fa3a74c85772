"""Where dynamic broker configs are kept: a broker's own (``entity`` its id) and the
cluster-wide default (``entity`` :data:`DEFAULT_ENTITY`).

In cluster mode they are Kafka's nodes, ``/config/brokers/<id>`` and
``/config/brokers/<default>``::

    {"version": 1, "config": {"log.retention.ms": "3600000"}}

Each broker watches its own node and the default's, so a change written by any broker
reaches all of them. A standalone broker keeps both in ``broker-configs.json`` in its first
log dir. Either way a change is a read-modify-write that cannot lose a concurrent one
(conditional on the node's version; under a lock for the file).

Group configs (``/config/groups/<group>``; ``group-configs.json`` standalone) are kept the
same way, by the store ``for_groups()`` gives, read afresh on every call.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Callable, Protocol

from pylog.errors import KafkaStorageError, RequestTimedOutError
from pylog.log.checkpoint import write_text_atomically

log = logging.getLogger(__name__)

DEFAULT_ENTITY = "<default>"
BROKERS_PATH = "/config/brokers"
CONFIG_FILE = "broker-configs.json"
GROUPS_PATH = "/config/groups"
GROUP_CONFIG_FILE = "group-configs.json"

Configs = dict[str, str]
Alter = Callable[[Configs], Configs]


class BrokerConfigStore(Protocol):
    keeps_secrets: bool  # may hold passwords (a listener's ssl.key.password)

    def configs(self, entity: str) -> Configs:
        """The dynamic configs of ``entity`` as last seen (``{}``: none)."""

    def alter(self, entity: str, alter: Alter) -> Configs:
        """Replace ``entity``'s configs with ``alter(current)``; returns what was written.
        Whatever ``alter`` raises leaves them as they were."""

    def watch(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` after the watched configs change (any thread)."""

    def for_groups(self) -> "BrokerConfigStore":
        """A store of the same kind for group configs (entities: group names)."""

    def close(self) -> None: ...


class FileBrokerConfigStore:
    """The dynamic configs of a standalone broker, in ``<log dir>/broker-configs.json``::

        {"version": 1, "brokers": {"<default>": {...}, "0": {...}}}
    """

    keeps_secrets = True  # the file is the broker's own (mode 0600)

    def __init__(self, log_dir: Path, file: str = CONFIG_FILE, section: str = "brokers") -> None:
        self.path = Path(log_dir) / file
        self.section = section
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []
        self._entities = self._read()

    def _read(self) -> dict[str, Configs]:
        try:
            document = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise KafkaStorageError(f"cannot read {self.path}: {exc}") from None
        brokers = document.get(self.section) if isinstance(document, dict) else None
        if not isinstance(brokers, dict):
            raise KafkaStorageError(f"{self.path}: not a version 1 {self.section} configs file")
        return {entity: {str(k): str(v) for k, v in configs.items()}
                for entity, configs in brokers.items() if isinstance(configs, dict)}

    def configs(self, entity: str) -> Configs:
        with self._lock:
            return dict(self._entities.get(entity, {}))

    def alter(self, entity: str, alter: Alter) -> Configs:
        with self._lock:
            entities = {name: dict(configs) for name, configs in self._entities.items()}
            configs = {str(k): str(v) for k, v in alter(entities.get(entity, {})).items()}
            if configs:
                entities[entity] = configs
            else:
                entities.pop(entity, None)
            text = json.dumps({"version": 1, self.section: entities}, indent=1, sort_keys=True)
            try:
                # 0600: a listener's ssl.key.password may be among them.
                write_text_atomically(self.path, text + "\n", mode=0o600)
            except OSError as exc:
                raise KafkaStorageError(f"cannot write {self.path}: "
                                        f"{exc.strerror or exc}") from None
            self._entities = entities
        for callback in list(self._callbacks):
            callback()
        return configs

    def watch(self, callback: Callable[[], None]) -> None:
        self._callbacks.append(callback)

    def for_groups(self) -> "FileBrokerConfigStore":
        """The store of group configs, next to this one."""
        return FileBrokerConfigStore(self.path.parent, GROUP_CONFIG_FILE, "groups")

    def close(self) -> None:
        self._callbacks.clear()


class ZkBrokerConfigStore:
    """Dynamic configs under ``/config/brokers`` in ZooKeeper (Kafka's layout).

    ``watched`` are the entities kept current by watches (a broker: its id and the
    default); others are read from ZooKeeper on every call. The client belongs to the
    caller unless ``owns_client``.
    """

    # Whoever can read ZooKeeper could read a password kept there: pylog does not encrypt
    # them (Kafka does, with password.encoder.secret), so it does not keep them.
    keeps_secrets = False

    def __init__(self, client, watched: tuple[str, ...] = (), *,
                 owns_client: bool = False, root: str = BROKERS_PATH) -> None:
        from kazoo.recipe.watchers import DataWatch

        self.root = root
        self._client = client
        self._owns_client = owns_client
        self._lock = threading.Lock()
        self._cache: dict[str, Configs] = {}
        self._callbacks: list[Callable[[], None]] = []
        self._closed = False
        self._order: dict[str, tuple[int, int]] = {}
        for entity in watched:
            configs, stat = self._get(entity)
            self._cache[entity] = configs
            self._order[entity] = (stat.czxid, stat.version) if stat is not None else (0, -1)
            DataWatch(client, self._path(entity), self._on_data(entity))

    def _on_data(self, entity: str):
        # Two parameters exactly: kazoo passes the event too to a callback that takes three.
        def on_data(data, stat):
            if self._closed:
                return False
            configs = self._decode(data, entity) if data else {}
            # The node's creation and version order what the watch and alter() cache: a
            # watch delivering an older version than alter() wrote must not undo it.
            order = (stat.czxid, stat.version) if stat is not None else (0, -1)
            self._cached(entity, configs, order)
            return None
        return on_data

    def _cached(self, entity: str, configs: Configs, order: tuple[int, int]) -> None:
        with self._lock:
            if order < self._order.get(entity, (0, -1)) and order != (0, -1):
                return
            changed = self._cache.get(entity) != configs
            self._cache[entity] = configs
            self._order[entity] = order
        if changed:
            for callback in list(self._callbacks):
                callback()

    def _get(self, entity: str) -> tuple[Configs, object | None]:
        from kazoo.exceptions import NoNodeError

        try:
            with _zookeeper_errors(self._client):
                data, stat = self._client.get(self._path(entity))
        except NoNodeError:
            return {}, None
        return (self._decode(data, entity) if data else {}), stat

    def configs(self, entity: str) -> Configs:
        with self._lock:
            cached = self._cache.get(entity)
        return dict(cached) if cached is not None else self._get(entity)[0]

    def alter(self, entity: str, alter: Alter) -> Configs:
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        for _ in range(10):
            current, stat = self._get(entity)
            configs = {str(k): str(v) for k, v in alter(dict(current)).items()}
            encoded = json.dumps({"version": 1, "config": configs}).encode()
            try:
                with _zookeeper_errors(self._client):
                    if stat is None:
                        _, written = self._client.create(self._path(entity), encoded,
                                                         makepath=True, include_data=True)
                    else:
                        written = self._client.set(self._path(entity), encoded,
                                                   version=stat.version)
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # written meanwhile: read again
            if entity in self._cache:
                # Applied at once here; the watch confirms it and tells the others.
                self._cached(entity, configs, (written.czxid, written.version))
            return configs
        raise RequestTimedOutError(f"the configs of {self._path(entity)} kept changing "
                                   "meanwhile; try again")

    def watch(self, callback: Callable[[], None]) -> None:
        self._callbacks.append(callback)

    def for_groups(self) -> "ZkBrokerConfigStore":
        """The store of group configs, over this one's ZooKeeper session."""
        return ZkBrokerConfigStore(self._client, root=GROUPS_PATH)

    def _path(self, entity: str) -> str:
        return f"{self.root}/{entity}"

    def _decode(self, data: bytes, entity: str) -> Configs:
        try:
            document = json.loads(data.decode("utf-8"))
            config = document.get("config") if isinstance(document, dict) else None
            if not isinstance(config, dict):
                raise ValueError("no config object")
        except (ValueError, UnicodeDecodeError) as exc:
            log.warning("%s does not hold configs (%s); taken as none", self._path(entity), exc)
            return {}
        return {str(k): str(v) for k, v in config.items()}

    def close(self) -> None:
        self._closed = True
        self._callbacks.clear()
        if self._owns_client:
            from pylog.cluster.session import close_client

            close_client(self._client)


def open_broker_config_store(log_dirs: list[Path], broker_id: int,
                             zookeeper_connect: str | None, *, session_timeout_ms: int = 18000,
                             connection_timeout_ms: int = 18000) -> BrokerConfigStore:
    """The store a broker reads its dynamic configs from: ZooKeeper when
    ``zookeeper.connect`` is set (its own watched session), else the file in the first
    log dir."""
    if zookeeper_connect:
        from pylog.cluster.session import close_client, connect_client

        client = connect_client(zookeeper_connect, session_timeout_ms / 1000,
                                connection_timeout_ms / 1000)
        try:
            return ZkBrokerConfigStore(client, (str(broker_id), DEFAULT_ENTITY),
                                       owns_client=True)
        except BaseException:
            close_client(client)
            raise
    return FileBrokerConfigStore(log_dirs[0])


class _zookeeper_errors:
    """ZooKeeper failures as RequestTimedOutError (the client retries); a missing node
    (NoNodeError) and a lost race are left to the caller. Fails at once while disconnected:
    kazoo would hold the request until it is connected again, and a broker's request thread
    must not wait that long."""

    def __init__(self, client) -> None:
        self.client = client

    def __enter__(self):
        if not self.client.connected:
            raise RequestTimedOutError("not connected to ZooKeeper; try again")
        return self

    def __exit__(self, kind, exc, tb):
        from kazoo.exceptions import (
            BadVersionError, KazooException, NodeExistsError, NoNodeError)
        from kazoo.handlers.threading import KazooTimeoutError

        if exc is None or isinstance(exc, (NoNodeError, BadVersionError, NodeExistsError)):
            return False
        if isinstance(exc, (KazooException, KazooTimeoutError)):
            raise RequestTimedOutError(f"ZooKeeper request failed: {type(exc).__name__}") \
                from None
        return False
