"""The controller: one broker, elected through ``/controller``, that owns partition states.

Election: create the ephemeral ``/controller`` node; whoever succeeds is controller until
its session ends, then everyone who saw the node vanish tries again. The winner increments
``/controller_epoch`` and remembers the node's ZooKeeper version; every state it writes is
a transaction that first checks that version, so a controller that was replaced (its
session expired while it was paused) cannot overwrite its successor's decisions.

Leadership (``election.elect``): a partition's leader stays while its broker is alive and
not shutting down; otherwise the first assigned replica in the ISR that is takes over,
with a new leader epoch. Dead and shutting-down replicas leave the ISR. Without an in-sync
replica the partition goes offline unless ``unclean.leader.election.enable`` (the topic's,
else the broker's) lets an out-of-sync replica lead. Leaders change ISRs themselves
(conditional writes on the state node's version); a write of ours that loses that race is
read again and decided again.

Topic deletion: the controller carries out requests under ``/admin/delete_topics``,
removing the assignment, partition states and config, then the request.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError

from pylog.cluster import layout
from pylog.cluster.election import elect
from pylog.cluster.layout import PartitionStateNode
from pylog.cluster.reassignment import Reassigner
from pylog.cluster.metadata import NO_LEADER
from pylog.errors import PylogError

log = logging.getLogger(__name__)


class ControllerMovedError(PylogError):
    """A write was refused because another broker became controller meanwhile."""


class Controller:
    def __init__(self, client: KazooClient, broker_id: int,
                 wall_clock_ms: Callable[[], int] = lambda: int(time.time() * 1000), *,
                 unclean_default: bool = False) -> None:
        self._client = client
        self.broker_id = broker_id
        self.unclean_default = unclean_default
        self._preferred_requests: set[tuple[str, int]] = set()
        # Partitions an ElectLeaders asked to elect uncleanly, once (their topic's
        # unclean.leader.election.enable notwithstanding).
        self._unclean_requests: set[tuple[str, int]] = set()
        self.auto_leader_rebalance = False
        self._states_stale = False
        self._reassigner = Reassigner(client, broker_id,
                                      lambda ops: self._commit_guarded(None, ops),
                                      lambda: self.epoch)
        self._wall_clock_ms = wall_clock_ms
        self.active = False
        self.epoch = 0
        self._epoch_version = -1
        self._session_id: int | None = None
        # Partition states as this controller last read or wrote them, with their node
        # versions: while it is controller nobody else writes them.
        self._states: dict[tuple[str, int, int], tuple[PartitionStateNode, int]] = {}
        # Topic ids seen, by (topic, node czxid): given back to a node that loses its id.
        self._topic_ids: dict[tuple[str, int], uuid.UUID] = {}
        self._bad_ids: set[tuple[str, int]] = set()  # unreadable ids already logged

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
        """Carry out deletions and bring every partition's state in line with the rules.

        A state write that lost a race with a leader's ISR change is read and decided
        again (a few passes at most; the next event triggers another reconcile anyway).
        """
        if not self.active:
            return
        for topic in self._client.get_children(layout.DELETE_TOPICS):
            self._delete_topic(topic)
        request_stat = self._read_election(layout.PREFERRED_ELECTION, self._preferred_requests)
        unclean_stat = self._read_election(layout.UNCLEAN_ELECTION, self._unclean_requests)
        for _ in range(5):
            if self._reconcile_pass():
                break
        self._preferred_requests.clear()
        self._unclean_requests.clear()
        live = {int(child) for child in self._client.get_children(layout.BROKER_IDS)}
        shutting_down = {int(child) for child in
                         self._client.get_children(layout.CONTROLLED_SHUTDOWN)}
        try:
            self._reassigner.run(live - shutting_down)
        except BadVersionError:
            self._states.clear()  # raced with a leader's ISR write; the next pass retries
        for path, stat in ((layout.PREFERRED_ELECTION, request_stat),
                           (layout.UNCLEAN_ELECTION, unclean_stat)):
            if stat is not None:
                self._commit_guarded(None, lambda txn, path=path, stat=stat: txn.delete(
                    path, version=stat.version))

    def _read_election(self, path: str, requests: set[tuple[str, int]]):
        """Add an election request's partitions to ``requests``; its node's stat (None:
        no request)."""
        try:
            data, stat = self._client.get(path)
        except NoNodeError:
            return None
        try:
            requests.update(layout.decode_preferred_election(data))
        except ValueError:
            log.warning("ignoring an unreadable leader election request at %s", path)
        return stat

    def _reconcile_pass(self) -> bool:
        if self._states_stale:
            self._states_stale = False
            self._states.clear()
        live = {int(child) for child in self._client.get_children(layout.BROKER_IDS)}
        shutting_down = {int(child) for child in
                         self._client.get_children(layout.CONTROLLED_SHUTDOWN)} & live
        seen = set()
        settled = True
        for topic in self._client.get_children(layout.BROKER_TOPICS):
            try:
                data, stat = self._client.get(layout.topic_path(topic))
            except NoNodeError:
                continue
            self._check_topic_id(topic, data, stat)
            for partition, replicas in sorted(layout.decode_assignment(data).items()):
                key = (topic, partition, stat.czxid)
                seen.add(key)
                try:
                    self._elect_leader(key, replicas, live, shutting_down)
                except BadVersionError:
                    settled = False  # a leader changed its ISR meanwhile: decide again
        self._states = {key: value for key, value in self._states.items() if key in seen}
        topics = {(topic, czxid) for topic, _, czxid in seen}
        self._topic_ids = {k: v for k, v in self._topic_ids.items() if k in topics}
        return settled

    def _check_topic_id(self, topic: str, data: bytes, stat) -> None:
        """A topic created by a broker or tool that wrote no topic ids gets one, as Kafka's
        controller gives them (a change meanwhile: the next pass sees the new node). A
        topic whose node lost the id it had (rewritten by an older writer) gets the same
        one back, so clients do not take it for a new topic."""
        key = (topic, stat.czxid)
        try:
            topic_id = layout.decode_topic_id(data)
        except ValueError:
            if key not in self._bad_ids:
                self._bad_ids.add(key)
                log.warning("controller %d: topic %s has an unreadable topic_id; left as it is",
                            self.broker_id, topic)
            return
        if topic_id is not None:
            self._topic_ids[key] = topic_id
            return
        restored = self._topic_ids.get(key)
        given = restored or uuid.uuid4()
        try:
            self._client.set(layout.topic_path(topic), layout.with_topic_id(data, given),
                             version=stat.version)
        except (BadVersionError, NoNodeError):
            return
        self._topic_ids[key] = given
        log.info("controller %d: topic %s given %s id %s", self.broker_id, topic,
                 "back its" if restored else "the", layout.uuid_text(given))

    def forget_states(self) -> None:
        """Partition states changed behind our back (a leader's ISR write): read them
        again at the next pass instead of deciding from stale ISRs. Called from kazoo's
        thread, so it only sets a flag the worker thread acts on."""
        self._states_stale = True

    def request_preferred_election(self, partitions) -> None:
        """Move leadership of these (topic, partition) pairs to their preferred replica at
        the next reconcile, where it is in sync."""
        self._preferred_requests.update(partitions)

    def _unclean_allowed(self, topic: str) -> bool:
        try:
            data, _ = self._client.get(layout.topic_config_path(topic))
            configs = layout.decode_topic_config(data)
        except (NoNodeError, ValueError):
            configs = {}
        value = configs.get("unclean.leader.election.enable")
        if value is None:
            return self.unclean_default
        return str(value).strip().lower() == "true"

    def _elect_leader(self, key: tuple[str, int, int], replicas: tuple[int, ...],
                      live: set[int], shutting_down: set[int]) -> None:
        """Write the partition's state if its leader or ISR should change.

        ``key`` is (topic, partition, czxid of the topic node): a topic deleted and created
        again under the same name has a new czxid, so nothing cached about the old one is
        used for the new one.
        """
        topic, partition, _ = key
        path = layout.partition_state_path(topic, partition)
        if key not in self._states:
            try:
                data, stat = self._client.get(path)
                self._states[key] = (PartitionStateNode.decode(data), stat.version)
            except NoNodeError:
                if self._ensure_partition_node(topic, partition):
                    chosen = elect(None, replicas, live, shutting_down)
                    state = PartitionStateNode(chosen.leader, 0, chosen.isr, self.epoch)
                    self._commit_guarded(key, lambda txn: txn.create(path, state.encode()))
                    self._states[key] = (state, 0)
                return
        current, version = self._states[key]
        preferred = self.auto_leader_rebalance or (topic, partition) in self._preferred_requests
        chosen = elect(current, replicas, live, shutting_down, preferred=preferred,
                       unclean=False)
        if chosen.leader == NO_LEADER and ((topic, partition) in self._unclean_requests
                                           or self._unclean_allowed(topic)):
            chosen = elect(current, replicas, live, shutting_down, unclean=True)
        if chosen.leader == current.leader and chosen.isr == current.isr:
            return
        leader_epoch = current.leader_epoch + (chosen.leader != current.leader)
        state = PartitionStateNode(chosen.leader, leader_epoch, chosen.isr, self.epoch)
        if chosen.leader != current.leader:
            log.info("controller %d: %s-%d leader %d -> %d (leader epoch %d, isr %s)",
                     self.broker_id, topic, partition, current.leader, chosen.leader,
                     leader_epoch, list(chosen.isr))
        else:
            log.info("controller %d: %s-%d isr %s -> %s", self.broker_id, topic, partition,
                     list(current.isr), list(chosen.isr))
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
        check_result, *write_results = txn.commit()
        if isinstance(check_result, BadVersionError):
            self.active = False
            self._states.clear()
            raise ControllerMovedError(f"broker {self.broker_id} is no longer controller "
                                       f"(epoch {self.epoch} was superseded)")
        failures = [r for r in write_results if isinstance(r, Exception)
                    and not isinstance(r, RolledBackError)]
        if failures:
            if key is not None:
                self._states.pop(key, None)
            raise failures[0]
        return write_results[0]

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
