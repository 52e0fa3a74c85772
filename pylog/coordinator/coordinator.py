"""The group coordinator: owns the groups of the ``__consumer_offsets`` partitions this
broker leads, loads them from the log, persists their changes and runs their timers.

Every broker is a coordinator, as in Kafka. The coordinator of a group is the leader of
partition ``partition_for(group, N)``. When this broker becomes leader of such a
partition (or at start, standalone) the timer thread reads the partition back and
rebuilds its groups and offsets; requests for them get COORDINATOR_LOAD_IN_PROGRESS
meanwhile. When leadership moves away the groups are dropped, and their waiting
requests answered NOT_COORDINATOR, so clients go to the new leader, which loads the
same records.

The protocol logic lives in ``membership`` (JoinGroup, SyncGroup, Heartbeat,
LeaveGroup), ``offsets`` (OffsetCommit, OffsetFetch, deletion, expiry) and
``txn_offsets`` (TxnOffsetCommit and the transaction markers that settle it); this module
gives them the group table, the lock, the clock and ``persist``. Transaction markers
written to ``__consumer_offsets`` arrive through ``on_transaction_completed`` from the
thread that wrote them and are applied on the coordinator's thread. One lock guards all
groups: handlers run on the network threads and hold it for microseconds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Callable

from pylog.broker.config import BrokerConfig
from pylog.broker.partitions import AppendWaiters, PartitionLogs
from pylog.cluster.metadata import ClusterMetadata
from pylog.coordinator.codes import (
    COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR)
from pylog.coordinator.group import Group, GroupState, Member
from pylog.coordinator.internal_topic import AppendQueue
from pylog.coordinator.records import partition_for
from pylog.coordinator.replay import OffsetsReplay
from pylog.coordinator.store import (
    OFFSETS_TOPIC, CoordinatorNotAvailableError, NotCoordinatorError, OffsetsTopicStore,
    TxnProducer, offsets_tp)
from pylog.errors import KafkaError

log = logging.getLogger(__name__)

TICK_S = 0.05


class GroupCoordinator:
    """Groups of this broker's ``__consumer_offsets`` partitions (see the module doc).

    ``clock`` gives monotonic seconds for timeouts, ``wall_ms`` epoch milliseconds for
    what is written (commit timestamps) and for offset retention; both can be injected.
    """

    def __init__(self, config: BrokerConfig, metadata: ClusterMetadata, logs: PartitionLogs,
                 waiters: AppendWaiters, clock: Callable[[], float] = time.monotonic,
                 wall_ms: Callable[[], int] | None = None) -> None:
        from pylog.coordinator.membership import Membership
        from pylog.coordinator.offsets import OffsetManager
        from pylog.coordinator.txn_offsets import TxnOffsetManager

        self.config = config
        self.metadata = metadata
        self.clock = clock
        self.wall_ms = wall_ms or (lambda: int(time.time() * 1000))
        self.store = OffsetsTopicStore(logs, metadata, config["offsets.commit.timeout.ms"],
                                       config["offsets.load.buffer.size"], clock)
        self.lock = threading.RLock()
        self.appends = AppendQueue(self.store, waiters, self.lock, clock, _coordinator_error)
        self.groups: dict[str, Group] = {}
        self._loaded: dict[int, int] = {}  # partition -> leader epoch it was loaded in
        self._loading: set[int] = set()
        # (partition, producer id, commit, marker offset), from the marker writer's thread
        self._markers: deque[tuple[int, int, bool, int]] = deque()
        self._stopping = threading.Event()
        self._kick = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_expiry = 0.0
        self._known_topics: set[str] = set(metadata.topics())
        self._deleted_topics: set[str] = set()
        self.membership = Membership(self)
        self.offsets = OffsetManager(self)
        self.txn_offsets = TxnOffsetManager(self)
        metadata.add_listener(self._on_metadata_change)

    # -- life cycle ---------------------------------------------------------------------

    def start(self) -> "GroupCoordinator":
        self._thread = threading.Thread(target=self._run, name="pylog-group-coordinator",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._kick.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self.lock:
            for partition in list(self._loaded):
                self._unload(partition)
        self.appends.flush_wakes()

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._kick.wait(TICK_S)
            self._kick.clear()
            try:
                self._follow_leadership()
                with self.lock:
                    self.appends.drain()
                    self._apply_markers()
                    if self._deleted_topics:
                        deleted, self._deleted_topics = self._deleted_topics, set()
                        self.offsets.forget_topics(deleted)
                    self.membership.tick(self.clock())
                    if self.clock() >= self._next_expiry:
                        self._next_expiry = (self.clock()
                                             + self.config["offsets.retention.check.interval.ms"]
                                             / 1000)
                        self.offsets.expire(self.wall_ms())
            except Exception:  # noqa: BLE001 -- the timer thread must survive a bad round
                log.exception("group coordinator round failed")
            self.appends.flush_wakes()

    def _on_metadata_change(self) -> None:
        """Note topics that were deleted; their committed offsets go at the next round
        (Kafka removes a deleted topic's offsets from every group too)."""
        current = set(self.metadata.topics())
        with self.lock:
            self._deleted_topics |= self._known_topics - current
            self._known_topics = current
        if self._deleted_topics:
            self._kick.set()

    def on_transaction_completed(self, topic: str, partition: int, producer_id: int,
                                 commit: bool, marker_offset: int) -> None:
        """A COMMIT (``commit``) or ABORT marker of ``producer_id`` was written at
        ``marker_offset`` and replicated. Any thread may call this; the marker is applied
        at the coordinator's next round, which it starts at once."""
        if topic != OFFSETS_TOPIC:
            return
        self._markers.append((partition, producer_id, commit, marker_offset))
        self._kick.set()

    def _apply_markers(self) -> None:
        """Settle pending transactional offsets (call with the lock held). A partition
        not loaded here is skipped: whoever loads it reads the marker from the log."""
        while self._markers:
            partition, producer_id, commit, marker_offset = self._markers.popleft()
            if partition in self._loaded:
                self.txn_offsets.on_marker(partition, producer_id, commit, marker_offset)

    # -- the offsets topic and who coordinates what -------------------------------------

    def num_partitions(self) -> int:
        return self.store.num_partitions() or self.config["offsets.topic.num.partitions"]

    def partition_of(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions())

    def ensure_offsets_topic(self) -> bool:
        """Create ``__consumer_offsets`` on first use; False if it cannot exist yet."""
        if self.metadata.topic(OFFSETS_TOPIC) is not None:
            return True
        created = self.store.create_if_missing(
            self.config["offsets.topic.num.partitions"],
            self.config["offsets.topic.replication.factor"],
            {"segment.bytes": str(self.config["offsets.topic.segment.bytes"])})
        if created:
            self._kick.set()
        return created

    def coordinator_of(self, group_id: str):
        """The live broker leading the group's partition, or None."""
        if not self.ensure_offsets_topic():
            return None
        return self.store.leader_of(self.partition_of(group_id))

    def lookup(self, group_id: str, create: bool = False) -> tuple[Group | None, int]:
        """The group (None if unknown) and 0, or None and the error that says why this
        broker cannot answer for it. Call with the lock held."""
        if self.store.num_partitions() is None:
            return None, COORDINATOR_NOT_AVAILABLE
        partition = self.partition_of(group_id)
        if partition in self._loading:
            return None, COORDINATOR_LOAD_IN_PROGRESS
        if partition not in self._loaded:
            if partition in self.store.led_partitions():
                self._kick.set()
                return None, COORDINATOR_LOAD_IN_PROGRESS
            return None, NOT_COORDINATOR
        group = self.groups.get(group_id)
        if group is not None:
            self.membership.run_timers(group, self.clock())
        if group is None and create:
            group = Group(group_id, partition, state_timestamp_ms=self.wall_ms())
            self.groups[group_id] = group
        return group, 0

    def owned_groups(self) -> list[Group]:
        return [g for g in self.groups.values() if g.partition in self._loaded]

    def _follow_leadership(self) -> None:
        led = self.store.led_partitions()
        with self.lock:
            gone = [p for p, epoch in self._loaded.items() if led.get(p) != epoch]
            for partition in gone:
                self._unload(partition)
            todo = [(p, e) for p, e in led.items() if p not in self._loaded]
            self._loading.update(p for p, _ in todo)
        for partition, epoch in todo:
            try:
                self._load(partition, epoch)
            except Exception:  # noqa: BLE001 -- leave it unloaded; the next round retries
                log.exception("loading groups of %s failed", offsets_tp(partition))
            finally:
                with self.lock:
                    self._loading.discard(partition)

    def _load(self, partition: int, epoch: int) -> None:
        started = self.clock()
        replay = OffsetsReplay(str(offsets_tp(partition)))
        for header, records in self.store.read_batches(partition):
            replay.apply(header, records)
        now = self.clock()
        pending_by_group = replay.pending_by_group()
        with self.lock:
            for group_id in replay.group_ids():
                value = replay.group_values.get(group_id)
                committed = replay.committed.get(group_id)
                pending = pending_by_group.get(group_id, {})
                if value is None and not committed and not pending:
                    continue
                group = self._restore(group_id, partition, value, now)
                group.offsets = dict(committed or {})
                group.pending_txn_offsets = pending
                self.groups[group_id] = group
                self.txn_offsets.index_group(group)
            self._loaded[partition] = epoch
        log.info("loaded %s (leader epoch %d): %d records, %d groups, in %.3f s",
                 offsets_tp(partition), epoch, replay.records,
                 sum(1 for g in self.groups.values() if g.partition == partition),
                 self.clock() - started)

    def _restore(self, group_id: str, partition: int, value, now: float) -> Group:
        group = Group(group_id, partition)
        if value is None:
            group.state_timestamp_ms = self.wall_ms()
            return group
        group.protocol_type = value.protocol_type or None
        group.generation = value.generation
        group.protocol_name = value.protocol
        group.leader_id = value.leader
        group.state_timestamp_ms = value.current_state_timestamp
        for m in value.members:
            member = Member(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                            m.rebalance_timeout if m.rebalance_timeout > 0 else m.session_timeout,
                            m.session_timeout, value.protocol_type,
                            [(value.protocol or "", m.subscription)], last_heard=now,
                            assignment=m.assignment)
            group.members[m.member_id] = member
            if m.group_instance_id:
                group.static_members[m.group_instance_id] = m.member_id
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY
        return group

    def _unload(self, partition: int) -> None:
        unloaded = set()
        for group_id, group in list(self.groups.items()):
            if group.partition != partition:
                continue
            for member in group.members.values():
                self.membership.answer_waiting(member, NOT_COORDINATOR)
            group.state = GroupState.DEAD
            del self.groups[group_id]
            unloaded.add(group_id)
        self.txn_offsets.forget_partition(partition, unloaded)
        self._loaded.pop(partition, None)
        self.appends.wake(partition)
        log.info("unloaded the groups of %s", offsets_tp(partition))

    # -- persistence ----------------------------------------------------------------------

    def persist(self, partition: int, records: list[tuple[bytes, bytes | None]],
                on_done: Callable[[int], None], *, producer: TxnProducer | None = None,
                on_appended: Callable[[int], None] | None = None) -> None:
        """Append records to the group's partition (as ``producer``'s transactional batch
        if given); ``on_appended(log_offset)`` runs once they are in the leader's log,
        ``on_done(error_code)`` (with the lock held) once the in-sync replicas have them,
        or with the error."""
        try:
            ticket = self.store.append(partition, records, self.wall_ms(), producer)
        except KafkaError as error:
            self.appends.fail(partition, error, on_done)
            return
        if on_appended is not None:
            on_appended(ticket.base_offset)
        self.appends.add(ticket, on_done)

    def poll(self) -> None:
        """Called by parked requests when woken: finish what can be finished."""
        self.appends.poll()

    def wake(self, partition: int) -> None:
        """Wake the requests parked on ``partition`` once the lock is released."""
        self.appends.wake(partition)

    def run_locked(self, action: Callable):
        """Run ``action()`` under the lock, then wake the requests it completed."""
        return self.appends.run_locked(action)


def _coordinator_error(error: KafkaError) -> int:
    """What a group client is told about a failed write (Kafka's mapping)."""
    if isinstance(error, (NotCoordinatorError, CoordinatorNotAvailableError)):
        return error.errno
    if error.errno in (6, 3):  # NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION
        return NOT_COORDINATOR
    if error.errno in (19, 20, 7):  # NOT_ENOUGH_REPLICAS(_AFTER_APPEND), REQUEST_TIMED_OUT
        return COORDINATOR_NOT_AVAILABLE
    return error.errno
