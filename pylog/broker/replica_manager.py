"""The replica manager: this broker's role for every partition it holds a replica of.

It turns the cluster state ZooKeeper holds (leader, leader epoch, ISR per partition, as the
view delivers it) into local roles, on its own thread so watch callbacks never wait:

- **Leader** in epoch E: the leader-epoch cache gets (E, log end); produce appends stamp
  E into each batch; follower fetches report each follower's log end, from which the
  high watermark (smallest log end in the ISR) advances; a periodic check writes ISR
  shrinks (a follower not caught up for ``replica.lag.time.max.ms``) and expansions (a
  follower that reached the high watermark) to ZooKeeper with a conditional update.
  Time this broker itself did not run (a pause) is not counted as its followers' lag.
- **Follower** of broker L in epoch E: the partition moves to the fetcher thread for L,
  which truncates (OffsetForLeaderEpoch) and then fetches.
- **Offline** (no leader, or this broker's session is in doubt): neither.

A replica removed from a partition's assignment (reassignment) stops and its log is
deleted. Requests waiting on a partition (acks=all produces, fetches) are woken after
every role, ISR and high watermark change.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from pylog.broker.partitions import PartitionLogs, check_leader_epoch
from pylog.broker.replica import PartitionReplica, Role
from pylog.broker.replica_fetcher import FetchTarget, ReplicaFetcher
from pylog.broker.replication_quota import UNLIMITED, ReplicationQuota, is_throttled
from pylog.cluster.metadata import NO_LEADER
from pylog.errors import (
    NotEnoughReplicasError, NotLeaderOrFollowerError, PylogError, UnknownTopicOrPartitionError)
from pylog.log import AppendInfo, Log
from pylog.types import BrokerEndpoint, TopicPartition

log = logging.getLogger(__name__)


class ReplicaManager:
    """Roles, fetchers and ISR maintenance of one broker (cluster mode only).

    Parameters:
        logs: the broker's PartitionLogs (opens logs with their topic configs).
        metadata: a ZkClusterMetadata (topics(), brokers(), update_isr()).
        lag_time_ms: ``replica.lag.time.max.ms``.
        listener: the inter-broker listener's name; fetchers connect to leaders there.
        security: the client settings (librdkafka names) fetchers use on that listener.
        wake: called with a TopicPartition after any change waiting requests care about.
    """

    def __init__(self, logs: PartitionLogs, metadata, *, lag_time_ms: int = 30000,
                 fetch_wait_max_ms: int = 500, fetch_max_bytes: int = 10 * 1024 * 1024,
                 fetch_partition_max_bytes: int = 1024 * 1024, fetch_backoff_ms: int = 200,
                 wake: Callable[[TopicPartition], None] = lambda tp: None,
                 listener: str = "PLAINTEXT", security=None,
                 leader_throttle_rate: int = UNLIMITED, follower_throttle_rate: int = UNLIMITED,
                 quota_samples: int = 11, quota_window_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logs = logs
        self.listener = listener
        self.metadata = metadata
        self.local_id = metadata.local_broker_id
        self._lag_s = lag_time_ms / 1000
        # Replication throttles (KIP-73): what this broker sends as a leader and fetches
        # as a follower for the replicas its topics' throttled-replicas configs name.
        self.leader_quota = ReplicationQuota(leader_throttle_rate, quota_samples,
                                             quota_window_s, clock)
        self.follower_quota = ReplicationQuota(follower_throttle_rate, quota_samples,
                                               quota_window_s, clock)
        self._fetch_settings = dict(max_wait_ms=fetch_wait_max_ms, max_bytes=fetch_max_bytes,
                                    partition_max_bytes=fetch_partition_max_bytes,
                                    backoff_ms=fetch_backoff_ms, security=security,
                                    quota=self.follower_quota, throttles=self.follower_throttles)
        self._wake = wake
        self._clock = clock
        self._lock = threading.RLock()
        self._apply_lock = threading.RLock()  # one role change at a time
        self._replicas: dict[TopicPartition, PartitionReplica] = {}
        self._fetchers: dict[int, ReplicaFetcher] = {}
        self._signal = threading.Event()  # wakes the state-change thread
        self._metadata_changed = True
        self._isr_due = False
        self._stopping = False
        self._shutting_down = False
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"pylog-replica-manager-{self.local_id}")

    def start(self) -> "ReplicaManager":
        self._signal.set()  # take up the roles the view already holds at once
        self._thread.start()
        return self

    def on_metadata_change(self) -> None:
        """A ClusterMetadata listener: runs on kazoo's thread, so it only signals."""
        self._metadata_changed = True
        self._signal.set()

    def set_security(self, security) -> None:
        """New client settings for the inter-broker listener (a rotated keystore or
        truststore): every fetcher's next connection uses them; open ones are kept, as
        Kafka keeps them."""
        with self._lock:
            self._fetch_settings["security"] = security
            fetchers = list(self._fetchers.values())
        for fetcher in fetchers:
            fetcher.set_security(security)

    def begin_shutdown(self) -> None:
        """Controlled shutdown: stop following (as Kafka's controller stops a departing
        broker's follower replicas), so leaders do not take it back into their ISRs."""
        with self._lock:
            self._shutting_down = True
            fetchers = list(self._fetchers.values())
            self._fetchers.clear()
        for fetcher in fetchers:
            fetcher.stop()

    def stop(self) -> None:
        self._stopping = True
        self._signal.set()
        self._thread.join(timeout=10)
        with self._lock:
            fetchers = list(self._fetchers.values())
            self._fetchers.clear()
        for fetcher in fetchers:
            fetcher.stop()
        for fetcher in fetchers:
            fetcher.join(timeout=10)

    # -- the state-change thread ----------------------------------------------------------

    def _run(self) -> None:
        interval = max(0.05, min(self._lag_s / 2, 1.0))
        next_isr_check = self._clock() + interval
        while not self._stopping:
            self._signal.wait(max(0.0, next_isr_check - self._clock()))
            self._signal.clear()
            if self._stopping:
                break
            late = self._clock() - next_isr_check
            if late > interval:
                self._excuse_stall(late)
            try:
                if self._metadata_changed:
                    self._metadata_changed = False
                    self._apply_metadata()
                if self._isr_due or self._clock() >= next_isr_check:
                    self._isr_due = False
                    next_isr_check = self._clock() + interval
                    self._maintain_isr()
            except Exception:  # noqa: BLE001 -- ZooKeeper trouble: try again next round
                log.warning("broker %d: replica state change failed; will retry",
                            self.local_id, exc_info=True)
                self._metadata_changed = True
                time.sleep(0.2)

    def _apply_metadata(self) -> None:
        topics = self.metadata.topics()
        now = self._clock()
        wanted: set[TopicPartition] = set()
        for name, topic in topics.items():
            for partition, state in topic.partitions.items():
                if self.local_id not in state.replicas:
                    continue
                tp = TopicPartition(name, partition)
                wanted.add(tp)
                self._apply_partition(tp, state, now)
        with self._lock:
            dropped = [tp for tp in self._replicas if tp not in wanted]
        for tp in dropped:
            self._drop(tp, delete=tp.topic in topics)
        for tp in self.logs.local_partitions():
            # A stray: moved away by a reassignment while this broker was down.
            if tp not in wanted and tp not in dropped and tp.topic in topics \
                    and tp.partition in topics[tp.topic].partitions:
                log.info("broker %d: %s is not assigned here; deleting its log",
                         self.local_id, tp)
                self.logs.delete_log(tp.topic, tp.partition)

    def _apply_partition(self, tp: TopicPartition, state, now: float) -> None:
        with self._apply_lock:
            self._apply_partition_locked(tp, state, now)

    def _apply_partition_locked(self, tp: TopicPartition, state, now: float) -> None:
        replica = self._replica(tp)
        if replica is None:
            return
        if state.leader == self.local_id:
            if replica.role is Role.LEADER and replica.leader_epoch == state.leader_epoch:
                if replica.apply_state(state.leader_epoch, state.isr, state.replicas, now):
                    self._wake(tp)
                return
            if replica.role is Role.FOLLOWER:
                self._stop_fetching(tp, replica.leader)
            if replica.become_leader(state.leader_epoch, state.replicas, state.isr, now):
                log.info("broker %d: leader of %s in epoch %d (isr %s, log end %d)",
                         self.local_id, tp, state.leader_epoch, list(state.isr),
                         replica.log.log_end_offset)
                self._wake(tp)
        elif state.leader != NO_LEADER:
            previous_leader = replica.leader if replica.role is Role.FOLLOWER else None
            if replica.become_follower(state.leader, state.leader_epoch, state.replicas,
                                       state.isr):
                if previous_leader is not None:
                    self._stop_fetching(tp, previous_leader)
                log.info("broker %d: following broker %d for %s in epoch %d",
                         self.local_id, state.leader, tp, state.leader_epoch)
                if not self._shutting_down:
                    self._fetcher(state.leader).add(tp, FetchTarget(replica.log,
                                                                    state.leader_epoch))
                self._wake(tp)
        else:
            if replica.role is Role.FOLLOWER:
                self._stop_fetching(tp, replica.leader)
            if replica.go_offline():
                self._wake(tp)

    def _replica(self, tp: TopicPartition) -> PartitionReplica | None:
        with self._lock:
            replica = self._replicas.get(tp)
            if replica is None:
                try:
                    partition_log = self.logs.open_log(tp.topic, tp.partition)
                except PylogError:
                    log.warning("broker %d: cannot open the log of %s", self.local_id, tp,
                                exc_info=True)
                    return None
                replica = self._replicas[tp] = PartitionReplica(tp, partition_log,
                                                                self.local_id)
            return replica

    def _drop(self, tp: TopicPartition, delete: bool) -> None:
        with self._lock:
            replica = self._replicas.pop(tp, None)
        if replica is None:
            return
        if replica.role is Role.FOLLOWER:
            self._stop_fetching(tp, replica.leader)
        replica.go_offline()
        self._wake(tp)
        if delete:
            log.info("broker %d: %s is no longer assigned here; deleting its log",
                     self.local_id, tp)
            self.logs.delete_log(tp.topic, tp.partition)

    def _fetcher(self, leader_id: int) -> ReplicaFetcher:
        with self._lock:
            fetcher = self._fetchers.get(leader_id)
            if fetcher is None or not fetcher.is_alive():
                fetcher = ReplicaFetcher(self.local_id, leader_id, self._address_of,
                                         clock=self._clock, **self._fetch_settings)
                self._fetchers[leader_id] = fetcher
                fetcher.start()
            return fetcher

    def _stop_fetching(self, tp: TopicPartition, leader_id: int) -> None:
        with self._lock:
            fetcher = self._fetchers.get(leader_id)
        if fetcher is not None:
            fetcher.remove(tp)

    def _address_of(self, broker_id: int) -> BrokerEndpoint | None:
        for broker in self.metadata.brokers():
            if broker.broker_id == broker_id:
                return broker.on_listener(self.listener)
        return None

    def _excuse_stall(self, seconds: float) -> None:
        """This broker did not run for ``seconds`` (SIGSTOP, a long stall): its followers
        could not fetch from it meanwhile, so that time does not count as their lag."""
        log.info("broker %s: stalled for %.1f s; followers keep their place in the ISR",
                 self.local_id, seconds)
        now = self._clock()
        with self._lock:
            replicas = list(self._replicas.values())
        for replica in replicas:
            replica.excuse_stall(seconds, now)

    def _maintain_isr(self) -> None:
        now = self._clock()
        with self._lock:
            replicas = list(self._replicas.values())
        for replica in replicas:
            wanted = replica.isr_change_due(now, self._lag_s)
            if wanted is None:
                continue
            epoch = replica.leader_epoch
            if self.metadata.update_isr(replica.tp.topic, replica.tp.partition, epoch, wanted):
                replica.isr_written(epoch, wanted)
                self._wake(replica.tp)

    # -- used by request handlers ---------------------------------------------------------

    def leader_replica(self, tp: TopicPartition, current_leader_epoch: int = -1) -> PartitionReplica:
        """The replica of a partition this broker leads.

        Raises UnknownTopicOrPartitionError, NotLeaderOrFollowerError, and
        FencedLeaderEpochError / UnknownLeaderEpochError when the request names another
        epoch.
        """
        replica = self._current(tp)
        if replica is None:
            self._refuse_missing(tp)
        if replica.role is not Role.LEADER:
            raise NotLeaderOrFollowerError(f"broker {self.local_id} does not lead {tp}")
        check_leader_epoch(tp, current_leader_epoch, replica.leader_epoch)
        return replica

    def _current(self, tp: TopicPartition) -> PartitionReplica | None:
        """The replica, with the role the metadata view gives it right now.

        The state-change thread applies changes a moment after the view has them; a
        request arriving in between applies its partition's change itself, so this
        broker never refuses (or accepts) a request on a role the cluster has moved past.
        """
        replica = self._replicas.get(tp)
        topic = self.metadata.topic(tp.topic)
        state = None if topic is None else topic.partitions.get(tp.partition)
        if state is None or self.local_id not in state.replicas:
            return replica
        if replica is None or replica.leader_epoch != state.leader_epoch or (
                (state.leader == self.local_id) != (replica.role is Role.LEADER)):
            self._apply_partition(tp, state, self._clock())
            replica = self._replicas.get(tp)
        return replica

    def local_replica(self, tp: TopicPartition) -> PartitionReplica:
        """The replica of a partition this broker holds, in any role."""
        replica = self._replicas.get(tp)
        if replica is None:
            self._refuse_missing(tp)
        return replica

    def _refuse_missing(self, tp: TopicPartition) -> None:
        """Raise for a partition with no local replica: UNKNOWN_TOPIC_OR_PARTITION if it
        does not exist, else NOT_LEADER_OR_FOLLOWER."""
        meta = self.metadata.topic(tp.topic)
        if meta is None or tp.partition not in meta.partitions:
            raise UnknownTopicOrPartitionError(f"{tp} does not exist")
        raise NotLeaderOrFollowerError(f"broker {self.local_id} holds no replica of {tp}")

    def append_as_leader(self, tp: TopicPartition, records, acks: int, *,
                         allow_transactional: bool = True
                         ) -> tuple[AppendInfo, PartitionReplica, int]:
        """Append a produce request's batches as leader, stamping the leader epoch; returns
        what was appended, the replica and the epoch it was appended in.

        With acks=-1, refuses with NotEnoughReplicasError (nothing written) while the
        ISR is smaller than the topic's ``min.insync.replicas``.
        """
        return self._append_as_leader(tp, acks == -1, lambda partition_log, epoch:
                                      partition_log.append(records, leader_epoch=epoch,
                                                           allow_transactional=allow_transactional))

    def append_many_as_leader(self, tp: TopicPartition, appends, *, check_min_isr: bool
                              ) -> tuple[list, PartitionReplica, int]:
        """:meth:`append_as_leader` for the records of several produce requests (see
        :meth:`Log.append_many`): what each appended or the error it met, the replica and
        the epoch. ``check_min_isr`` as for acks=-1."""
        return self._append_as_leader(tp, check_min_isr, lambda partition_log, epoch:
                                      partition_log.append_many(appends, leader_epoch=epoch))

    def append_marker_as_leader(self, tp: TopicPartition, producer_id: int, producer_epoch: int,
                                commit: bool, coordinator_epoch: int
                                ) -> tuple[AppendInfo, PartitionReplica, int]:
        """Write a transaction marker as leader (see :meth:`Log.append_marker`), as an
        acks=all append: NotEnoughReplicasError while the ISR is below the topic's
        ``min.insync.replicas``. Returns what was appended, the replica and its epoch."""
        return self._append_as_leader(tp, True, lambda partition_log, epoch:
                                      partition_log.append_marker(producer_id, producer_epoch,
                                                                  commit, coordinator_epoch,
                                                                  leader_epoch=epoch))

    def _append_as_leader(self, tp: TopicPartition, check_min_isr: bool,
                          write: Callable[[Log, int], AppendInfo]
                          ) -> tuple[AppendInfo, PartitionReplica, int]:
        """``write(log, leader_epoch)`` under the replica's lock while this broker leads
        ``tp`` (else NotLeaderOrFollowerError) and, with ``check_min_isr``, while the ISR
        is at least ``min.insync.replicas`` (else NotEnoughReplicasError); then the high
        watermark moves if it can."""
        replica = self.leader_replica(tp)
        with replica.lock:
            if replica.role is not Role.LEADER:
                raise NotLeaderOrFollowerError(f"broker {self.local_id} does not lead {tp}")
            if check_min_isr:
                min_isr = replica.log.config.min_insync_replicas
                if len(replica.isr) < min_isr:
                    raise NotEnoughReplicasError(
                        f"{tp}: the ISR {list(replica.isr)} is smaller than "
                        f"min.insync.replicas={min_isr}")
            epoch = replica.leader_epoch
            info = write(replica.log, epoch)
            replica.maybe_advance_high_watermark()
        return info, replica, epoch

    def follower_fetch(self, tp: TopicPartition, replica_id: int, current_leader_epoch: int,
                       fetch_offset: int, log_start_offset: int = -1):
        """Record a follower's fetch position and return the log to read from.

        Raises NotLeaderOrFollowerError if this broker does not lead the partition or
        ``replica_id`` is not one of its replicas, and the epoch fencing errors.
        """
        replica = self.leader_replica(tp, current_leader_epoch)
        if replica_id not in replica.replicas or replica_id == self.local_id:
            raise NotLeaderOrFollowerError(
                f"broker {replica_id} is not a follower of {tp} (replicas "
                f"{list(replica.replicas)})")
        if fetch_offset <= replica.log.log_end_offset and replica.record_follower_fetch(
                replica_id, fetch_offset, self._clock()):
            self._isr_due = True
            self._signal.set()
        if replica.record_follower_start(replica_id, log_start_offset):
            self._wake(tp)  # a DeleteRecords may be waiting for this follower's start
        return replica.log

    def set_throttle_rates(self, leader: int, follower: int) -> None:
        """``leader.replication.throttled.rate`` and ``follower.replication.throttled.rate``
        changed (dynamic broker configs)."""
        self.leader_quota.set_rate(leader)
        self.follower_quota.set_rate(follower)

    def leader_throttles(self, tp: TopicPartition, replica_id: int) -> bool:
        """Whether this broker, leading ``tp``, sends it to follower ``replica_id`` within
        the leader throttle: a rate is set, the topic's
        ``leader.replication.throttled.replicas`` names this broker for the partition, and
        the follower is out of the ISR."""
        if not self.leader_quota.active:
            return False
        replica = self._replicas.get(tp)
        return replica is not None and replica_id not in replica.isr and is_throttled(
            replica.log.config.leader_replication_throttled_replicas, tp.partition,
            self.local_id)

    def follower_throttles(self, tp: TopicPartition) -> bool:
        """Whether this broker fetches ``tp`` within the follower throttle: a rate is set,
        the topic's ``follower.replication.throttled.replicas`` names this broker for the
        partition, and this replica is out of the ISR."""
        if not self.follower_quota.active:
            return False
        replica = self._replicas.get(tp)
        return replica is not None and self.local_id not in replica.isr and is_throttled(
            replica.log.config.follower_replication_throttled_replicas, tp.partition,
            self.local_id)

    def end_offset_for_epoch(self, tp: TopicPartition, current_leader_epoch: int,
                             epoch: int) -> tuple[int, int]:
        replica = self.leader_replica(tp, current_leader_epoch)
        return replica.log.end_offset_for_epoch(epoch)

    def led_partitions(self) -> list[TopicPartition]:
        with self._lock:
            return [tp for tp, r in self._replicas.items() if r.role is Role.LEADER]

    def movable_leaderships(self) -> list[TopicPartition]:
        """Partitions this broker leads whose ISR has another live member to take over."""
        live = {b.broker_id for b in self.metadata.brokers()} - {self.local_id}
        with self._lock:
            return [tp for tp, r in self._replicas.items()
                    if r.role is Role.LEADER and live.intersection(r.isr)]
