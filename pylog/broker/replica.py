"""One partition as this broker holds it: leader or follower, its ISR and high watermark.

A leader tracks each follower's log end offset (the offset of its last fetch) and the
last time it was caught up (Kafka's ``lastCaughtUpTimeMs``): a follower is caught up at a
fetch when it asks for the leader's log end, or for at least the leader's log end as of
its previous fetch. The high watermark is the smallest log end offset among the ISR
members; it only moves forward while this broker leads. A follower that has not been
caught up for ``replica.lag.time.max.ms`` is due to leave the ISR; one whose log end
reached the high watermark (and the start of the current leader epoch) is due to join.

The ISR itself is only changed from what ZooKeeper holds (``apply_state``) or after a
conditional write there succeeded (``isr_written``), so leader and controller never
disagree about it for long and ZooKeeper stays the one record.
"""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass

from pylog.log import Log
from pylog.types import TopicPartition


class Role(enum.Enum):
    LEADER = "leader"
    FOLLOWER = "follower"
    OFFLINE = "offline"  # no leader known, or not a replica


@dataclass
class FollowerState:
    log_end_offset: int = -1
    last_caught_up: float = 0.0
    last_fetch: float = 0.0
    last_fetch_leader_end: int = -1
    log_start_offset: int = -1  # as its last fetch reported it


class PartitionReplica:
    """Replication state of one local replica; every method is thread-safe."""

    def __init__(self, tp: TopicPartition, log: Log, local_id: int) -> None:
        self.tp = tp
        self.log = log
        self.local_id = local_id
        self.lock = threading.RLock()
        self.role = Role.OFFLINE
        self.leader = -1
        self.leader_epoch = -1
        self.epoch_start_offset = 0
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self.followers: dict[int, FollowerState] = {}

    # -- role changes ---------------------------------------------------------------------

    def become_leader(self, leader_epoch: int, replicas: tuple[int, ...],
                      isr: tuple[int, ...], now: float) -> bool:
        """Take leadership in ``leader_epoch``. True if anything changed."""
        with self.lock:
            if self.role is Role.LEADER and self.leader_epoch == leader_epoch:
                return False
            self.role, self.leader, self.leader_epoch = Role.LEADER, self.local_id, leader_epoch
            self.replicas, self.isr = replicas, isr
            self.epoch_start_offset = self.log.log_end_offset
            self.log.assign_leader_epoch(leader_epoch)
            # Nobody is known to have anything yet; ISR members get the lag time to show up.
            self.followers = {r: FollowerState(last_caught_up=now) for r in replicas
                              if r != self.local_id}
            self._start_high_watermark()
            self.maybe_advance_high_watermark()
            return True

    def become_follower(self, leader: int, leader_epoch: int, replicas: tuple[int, ...],
                        isr: tuple[int, ...]) -> bool:
        """Follow ``leader`` in ``leader_epoch``. True if the fetcher must (re)start."""
        with self.lock:
            self.replicas, self.isr = replicas, isr
            if (self.role is Role.FOLLOWER and self.leader == leader
                    and self.leader_epoch == leader_epoch):
                return False
            self.role, self.leader, self.leader_epoch = Role.FOLLOWER, leader, leader_epoch
            self.followers = {}
            self._start_high_watermark()
            return True

    def _start_high_watermark(self) -> None:
        """A log taking a role for the first time starts from its checkpointed high
        watermark (or its log start): never from its log end, which may hold records no
        other replica has."""
        if self.log.replicated_high_watermark is None:
            start = self.log.restored_high_watermark
            self.log.set_high_watermark(self.log.log_start_offset if start is None else start)

    def go_offline(self) -> bool:
        with self.lock:
            if self.role is Role.OFFLINE:
                return False
            self.role, self.leader, self.followers = Role.OFFLINE, -1, {}
            return True

    def apply_state(self, leader_epoch: int, isr: tuple[int, ...],
                    replicas: tuple[int, ...], now: float) -> bool:
        """Take the ISR and replicas ZooKeeper holds for the current epoch (the controller
        dropped a dead replica, a reassignment added one). True if anything changed."""
        with self.lock:
            if leader_epoch != self.leader_epoch or (isr == self.isr and replicas == self.replicas):
                return False
            self.isr, self.replicas = isr, replicas
            if self.role is Role.LEADER:
                self._forget_non_replicas(now)
                self.maybe_advance_high_watermark()
            return True

    def _forget_non_replicas(self, now: float) -> None:
        for replica in self.replicas:
            if replica != self.local_id:
                self.followers.setdefault(replica, FollowerState(last_caught_up=now))
        for gone in set(self.followers) - set(self.replicas):
            del self.followers[gone]

    # -- as leader ------------------------------------------------------------------------

    def record_follower_fetch(self, replica_id: int, fetch_offset: int, now: float) -> bool:
        """A follower asked for ``fetch_offset``: that is its log end. True if it may now
        join the ISR (the caller asks for an ISR update)."""
        with self.lock:
            state = self.followers.get(replica_id)
            if state is None or self.role is not Role.LEADER:
                return False
            leader_end = self.log.log_end_offset
            if fetch_offset >= leader_end:
                state.last_caught_up = now
            elif fetch_offset >= state.last_fetch_leader_end >= 0:
                state.last_caught_up = max(state.last_caught_up, state.last_fetch)
            state.log_end_offset = fetch_offset
            state.last_fetch, state.last_fetch_leader_end = now, leader_end
            self.maybe_advance_high_watermark()
            return replica_id not in self.isr and self._can_join(state)

    def record_follower_start(self, replica_id: int, log_start_offset: int) -> bool:
        """A follower's fetch reported its log start offset; True if it moved."""
        with self.lock:
            state = self.followers.get(replica_id)
            if state is None:
                return False
            moved = log_start_offset > state.log_start_offset
            state.log_start_offset = log_start_offset
            return moved

    def low_watermark(self) -> int:
        """The smallest log start offset among the in-sync replicas (as leader): what
        DeleteRecords answers once every one of them has the new start."""
        with self.lock:
            starts = [self.log.log_start_offset]
            for replica in self.isr:
                if replica != self.local_id:
                    state = self.followers.get(replica)
                    starts.append(-1 if state is None else state.log_start_offset)
            return min(starts)

    def excuse_stall(self, seconds: float, now: float) -> None:
        """Move every follower's last catch-up ``seconds`` later (never past ``now``)."""
        with self.lock:
            for state in self.followers.values():
                state.last_caught_up = min(now, state.last_caught_up + seconds)

    def _can_join(self, state: FollowerState) -> bool:
        return (state.log_end_offset >= self.log.high_watermark
                and state.log_end_offset >= self.epoch_start_offset)

    def maybe_advance_high_watermark(self) -> bool:
        """Move the high watermark to the smallest log end among the ISR, never back."""
        with self.lock:
            if self.role is not Role.LEADER:
                return False
            ends = [self.log.log_end_offset]
            for replica in self.isr:
                if replica != self.local_id:
                    state = self.followers.get(replica)
                    ends.append(-1 if state is None else state.log_end_offset)
            candidate = min(ends)
            current = self.log.replicated_high_watermark
            if current is not None and candidate <= current:
                return False
            self.log.set_high_watermark(candidate)
            return True

    def isr_change_due(self, now: float, lag_s: float) -> tuple[int, ...] | None:
        """The ISR this leader should write, or None if it is right as it is."""
        with self.lock:
            if self.role is not Role.LEADER:
                return None
            keep = [r for r in self.isr if r == self.local_id or (
                r in self.followers and now - self.followers[r].last_caught_up <= lag_s)]
            if self.local_id not in keep:
                keep.insert(0, self.local_id)
            joining = [r for r in self.replicas if r not in keep and r in self.followers
                       and self._can_join(self.followers[r])
                       and now - self.followers[r].last_caught_up <= lag_s]
            wanted = tuple(r for r in self.replicas if r in keep or r in joining)
            wanted += tuple(r for r in keep if r not in wanted)
            return None if set(wanted) == set(self.isr) else wanted

    def isr_written(self, leader_epoch: int, isr: tuple[int, ...]) -> None:
        with self.lock:
            if self.leader_epoch == leader_epoch and self.role is Role.LEADER:
                self.isr = isr
                self.maybe_advance_high_watermark()

    def role_snapshot(self) -> tuple[Role, int, tuple[int, ...]]:
        """(role, leader epoch, ISR), read together."""
        with self.lock:
            return self.role, self.leader_epoch, self.isr
