"""A broker's in-memory view of cluster state, kept current by ZooKeeper watches.

Metadata requests read immutable snapshots from here and never go to ZooKeeper. Kazoo
``ChildrenWatch``/``DataWatch`` recipes watch ``/brokers/ids``, ``/brokers/topics``, each
topic's assignment and config, each partition's state node, ``/controller`` and
``/admin/delete_topics``; the recipes re-read after a session is re-established.

Each topic's watches carry the generation the topic had when they were set; a watch whose
generation is stale (the topic was deleted, maybe re-created) cancels itself.

While this broker cannot vouch for its own session (connection suspended, session lost,
not yet registered again), partitions it leads are reported with leader -1, so it never
serves leadership that may have moved on.
"""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import replace
from types import MappingProxyType
from typing import Callable, Mapping

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from pylog.cluster import layout
from pylog.cluster.layout import BrokerRegistration, PartitionStateNode
from pylog.cluster.metadata import NO_LEADER, PartitionState, TopicMetadata
from pylog.types import BrokerEndpoint

log = logging.getLogger(__name__)

# What changed, as passed to ``on_change``. STALE: a read or a watch failed (connection
# trouble); the owner should call ``refresh`` (again, until it succeeds).
(BROKERS, TOPICS, ASSIGNMENT, STATE, CONFIG, CONTROLLER, DELETIONS, SHUTDOWNS, PREFERRED,
 REASSIGNMENT, STALE) = ("brokers", "topics", "assignment", "state", "config", "controller",
                         "deletions", "shutdowns", "preferred", "reassignment", "stale")


class ClusterView:
    def __init__(self, client: KazooClient, local_broker_id: int,
                 on_change: Callable[[str], None]) -> None:
        self._client = client
        self._local_broker_id = local_broker_id
        self._on_change = on_change
        self._lock = threading.RLock()
        self._brokers: list[BrokerEndpoint] = []
        self._generation = 0
        self._topic_generation: dict[str, int] = {}
        self._assignments: dict[str, dict[int, tuple[int, ...]]] = {}
        self._topic_ids: dict[str, uuid.UUID | None] = {}
        self._configs: dict[str, dict[str, str]] = {}
        self._states: dict[str, dict[int, tuple[PartitionStateNode, int]]] = {}
        # Watches set: ("config"|"assignment", topic, generation) and
        # ("state", topic, generation, partition).
        self._watched: set[tuple] = set()
        self._controller = NO_LEADER
        self._deletions: frozenset[str] = frozenset()
        self._claim_leadership = False
        self._snapshot: dict[str, TopicMetadata] = {}
        self._hidden: tuple[dict, Mapping[str, TopicMetadata]] | None = None
        self.reassignment_pending = False

    def start(self) -> None:
        """Set the root watches; returns once the initial state has been read."""
        ChildrenWatch(self._client, layout.BROKER_IDS, self._on_broker_ids)
        ChildrenWatch(self._client, layout.BROKER_TOPICS, self._on_topics)
        DataWatch(self._client, layout.CONTROLLER, self._on_controller)
        ChildrenWatch(self._client, layout.DELETE_TOPICS, self._on_deletions)
        ChildrenWatch(self._client, layout.CONTROLLED_SHUTDOWN, self._on_shutdowns)
        DataWatch(self._client, layout.PREFERRED_ELECTION, self._on_preferred_election)
        DataWatch(self._client, layout.UNCLEAN_ELECTION, self._on_preferred_election)
        DataWatch(self._client, layout.REASSIGN_PARTITIONS, self._on_reassignment)

    # -- reads (no ZooKeeper) --------------------------------------------------------

    def brokers(self) -> list[BrokerEndpoint]:
        return list(self._brokers)

    def topics(self) -> Mapping[str, TopicMetadata]:
        return MappingProxyType(self._snapshot)

    def topic(self, name: str) -> TopicMetadata | None:
        return self._snapshot.get(name)

    def controller_id(self) -> int:
        return self._controller

    def topics_without_own_leadership(self) -> Mapping[str, TopicMetadata]:
        """The snapshot with this broker's leadership shown as -1 (cached per snapshot)."""
        snapshot = self._snapshot
        cached = self._hidden
        if cached is None or cached[0] is not snapshot:
            hidden = {name: self._hide_own(topic) for name, topic in snapshot.items()}
            cached = self._hidden = (snapshot, MappingProxyType(hidden))
        return cached[1]

    def _hide_own(self, topic: TopicMetadata) -> TopicMetadata:
        if all(state.leader != self._local_broker_id for state in topic.partitions.values()):
            return topic
        partitions = {p: replace(state, leader=NO_LEADER)
                      if state.leader == self._local_broker_id else state
                      for p, state in topic.partitions.items()}
        return replace(topic, partitions=MappingProxyType(partitions))

    def marked_for_deletion(self, name: str) -> bool:
        return name in self._deletions

    # -- leadership claim ----------------------------------------------------------------

    def set_claim_leadership(self, claim: bool) -> bool:
        """Report (True) or hide (False) this broker's own leadership. True if it changed."""
        with self._lock:
            if self._claim_leadership == claim:
                return False
            self._claim_leadership = claim
            self._snapshot = {name: self._build(name) for name in self._assignments}
        return True

    def refresh(self) -> None:
        """Re-read brokers, assignments and partition states with direct reads.

        Used after registering under a new session, so leadership is judged from fresh
        state rather than from what the watches last delivered before the session broke,
        and after a STALE report; it also sets any watch that could not be set before.
        Raises kazoo errors if ZooKeeper cannot be read (call again later).
        """
        self._on_broker_ids(self._client.get_children(layout.BROKER_IDS), strict=True)
        self._on_topics(self._client.get_children(layout.BROKER_TOPICS), report=False)
        for topic in self._client.get_children(layout.BROKER_TOPICS):
            try:
                data, _ = self._client.get(layout.topic_path(topic))
            except NoNodeError:
                continue
            states = {}
            for partition in layout.decode_assignment(data):
                try:
                    states[partition] = self._client.get(
                        layout.partition_state_path(topic, partition))
                except NoNodeError:
                    pass
            with self._lock:
                for partition, (state_data, stat) in states.items():
                    self._apply_state(topic, partition, state_data, stat.mzxid)
                self._rebuild(topic)
        if not self._ensure_watches(report=False):
            raise RuntimeError("some ZooKeeper watches could not be set")

    def _ensure_watches(self, report: bool = True) -> bool:
        """Set the per-topic and per-partition watches still missing; False if one failed
        (reported as STALE unless ``report`` is False).

        A key is marked before its watch is set because setting a DataWatch runs its
        callback at once, which may come back here.
        """
        with self._lock:
            wanted = []
            for topic, generation in self._topic_generation.items():
                wanted += [("config", topic, generation), ("assignment", topic, generation)]
                wanted += [("state", topic, generation, p) for p in self._assignments.get(topic, ())]
            missing = [key for key in wanted if key not in self._watched]
            self._watched.update(missing)
        for key in missing:
            try:
                self._set_watch(key)
            except Exception:  # noqa: BLE001 -- connection trouble: retried by refresh()
                log.warning("could not watch %s; will retry", key[:2], exc_info=True)
                with self._lock:
                    self._watched.discard(key)
                if report:
                    self._on_change(STALE)
                return False
        return True

    def _set_watch(self, key: tuple) -> None:
        kind, topic, generation = key[:3]
        if kind == "config":
            DataWatch(self._client, layout.topic_config_path(topic),
                      self._config_watch(topic, generation))
        elif kind == "assignment":
            DataWatch(self._client, layout.topic_path(topic),
                      self._assignment_watch(topic, generation))
        else:
            DataWatch(self._client, layout.partition_state_path(topic, key[3]),
                      self._state_watch(topic, key[3], generation))

    # -- watch callbacks (kazoo's callback thread) -------------------------------------

    def _on_broker_ids(self, children: list[str], strict: bool = False) -> None:
        brokers = []
        for child in children:
            try:
                data, _ = self._client.get(layout.broker_path(int(child)))
                brokers.append(BrokerRegistration.decode(int(child), data).endpoint)
            except NoNodeError:
                continue
            except (ValueError, KeyError, TypeError):
                log.warning("ignoring unreadable broker registration %s", child)
            except KazooException:
                if strict:
                    raise
                log.warning("could not read broker %s; will retry", child, exc_info=True)
                self._on_change(STALE)
                return
        with self._lock:
            self._brokers = sorted(brokers, key=lambda b: b.broker_id)
        self._on_change(BROKERS)

    def _on_topics(self, children: list[str], report: bool = True) -> None:
        with self._lock:
            current = set(children)
            for gone in set(self._topic_generation) - current:
                del self._topic_generation[gone]
                for table in (self._assignments, self._topic_ids, self._configs, self._states):
                    table.pop(gone, None)
                self._watched = {key for key in self._watched if key[1] != gone}
                self._snapshot = {k: v for k, v in self._snapshot.items() if k != gone}
            for topic in sorted(current - set(self._topic_generation)):
                self._generation += 1
                self._topic_generation[topic] = self._generation
        self._ensure_watches(report)
        self._on_change(TOPICS)

    def _current(self, topic: str, generation: int) -> bool:
        return self._topic_generation.get(topic) == generation

    def _assignment_watch(self, topic: str, generation: int):
        def watch(data, stat, event=None):
            if not self._current(topic, generation):
                return False
            with self._lock:
                if data is None:
                    self._assignments.pop(topic, None)
                    self._topic_ids.pop(topic, None)
                else:
                    try:
                        self._assignments[topic] = layout.decode_assignment(data)
                        self._topic_ids[topic] = _topic_id(data)
                    except (ValueError, KeyError, TypeError, AttributeError):
                        log.warning("ignoring unreadable assignment of topic %s", topic)
                        return None
                self._rebuild(topic)
            self._ensure_watches()
            self._on_change(ASSIGNMENT)
            return None
        return watch

    def _state_watch(self, topic: str, partition: int, generation: int):
        def watch(data, stat, event=None):
            if not self._current(topic, generation):
                return False
            with self._lock:
                if data is None:
                    self._states.get(topic, {}).pop(partition, None)
                else:
                    self._apply_state(topic, partition, data, stat.mzxid)
                self._rebuild(topic)
            self._on_change(STATE)
            return None
        return watch

    def _config_watch(self, topic: str, generation: int):
        def watch(data, stat, event=None):
            if not self._current(topic, generation):
                return False
            with self._lock:
                try:
                    self._configs[topic] = layout.decode_topic_config(data) if data else {}
                except (ValueError, AttributeError):
                    log.warning("ignoring unreadable config of topic %s", topic)
                self._rebuild(topic)
            self._on_change(CONFIG)
            return None
        return watch

    def _on_controller(self, data, stat, event=None) -> None:
        try:
            controller = layout.decode_controller(data) if data else NO_LEADER
        except (ValueError, KeyError, TypeError):
            controller = NO_LEADER
        self._controller = controller
        self._on_change(CONTROLLER)

    def _on_deletions(self, children: list[str]) -> None:
        self._deletions = frozenset(children)
        self._on_change(DELETIONS)

    def _on_shutdowns(self, children: list[str]) -> None:
        self._on_change(SHUTDOWNS)

    def _on_reassignment(self, data, stat, event=None) -> None:
        self.reassignment_pending = data is not None
        if data is not None:
            self._on_change(REASSIGNMENT)

    def _on_preferred_election(self, data, stat, event=None) -> None:
        if data is not None:
            self._on_change(PREFERRED)

    # -- snapshot building (lock held) ----------------------------------------------------

    def _apply_state(self, topic: str, partition: int, data: bytes, mzxid: int) -> None:
        """Store a state read, unless a newer one (higher mzxid) is already stored."""
        states = self._states.setdefault(topic, {})
        stored = states.get(partition)
        if stored is not None and stored[1] > mzxid:
            return
        try:
            states[partition] = (PartitionStateNode.decode(data), mzxid)
        except (ValueError, KeyError, TypeError):
            log.warning("ignoring unreadable state of %s-%d", topic, partition)

    def _rebuild(self, topic: str) -> None:
        snapshot = dict(self._snapshot)
        if topic in self._assignments:
            snapshot[topic] = self._build(topic)
        else:
            snapshot.pop(topic, None)
        self._snapshot = snapshot

    def _build(self, topic: str) -> TopicMetadata:
        states = self._states.get(topic, {})
        partitions = {}
        for partition, replicas in sorted(self._assignments[topic].items()):
            node = states.get(partition, (None, 0))[0]
            if node is None:
                partitions[partition] = PartitionState(partition, NO_LEADER, 0, replicas, ())
                continue
            leader = node.leader
            if leader == self._local_broker_id and not self._claim_leadership:
                leader = NO_LEADER
            partitions[partition] = PartitionState(partition, leader, node.leader_epoch,
                                                   replicas, node.isr)
        return TopicMetadata(topic, MappingProxyType(partitions),
                             MappingProxyType(dict(self._configs.get(topic, {}))),
                             self._topic_ids.get(topic))


def _topic_id(data: bytes) -> uuid.UUID | None:
    """The topic node's id; None for one without (or with an unreadable one, which the
    controller logs)."""
    try:
        return layout.decode_topic_id(data)
    except ValueError:
        return None
