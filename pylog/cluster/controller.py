"""The controller: one broker, elected through ``/controller``, that owns partition states.

Election: create the ephemeral ``/controller`` node; whoever succeeds is controller until
its session ends, then everyone who saw the node vanish tries again. The winner increments
``/controller_epoch`` and remembers the node's ZooKeeper version; every state it writes is
a transaction that first checks that version, so a controller that was replaced (its
session expired while it was paused) cannot overwrite its successor's decisions.

Leadership rule (no replication yet, so no data ever moves): a partition's leader is its
preferred replica (replica 0) while that broker is registered, else -1 (offline). Every
change of leader bumps ``leader_epoch``. When the leader goes offline the ISR keeps its last
member, as Kafka does.

Topic deletion: the controller carries out requests under ``/admin/delete_topics``,
removing the assignment, partition states and config, then the request.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from pylog.cluster import layout
from pylog.cluster.layout import PartitionStateNode
from pylog.cluster.metadata import NO_LEADER
from pylog.errors import PylogError

log = logging.getLogger(__name__)


class ControllerMovedError(PylogError):
    """A write was refused because another broker became controller meanwhile."""


class Controller:
    def __init__(self, client: KazooClient, broker_id: int,
                 wall_clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self._client = client
        self.broker_id = broker_id
        self._wall_clock_ms = wall_clock_ms
        self.active = False
        self.epoch = 0
        self._epoch_version = -1
        self._session_id: int | None = None
        # Partition states as this controller last read or wrote them, with their node
        # versions: while it is controller nobody else writes them.
        self._states: dict[tuple[str, int, int], tuple[PartitionStateNode, int]] = {}

    def elect(self) -> bool:
        """Become controller if nobody is. True if this broker is the controller."""
        session_id = self._client.client_id[0]
        while True:
            try:
                self._client.create(layout.CONTROLLER,
                                    layout.encode_controller(self.broker_id, self._wall_clock_ms()),
                                    ephemeral=True)
                break
            except NodeExistsError:
                try:
                    _, stat = self._client.get(layout.CONTROLLER)
                except NoNodeError:
                    continue
                if stat.ephemeralOwner != session_id:
                    self.active = False
                    return False
                if self.active and self._session_id == session_id:
                    return True
                break
        self._increment_epoch()
        self._states.clear()  # a predecessor may have written since we last looked
        self._session_id = session_id
        self.active = True
        log.info("broker %d is controller with epoch %d", self.broker_id, self.epoch)
        return True

    def resign(self) -> None:
        """Stop acting as controller (the session that held ``/controller`` is gone)."""
        self.active = False

    def _increment_epoch(self) -> None:
        while True:
            try:
                data, stat = self._client.get(layout.CONTROLLER_EPOCH)
            except NoNodeError:
                try:
                    self._client.create(layout.CONTROLLER_EPOCH, b"1")
                except NodeExistsError:
                    continue
                self.epoch, self._epoch_version = 1, 0
                return
            try:
                stat = self._client.set(layout.CONTROLLER_EPOCH,
                                        str(int(data) + 1).encode(), version=stat.version)
            except BadVersionError:
                continue
            self.epoch, self._epoch_version = int(data) + 1, stat.version
            return

    # -- keeping partition states current -----------------------------------------------

    def reconcile(self) -> None:
        """Carry out deletions and bring every partition's state in line with the rule."""
        if not self.active:
            return
        for topic in self._client.get_children(layout.DELETE_TOPICS):
            self._delete_topic(topic)
        live = {int(child) for child in self._client.get_children(layout.BROKER_IDS)}
        seen = set()
        for topic in self._client.get_children(layout.BROKER_TOPICS):
            try:
                data, stat = self._client.get(layout.topic_path(topic))
            except NoNodeError:
                continue
            for partition, replicas in sorted(layout.decode_assignment(data).items()):
                key = (topic, partition, stat.czxid)
                seen.add(key)
                self._elect_leader(key, replicas, live)
        self._states = {key: value for key, value in self._states.items() if key in seen}

    def _elect_leader(self, key: tuple[str, int, int], replicas: tuple[int, ...],
                      live: set[int]) -> None:
        """Write the partition's state if its leader should change.

        ``key`` is (topic, partition, czxid of the topic node): a topic deleted and created
        again under the same name has a new czxid, so nothing cached about the old one is
        used for the new one.
        """
        topic, partition, _ = key
        preferred = replicas[0]
        leader = preferred if preferred in live else NO_LEADER
        path = layout.partition_state_path(topic, partition)
        if key not in self._states:
            try:
                data, stat = self._client.get(path)
                self._states[key] = (PartitionStateNode.decode(data), stat.version)
            except NoNodeError:
                if self._ensure_partition_node(topic, partition):
                    state = PartitionStateNode(leader, 0, (preferred,), self.epoch)
                    self._commit_guarded(key, lambda txn: txn.create(path, state.encode()))
                    self._states[key] = (state, 0)
                return
        current, version = self._states[key]
        if current.leader == leader:
            return
        isr = (leader,) if leader != NO_LEADER else (current.isr or (preferred,))
        state = PartitionStateNode(leader, current.leader_epoch + 1, isr, self.epoch)
        log.info("controller %d: %s-%d leader %d -> %d (leader epoch %d)", self.broker_id,
                 topic, partition, current.leader, leader, state.leader_epoch)
        written = self._commit_guarded(
            key, lambda txn: txn.set_data(path, state.encode(), version=version))
        self._states[key] = (state, written.version)

    def _ensure_partition_node(self, topic: str, partition: int) -> bool:
        """Create ``.../partitions/<p>`` under an existing topic; False if the topic is gone."""
        for path in (layout.partitions_path(topic), layout.partition_path(topic, partition)):
            try:
                self._client.create(path)
            except NodeExistsError:
                pass
            except NoNodeError:
                return False
        return True

    def _commit_guarded(self, key: tuple, add_operation):
        """Run one write in a transaction that also checks we are still controller.

        Returns the write's result. On failure the cached state of ``key`` is dropped,
        so the next pass reads it again.
        """
        txn = self._client.transaction()
        txn.check(layout.CONTROLLER_EPOCH, self._epoch_version)
        add_operation(txn)
        check_result, write_result = txn.commit()
        if isinstance(check_result, BadVersionError):
            self.active = False
            self._states.clear()
            raise ControllerMovedError(f"broker {self.broker_id} is no longer controller "
                                       f"(epoch {self.epoch} was superseded)")
        if isinstance(write_result, Exception):
            self._states.pop(key, None)
            raise write_result
        return write_result

    def _delete_topic(self, topic: str) -> None:
        for path in (layout.topic_path(topic), layout.topic_config_path(topic)):
            try:
                self._client.delete(path, recursive=True)
            except NoNodeError:
                pass
        try:
            self._client.delete(layout.delete_topic_path(topic))
        except NoNodeError:
            pass
        log.info("controller %d: deleted topic %s", self.broker_id, topic)
