"""ACLs of a cluster, in ZooKeeper with Kafka's layout, cached in every broker.

Nodes (the JSON is Kafka's, see ``pylog.security.acls``)::

    /kafka-acl/<ResourceType>/<name>                        literal patterns
    /kafka-acl-extended/prefixed/<ResourceType>/<name>      prefixed patterns
    /kafka-acl-changes/acl_changes_<seq>                    "<ResourceType>:<name>"
    /kafka-acl-extended-changes/acl_changes_<seq>           {"version": 1, "resourceType":
                                                             ..., "name": ..., "patternType": ...}

A change is a read, then a write conditional on the node's version (a create when there
is no node, a delete when no entry is left), retried when another broker wrote meanwhile;
then a sequential change notification naming the resource. Every broker watches the two
change directories and re-reads the resources named by notifications it has not seen; a
new ZooKeeper session (after expiry) re-reads everything. Notifications older than
``NOTIFICATION_EXPIRY_MS`` are deleted by the writer of the next one. A ``/`` or ``%`` in
a name (allowed in group names, not in ZooKeeper nodes) is written ``%2F`` / ``%25``.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Callable

from kazoo.client import KazooState
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError
from kazoo.recipe.watchers import ChildrenWatch

from pylog.cluster.session import close_client, connect_client
from pylog.cluster.worker import CoalescingWorker
from pylog.errors import RequestTimedOutError
from pylog.security.acl_store import AclStore, Entries
from pylog.security.acls import (
    PatternType, ResourcePattern, ResourceType, decode_entries, encode_entries)

log = logging.getLogger(__name__)

LITERAL_ROOT = "/kafka-acl"
PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
NOTIFICATION_EXPIRY_MS = 15 * 60 * 1000
MAX_ATTEMPTS = 10
STORED_TYPES = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                ResourceType.TRANSACTIONAL_ID, ResourceType.DELEGATION_TOKEN,
                ResourceType.USER)


def _escape(name: str) -> str:
    return name.replace("%", "%25").replace("/", "%2F")


def _unescape(node: str) -> str:
    return node.replace("%2F", "/").replace("%25", "%")


def resource_path(pattern: ResourcePattern) -> str:
    root = PREFIXED_ROOT if pattern.pattern_type == PatternType.PREFIXED else LITERAL_ROOT
    return f"{root}/{pattern.resource_type.label}/{_escape(pattern.name)}"


def encode_change(pattern: ResourcePattern) -> tuple[str, bytes]:
    """The change directory and the notification's data for a change of ``pattern``."""
    if pattern.pattern_type == PatternType.LITERAL:
        return LITERAL_CHANGES, f"{pattern.resource_type.label}:{pattern.name}".encode()
    return EXTENDED_CHANGES, json.dumps({
        "version": 1, "resourceType": pattern.resource_type.label, "name": pattern.name,
        "patternType": pattern.pattern_type.label}).encode()


def decode_change(directory: str, data: bytes) -> ResourcePattern:
    """Raises ValueError for a notification that names no resource."""
    text = data.decode()
    if directory == LITERAL_CHANGES:
        kind, sep, name = text.partition(":")
        if not sep:
            raise ValueError(f"not a resource: {text!r}")
        return ResourcePattern(ResourceType.parse(kind), name)
    try:
        document = json.loads(text)
        return ResourcePattern(ResourceType.parse(document["resourceType"]), document["name"],
                               PatternType.parse(document["patternType"]))
    except (KeyError, TypeError) as error:
        raise ValueError(f"not a resource: {text!r} ({error!r})") from None


class ZkAclStore(AclStore):
    """ACLs in ZooKeeper (see the module docstring), on its own ZooKeeper session.

    Raises ZooKeeperUnavailableError if ``connect`` cannot be reached in time.

    >>> store = ZkAclStore("127.0.0.1:2181/pylog")
    >>> store.applying_to(ResourceType.TOPIC, "events")
    """

    def __init__(self, connect: str, session_timeout_ms: int = 18000,
                 connection_timeout_ms: int = 18000,
                 wall_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        super().__init__()
        self._wall_ms = wall_ms
        self._seen = {LITERAL_CHANGES: -1, EXTENDED_CHANGES: -1}
        self._client = connect_client(connect, session_timeout_ms / 1000,
                                      connection_timeout_ms / 1000)
        self._session_lost = False
        try:
            for path in (LITERAL_ROOT, PREFIXED_ROOT, LITERAL_CHANGES, EXTENDED_CHANGES):
                self._client.ensure_path(path)
            self._worker = CoalescingWorker("pylog-acls", [
                ("reload", self._reload), ("changes", self._apply_changes)])
            # Watch first, then read everything: a change made in between is in both.
            for directory in self._seen:
                self._seen[directory] = max(map(_sequence, self._client.get_children(directory)),
                                            default=-1)
                ChildrenWatch(self._client, directory, self._on_changes)
            self._reload()
            self._client.add_listener(self._on_state)
            self._worker.start()
        except BaseException:
            close_client(self._client)
            raise

    # -- keeping the cache current --------------------------------------------------------

    def _on_changes(self, children) -> None:
        self._worker.request("changes")

    def _on_state(self, state) -> None:
        if state == KazooState.LOST:
            self._session_lost = True
        elif state == KazooState.CONNECTED and self._session_lost:
            self._session_lost = False
            self._worker.request("reload")

    def _reload(self) -> None:
        everything = {}
        for root, pattern_type in ((LITERAL_ROOT, PatternType.LITERAL),
                                   (PREFIXED_ROOT, PatternType.PREFIXED)):
            for kind in self._client.get_children(root):
                try:
                    resource_type = ResourceType.parse(kind)
                except ValueError:
                    continue
                for node in self._client.get_children(f"{root}/{kind}"):
                    pattern = ResourcePattern(resource_type, _unescape(node), pattern_type)
                    everything[pattern] = self._read(pattern)[0]
        self.cache.load(everything)
        log.info("loaded %d ACLs from ZooKeeper", len(self.cache.bindings()))

    def _apply_changes(self) -> None:
        for directory in self._seen:
            fresh = sorted((_sequence(c), c) for c in self._client.get_children(directory)
                           if _sequence(c) > self._seen[directory])
            for sequence, child in fresh:
                try:
                    data, _ = self._client.get(f"{directory}/{child}")
                    pattern = decode_change(directory, data)
                except NoNodeError:
                    pass  # expired meanwhile; whatever it named was re-read since
                except ValueError as error:
                    log.warning("ignoring ACL change notification %s: %s", child, error)
                else:
                    self.cache.replace(pattern, self._read(pattern)[0])
                self._seen[directory] = sequence

    def _read(self, pattern: ResourcePattern) -> tuple[Entries, int | None]:
        """The entries of ``pattern``'s node and its version (None: no node)."""
        try:
            data, stat = self._client.get(resource_path(pattern))
        except NoNodeError:
            return frozenset(), None
        try:
            return decode_entries(data), stat.version
        except ValueError as error:
            log.warning("ignoring the unreadable ACL node %s: %s", resource_path(pattern), error)
            return frozenset(), stat.version

    # -- writing ----------------------------------------------------------------------------

    def _update(self, pattern: ResourcePattern, change: Callable[[Entries], Entries]) -> None:
        path = resource_path(pattern)
        for _ in range(MAX_ATTEMPTS):
            current, version = self._read(pattern)
            wanted = frozenset(change(current))
            try:
                if wanted == current:
                    break
                if version is None:
                    self._client.create(path, encode_entries(wanted), makepath=True)
                elif wanted:
                    self._client.set(path, encode_entries(wanted), version=version)
                else:
                    self._client.delete(path, version)
                break
            except (BadVersionError, NodeExistsError, NoNodeError, NotEmptyError):
                continue  # another broker wrote meanwhile: read again
        else:
            raise RequestTimedOutError(f"the ACLs of {pattern} kept changing meanwhile; "
                                       "try again")
        self.cache.replace(pattern, wanted)
        if wanted != current:
            self._notify(pattern)

    def _notify(self, pattern: ResourcePattern) -> None:
        directory, data = encode_change(pattern)
        self._client.create(f"{directory}/{CHANGE_PREFIX}", data, sequence=True)
        self._expire_notifications(directory)

    def _expire_notifications(self, directory: str) -> None:
        oldest = self._wall_ms() - NOTIFICATION_EXPIRY_MS
        for child in self._client.get_children(directory):
            path = f"{directory}/{child}"
            stat = self._client.exists(path)
            if stat is not None and stat.ctime < oldest:
                try:
                    self._client.delete(path)
                except NoNodeError:
                    pass

    def close(self) -> None:
        self._worker.stop()
        close_client(self._client)


def _sequence(child: str) -> int:
    try:
        return int(child[len(CHANGE_PREFIX):])
    except ValueError:
        return -1
