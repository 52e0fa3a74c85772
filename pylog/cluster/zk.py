"""``ZkClusterMetadata``: the ClusterMetadata of a broker in cluster mode (ZooKeeper).

Construction connects to ``zookeeper.connect`` (creating the chroot), makes sure the
cluster id exists, registers the broker (refused with BrokerIdInUseError if its id is
taken), starts the watched view and enters the controller election.

Threads: reads come from the view's snapshots on the caller's thread. Kazoo's threads
deliver watches and session events; they only update the view and *request* work from
one worker thread, which registers, elects and, while controller, reconciles partition
states. Listeners added with ``add_listener`` run on kazoo's callback thread and must
return quickly.

Session handling: when the connection is suspended or the session lost, the broker stops
reporting itself as leader of anything at once; so it does when its session lease
(``lease``) runs out, which covers the moment after a long pause before the ZooKeeper
client has noticed anything. When connected again under the same
session it resumes; under a new session it first registers again and re-reads cluster
state, and only then claims leadership.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from contextlib import contextmanager
from typing import Callable, Iterator, Mapping

from kazoo.client import KazooState
from kazoo.exceptions import (BadVersionError, KazooException, NodeExistsError, NoNodeError,
                              RolledBackError)

from pylog.cluster import layout, view as view_events
from pylog.cluster.controller import Controller
from pylog.cluster.layout import BrokerRegistration
from pylog.cluster.lease import SessionLease
from pylog.cluster.metadata import NO_LEADER, PartitionState, TopicMetadata
from pylog.cluster.producer_ids import ProducerIdBlock, allocate_zk_block
from pylog.cluster.placement import (assign_new_partitions, assign_replicas,
                                     check_partition_growth, validate_topic_name)
from pylog.cluster.registry import BrokerIdInUseError, BrokerRegistry
from pylog.cluster.session import close_client, connect_client
from pylog.cluster.topic_config import alter_topic_config
from pylog.cluster.view import ClusterView
from pylog.cluster.worker import CoalescingWorker
from pylog.errors import (InvalidReplicaAssignmentError, RequestTimedOutError, TopicAlreadyExistsError,
                          UnknownTopicOrPartitionError)
from pylog.types import BrokerEndpoint, ListenerEndpoint

log = logging.getLogger(__name__)

# Partition -> replicas, of the pending reassignments.
Reassignments = dict[tuple[str, int], tuple[int, ...]]

# View changes after which the controller has to look at partition states again.
_CONTROLLER_EVENTS = {view_events.BROKERS, view_events.TOPICS, view_events.ASSIGNMENT,
                      view_events.DELETIONS, view_events.SHUTDOWNS, view_events.PREFERRED,
                      view_events.REASSIGNMENT}


class ZkClusterMetadata:
    """Cluster state of one broker, kept in ZooKeeper.

    Parameters:
        connect: ``zookeeper.connect``, ``host:port[,host:port...][/chroot]``.
        broker_id, host, port, rack: this broker and the address clients reach it at.
        listeners: every advertised listener, registered as ``endpoints`` (default: just
            ``PLAINTEXT://host:port``).
        session_timeout_ms: ``zookeeper.session.timeout.ms`` (the server may clamp it).
        connection_timeout_ms: ``zookeeper.connection.timeout.ms``, for the first connect.
        admin_timeout: how long create_topic/delete_topic wait for the controller to act.

    Raises ZooKeeperUnavailableError if ZooKeeper cannot be reached and
    BrokerIdInUseError if another live broker holds ``broker_id``.

    >>> metadata = ZkClusterMetadata("127.0.0.1:2181/pylog", 1, "127.0.0.1", 9092)
    >>> metadata.create_topic("events", num_partitions=6)
    """

    def __init__(self, connect: str, broker_id: int, host: str, port: int,
                 rack: str | None = None, *, session_timeout_ms: int = 18000,
                 connection_timeout_ms: int = 18000, admin_timeout: float = 10.0,
                 unclean_leader_election: bool = False, auto_leader_rebalance: bool = False,
                 leader_imbalance_check_s: float = 300.0,
                 listeners: tuple[ListenerEndpoint, ...] = (),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.local_broker_id = broker_id
        self._unclean_default = unclean_leader_election
        self._auto_leader_rebalance = auto_leader_rebalance
        self._imbalance_check_s = leader_imbalance_check_s
        self._admin_timeout = admin_timeout
        self._clock = clock
        self._listeners: list[Callable[[], None]] = []
        self._changed = threading.Condition()
        self._closed = False
        self._registered_session: int | None = None
        self._session_timeout = session_timeout_ms / 1000
        self._client = connect_client(connect, session_timeout_ms / 1000,
                                      connection_timeout_ms / 1000)
        try:
            self._start(BrokerRegistration(broker_id, host, port, rack, listeners))
        except BaseException:
            self._closed = True
            for part in ("_worker", "_lease"):
                if hasattr(self, part):
                    getattr(self, part).stop()
            close_client(self._client)
            raise

    def _start(self, registration: BrokerRegistration) -> None:
        for path in layout.PERSISTENT_ROOTS:
            self._client.ensure_path(path)
        self.cluster_id = self._ensure_cluster_id()
        self._registry = BrokerRegistry(self._client, registration, clock=self._clock)
        self._lease = SessionLease(self._client, self._session_timeout,
                                   f"pylog-zk-lease-{self.local_broker_id}", self._clock)
        started_at = self._clock()
        self._registry.register(stale_wait=self._session_timeout)
        self._lease.renewed(started_at)
        self._registered_session = self._session_id()
        self._controller = Controller(self._client, self.local_broker_id,
                                      unclean_default=self._unclean_default)
        self._controller.auto_leader_rebalance = False
        self._view = ClusterView(self._client, self.local_broker_id, self._on_view_change)
        self._worker = CoalescingWorker(f"pylog-zk-{self.local_broker_id}", [
            # "notify" first, so listeners see the hidden leadership before it comes back.
            ("notify", self._notify),
            ("session", self._recover_session),
            ("refresh", self._view.refresh),
            ("elect", self._elect),
            ("reconcile", self._controller.reconcile),
            ("rebalance", self._rebalance),
        ])
        self._view.set_claim_leadership(True)
        self._view.start()
        self._client.add_listener(self._on_session_state)
        self._worker.start()
        self._lease.start()
        self._worker.request("elect")
        if self._auto_leader_rebalance:
            threading.Thread(target=self._rebalance_periodically, daemon=True,
                             name=f"pylog-leader-rebalance-{self.local_broker_id}").start()

    def _session_id(self) -> int | None:
        client_id = self._client.client_id
        return client_id[0] if client_id else None

    def _ensure_cluster_id(self) -> str:
        try:
            self._client.create(layout.CLUSTER_ID,
                                layout.encode_cluster_id(layout.new_cluster_id()))
        except NodeExistsError:
            pass
        data, _ = self._client.get(layout.CLUSTER_ID)
        return layout.decode_cluster_id(data)

    # -- ClusterMetadata reads ---------------------------------------------------------

    def controller_id(self) -> int:
        return self._view.controller_id()

    def brokers(self) -> list[BrokerEndpoint]:
        return self._view.brokers()

    def topics(self) -> Mapping[str, TopicMetadata]:
        if self._lease.valid():
            return self._view.topics()
        return self._view.topics_without_own_leadership()

    def topic(self, name: str) -> TopicMetadata | None:
        if self._lease.valid():
            return self._view.topic(name)
        return self._view.topics_without_own_leadership().get(name)

    def is_controller(self) -> bool:
        return self._controller.active

    @property
    def connected(self) -> bool:
        """Whether the ZooKeeper connection is up right now."""
        return self._client.connected

    @property
    def session(self) -> tuple[int, bytes] | None:
        """The ZooKeeper session (id, password), or None while disconnected."""
        return self._client.client_id

    # -- ClusterMetadata changes -------------------------------------------------------

    def create_topic(self, name: str, num_partitions: int, replication_factor: int = 1,
                     configs: Mapping[str, str] | None = None, *,
                     assignment: Mapping[int, tuple[int, ...]] | None = None) -> TopicMetadata:
        """Place the topic over the live brokers and write its assignment.

        Waits up to ``admin_timeout`` for the controller to elect the partitions' leaders;
        partitions still without state are returned with leader -1.
        Raises TopicAlreadyExistsError, InvalidTopicError, InvalidPartitionsError,
        InvalidReplicationFactorError, and RequestTimedOutError (retriable) when
        ZooKeeper is not available.
        """
        validate_topic_name(name)
        with self._zookeeper(f"creating topic {name!r}"):
            if assignment is None:
                live = [int(child) for child in self._client.get_children(layout.BROKER_IDS)]
                assignment = assign_replicas(num_partitions, replication_factor, live)
            if self._view.topic(name) is not None or self._client.exists(
                    layout.topic_path(name)):
                raise TopicAlreadyExistsError(f"Topic {name!r} already exists.")
            topic_id = uuid.uuid4()
            self._write_topic(name, assignment, configs or {}, topic_id)
        log.info("created topic %s with assignment %s", name, assignment)
        self._wait_for(lambda: _all_led(self._view.topic(name), assignment))
        return self._view.topic(name) or _offline_topic(name, assignment, configs or {},
                                                        topic_id)

    def _write_topic(self, name: str, assignment: Mapping[int, tuple[int, ...]],
                     configs: Mapping[str, str], topic_id: uuid.UUID) -> None:
        """The assignment and the config node, in one transaction."""
        config_data = layout.encode_topic_config(configs)
        txn = self._client.transaction()
        txn.create(layout.topic_path(name), layout.encode_assignment(assignment, topic_id))
        if self._client.exists(layout.topic_config_path(name)):
            txn.set_data(layout.topic_config_path(name), config_data)
        else:
            txn.create(layout.topic_config_path(name), config_data)
        results = txn.commit()
        if isinstance(results[0], NodeExistsError):
            raise TopicAlreadyExistsError(f"Topic {name!r} already exists.")
        failures = [r for r in results if isinstance(r, Exception)
                    and not isinstance(r, RolledBackError)]
        if failures:
            raise failures[0]

    @contextmanager
    def _zookeeper(self, action: str) -> Iterator[None]:
        """Turn ZooKeeper trouble into a retriable RequestTimedOutError for the client.

        Fails at once while disconnected: kazoo would hold the request until it is
        connected again, and a broker's request thread must not wait that long.
        """
        if not self._client.connected:
            raise RequestTimedOutError(f"{action}: not connected to ZooKeeper")
        try:
            yield
        except KazooException as exc:
            raise RequestTimedOutError(f"{action}: ZooKeeper failed "
                                       f"({type(exc).__name__})") from exc

    def add_partitions(self, name: str, total: int, *,
                       assignment: Mapping[int, tuple[int, ...]] | None = None) -> TopicMetadata:
        """Grow the topic to ``total`` partitions, placing the new ones over the live
        brokers; waits up to ``admin_timeout`` for the controller to elect their leaders.

        Raises UnknownTopicOrPartitionError, InvalidPartitionsError,
        InvalidReplicationFactorError (fewer live brokers than the topic's replication
        factor) and RequestTimedOutError.
        """
        with self._zookeeper(f"adding partitions to {name!r}"):
            try:
                data, stat = self._client.get(layout.topic_path(name))
            except NoNodeError:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist") from None
            current = layout.decode_assignment(data)
            check_partition_growth(name, len(current), total)
            added = assignment
            if added is None:
                live = [int(child) for child in self._client.get_children(layout.BROKER_IDS)]
                added = assign_new_partitions(current, total, live)
            elif sorted(added) != list(range(len(current), total)):
                raise InvalidReplicaAssignmentError(
                    f"the assignment is for partitions {sorted(added)}, but {name!r} has "
                    f"{len(current)} now")
            assignment = dict(current)
            assignment.update(added)
            try:
                self._client.set(layout.topic_path(name),
                                 layout.replace_assignment(data, assignment),
                                 version=stat.version)
            except BadVersionError:
                raise RequestTimedOutError(f"the assignment of {name!r} changed meanwhile; "
                                           "try again") from None
        log.info("topic %s grows from %d to %d partitions", name, len(current), total)
        self._wait_for(lambda: _all_led(self._view.topic(name), assignment))
        return self._view.topic(name)

    def alter_topic_configs(self, name: str,
                            alter: Callable[[dict[str, str]], dict[str, str]]) -> dict[str, str]:
        """Rewrite ``/config/topics/<name>`` with ``alter(current overrides)``.

        Every broker's watch applies the change; this one waits up to ``admin_timeout``
        until its own view shows it, so its next answers do. Raises
        UnknownTopicOrPartitionError, RequestTimedOutError, or what ``alter`` raises.
        """
        with self._zookeeper(f"altering the configs of topic {name!r}"):
            configs = alter_topic_config(self._client, name, alter)
        log.info("topic %s now has configs %s", name, configs)
        self._wait_for(lambda: (topic := self._view.topic(name)) is None
                       or dict(topic.configs) == configs)
        return configs

    def delete_topic(self, name: str) -> None:
        """Ask the controller to delete the topic; waits up to ``admin_timeout`` for it.

        Raises UnknownTopicOrPartitionError if it does not exist.
        """
        with self._zookeeper(f"deleting topic {name!r}"):
            if self._view.topic(name) is None and not self._client.exists(
                    layout.topic_path(name)):
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            try:
                self._client.create(layout.delete_topic_path(name))
            except NodeExistsError:
                pass
        self._wait_for(lambda: self._view.topic(name) is None
                       and not self._view.marked_for_deletion(name))

    def allocate_producer_id_block(self) -> ProducerIdBlock:
        """Take the next block of producer ids (:mod:`pylog.cluster.producer_ids`); raises
        RequestTimedOutError (retriable) while ZooKeeper is unavailable."""
        with self._zookeeper("allocate a producer id block"):
            return allocate_zk_block(self._client, self.local_broker_id)

    def add_listener(self, callback: Callable[[], None]) -> None:
        self._listeners.append(callback)

    # -- replication -------------------------------------------------------------------

    def update_isr(self, topic: str, partition: int, leader_epoch: int,
                   isr: tuple[int, ...]) -> bool:
        """As the partition's leader in ``leader_epoch``, write a new ISR.

        A conditional write on the state node's version (0.8's zkVersion check): it only
        happens if the node still names this broker as leader in that epoch and nobody
        (controller or an earlier leader) wrote it since it was read. False if refused;
        the caller waits for the state the watches deliver. Raises RequestTimedOutError
        when ZooKeeper is not reachable.
        """
        path = layout.partition_state_path(topic, partition)
        with self._zookeeper(f"updating the ISR of {topic}-{partition}"):
            try:
                data, stat = self._client.get(path)
            except NoNodeError:
                return False
            node = layout.PartitionStateNode.decode(data)
            if node.leader != self.local_broker_id or node.leader_epoch != leader_epoch:
                return False
            updated = layout.PartitionStateNode(node.leader, node.leader_epoch, tuple(isr),
                                                node.controller_epoch)
            try:
                self._client.set(path, updated.encode(), version=stat.version)
            except (BadVersionError, NoNodeError):
                return False
        log.info("broker %d: %s-%d isr %s -> %s", self.local_broker_id, topic, partition,
                 list(node.isr), list(isr))
        return True

    def begin_controlled_shutdown(self) -> None:
        """Tell the controller this broker is going away (an ephemeral node), so it moves
        this broker's leaderships to other in-sync replicas and drops it from ISRs."""
        with self._zookeeper("starting controlled shutdown"):
            try:
                self._client.create(layout.controlled_shutdown_path(self.local_broker_id),
                                    ephemeral=True)
            except NodeExistsError:
                pass

    def reassignments(self) -> tuple[Reassignments, Reassignments]:
        """The pending reassignments: (target replicas, replicas before it where known)."""
        with self._zookeeper("listing partition reassignments"):
            try:
                data, _ = self._client.get(layout.REASSIGN_PARTITIONS)
            except NoNodeError:
                return {}, {}
        return _decode_reassignments(data)

    def alter_reassignments(self, change: Callable[[Reassignments, Reassignments], None]
                            ) -> None:
        """Rewrite ``/admin/reassign_partitions``: ``change(targets, originals)`` edits
        them in place (whatever it raises leaves the node as it was). A read-modify-write
        conditional on the node's version, so a controller finishing a partition
        meanwhile is not undone."""
        with self._zookeeper("altering partition reassignments"):
            for _ in range(10):
                try:
                    data, stat = self._client.get(layout.REASSIGN_PARTITIONS)
                    targets, originals = _decode_reassignments(data)
                except NoNodeError:
                    stat, targets, originals = None, {}, {}
                change(targets, originals)
                encoded = layout.encode_reassignment(targets, originals)
                try:
                    if stat is None:
                        if targets:
                            self._client.create(layout.REASSIGN_PARTITIONS, encoded,
                                                makepath=True)
                    elif targets:
                        self._client.set(layout.REASSIGN_PARTITIONS, encoded,
                                         version=stat.version)
                    else:
                        self._client.delete(layout.REASSIGN_PARTITIONS, version=stat.version)
                    return
                except (BadVersionError, NodeExistsError, NoNodeError):
                    continue  # the controller (or another broker) wrote it meanwhile
        raise RequestTimedOutError("the pending reassignments kept changing; try again")

    def set_unclean_leader_election_default(self, enabled: bool) -> None:
        """``unclean.leader.election.enable`` for topics without their own, changed while
        the broker runs (a dynamic broker config). When this broker is the controller and
        it is turned on, partitions left without a leader are elected again at once."""
        self._unclean_default = enabled
        self._controller.unclean_default = enabled
        if enabled:
            self._worker.request("reconcile")

    def request_preferred_election(self, partitions, unclean: bool = False) -> None:
        """Ask the controller (through ZooKeeper) to move these partitions' leadership to
        their preferred replicas where those are in sync; with ``unclean``, to elect a
        live replica of those without a leader even if it is out of sync."""
        kind = "an unclean" if unclean else "a preferred"
        with self._zookeeper(f"requesting {kind} leader election"):
            data = layout.encode_preferred_election(partitions)
            try:
                self._client.create(layout.UNCLEAN_ELECTION if unclean
                                    else layout.PREFERRED_ELECTION, data)
            except NodeExistsError:
                raise RequestTimedOutError(f"{kind} leader election is already running; "
                                           "try again") from None

    def close(self) -> None:
        """Leave the cluster: the registration (and controllership) go with the session."""
        if self._closed:
            return
        self._closed = True
        self._client.remove_listener(self._on_session_state)
        self._worker.stop()
        self._lease.stop()
        close_client(self._client)

    # -- internals -----------------------------------------------------------------------

    def _wait_for(self, condition: Callable[[], bool]) -> bool:
        deadline = self._clock() + self._admin_timeout
        with self._changed:
            while not condition():
                remaining = deadline - self._clock()
                if remaining <= 0:
                    return False
                self._changed.wait(min(remaining, 0.5))
        return True

    def _on_view_change(self, kind: str) -> None:
        if self._closed:
            return
        if kind == view_events.STALE:
            self._worker.request("refresh")
            return
        if kind in _CONTROLLER_EVENTS and self._controller.active:
            self._worker.request("reconcile")
        if kind == view_events.STATE and self._controller.active:
            self._controller.forget_states()
            if self._view.reassignment_pending:
                self._worker.request("reconcile")
        if kind == view_events.CONTROLLER and (
                self._view.controller_id() == NO_LEADER or self._controller.active):
            self._worker.request("elect")
        self._notify()

    def _rebalance_periodically(self) -> None:
        """``auto.leader.rebalance.enable``: every ``leader.imbalance.check.interval.seconds``
        the controller moves leadership back to preferred replicas that are in sync."""
        stop = threading.Event()
        while not self._closed and not stop.wait(self._imbalance_check_s):
            if self._controller.active:
                self._worker.request("rebalance")

    def _rebalance(self) -> None:
        self._controller.auto_leader_rebalance = True
        try:
            self._controller.reconcile()
        finally:
            self._controller.auto_leader_rebalance = False

    def _notify(self) -> None:
        with self._changed:
            self._changed.notify_all()
        for callback in list(self._listeners):
            try:
                callback()
            except Exception:  # noqa: BLE001 -- a listener's bug must not stop the watches
                log.exception("cluster metadata listener failed")

    def _on_session_state(self, state: str) -> None:
        """Kazoo's connection thread: no blocking calls here."""
        if state == KazooState.CONNECTED:
            self._worker.request("session")
            return
        if state == KazooState.LOST:
            self._controller.resign()
            self._registered_session = None
        if self._view.set_claim_leadership(False):
            log.warning("broker %d: ZooKeeper session %s; not claiming leadership",
                        self.local_broker_id, state.lower())
            self._worker.request("notify")

    def _recover_session(self) -> None:
        if not self._client.connected:
            return
        session_id = self._session_id()
        if session_id is None:
            return
        if self._registered_session != session_id:
            self._view.set_claim_leadership(False)
            started_at = self._clock()
            try:
                self._registry.register(stale_wait=self._session_timeout)
            except BrokerIdInUseError:
                log.error("broker %d cannot register again: its id was taken meanwhile",
                          self.local_broker_id, exc_info=True)
                return
            self._view.refresh()
            self._lease.renewed(started_at)
            self._registered_session = session_id
            log.info("broker %d registered again under a new ZooKeeper session",
                     self.local_broker_id)
        if self._view.set_claim_leadership(True):
            self._notify()
        self._elect()

    def _elect(self) -> None:
        if self._registered_session is None or self._registered_session != self._session_id():
            return
        if self._controller.elect():
            self._controller.reconcile()


def _decode_reassignments(data: bytes):
    try:
        return layout.decode_reassignment(data), layout.decode_reassignment_originals(data)
    except (ValueError, KeyError, TypeError):
        log.warning("%s is unreadable; taken as no reassignment", layout.REASSIGN_PARTITIONS)
        return {}, {}


def _all_led(topic: TopicMetadata | None, assignment: Mapping[int, tuple[int, ...]]) -> bool:
    """Every partition of the new topic has a state node written by the controller."""
    return topic is not None and len(topic.partitions) == len(assignment) and all(
        state.leader != NO_LEADER or state.isr for state in topic.partitions.values())


def _offline_topic(name: str, assignment: Mapping[int, tuple[int, ...]],
                   configs: Mapping[str, str], topic_id: uuid.UUID) -> TopicMetadata:
    return TopicMetadata(name, {p: PartitionState(p, NO_LEADER, 0, replicas, ())
                                for p, replicas in assignment.items()}, dict(configs),
                         topic_id)
