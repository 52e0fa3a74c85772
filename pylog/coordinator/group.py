"""A consumer group as the coordinator holds it: members, generation, committed offsets.

The states are Kafka's classic-protocol states::

    Empty --join--> PreparingRebalance --all joined / timeout--> CompletingRebalance
      ^                   ^      |                                      | leader's SyncGroup
      |                   |      +--no members left--> Empty            v (persisted)
      +--last member leaves/expires--- Stable <---------------------------+
    Dead: deleted, or unloaded because another broker now coordinates it.

Requests that must wait (a JoinGroup until the rebalance completes, a SyncGroup until
the leader's assignment is persisted, an OffsetCommit until the in-sync replicas have
it) hold a ``Pending`` slot that the coordinator fills; the network layer parks the
request and retries it when the group's ``__consumer_offsets`` partition is notified.

Offsets a transaction commits (TxnOffsetCommit) wait in ``pending_txn_offsets`` under
their producer id until the transaction's marker reaches the group's partition: COMMIT
makes them committed offsets, ABORT drops them.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field

from pylog.coordinator.records import OffsetValue


TopicPartitionKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class StoredOffset:
    """An offset commit and the log offset of the ``__consumer_offsets`` batch that holds
    it. Of two commits of one partition the one written later wins, even when the earlier
    one's transaction commits after it: compaction keeps the later record too, so what a
    reload of the partition finds agrees with what was served (Kafka's rule)."""

    value: OffsetValue
    log_offset: int

    def supersedes(self, other: "StoredOffset | None") -> bool:
        return other is None or self.log_offset > other.log_offset


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


class Pending:
    """A response that is not known yet: ``body`` is None until ``complete``."""

    __slots__ = ("body",)

    def __init__(self) -> None:
        self.body: dict | None = None

    def complete(self, body: dict) -> None:
        if self.body is None:
            self.body = body


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]  # (name, metadata) in the member's preference order
    last_heard: float = 0.0  # clock seconds of the last heartbeat, join, sync or commit
    assignment: bytes = b""
    awaiting_join: Pending | None = None
    awaiting_sync: Pending | None = None
    is_new: bool = False  # joined the current rebalance as a newcomer

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def same_protocols(self, protocols: list[tuple[str, bytes]]) -> bool:
        return [(n, bytes(m)) for n, m in protocols] == self.protocols

    def expired(self, now: float) -> bool:
        """No sign of life for a session; a member with a request waiting is alive."""
        if self.awaiting_join is not None or self.awaiting_sync is not None:
            return False
        return now - self.last_heard > self.session_timeout_ms / 1000


@dataclass
class Group:
    group_id: str
    partition: int  # of __consumer_offsets
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending_members: dict[str, float] = field(default_factory=dict)  # member id -> expiry
    offsets: dict[TopicPartitionKey, StoredOffset] = field(default_factory=dict)
    # producer id -> the offsets its open transaction wrote, not visible to OffsetFetch
    pending_txn_offsets: dict[int, dict[TopicPartitionKey, StoredOffset]] = field(
        default_factory=dict)
    state_timestamp_ms: int = -1  # wall clock of the last state change
    rebalance_deadline: float = 0.0  # clock seconds, while PreparingRebalance
    initial_delay_deadline: float | None = None  # group.initial.rebalance.delay.ms window
    initial_delay_limit: float = 0.0
    sync_deadline: float = 0.0  # clock seconds, while CompletingRebalance
    syncing: bool = False  # the leader's assignment is being persisted
    pending_commits: int = 0  # offset commits waiting for the in-sync replicas

    def committed(self, key: TopicPartitionKey) -> OffsetValue | None:
        stored = self.offsets.get(key)
        return None if stored is None else stored.value

    def commit_offset(self, key: TopicPartitionKey, stored: StoredOffset) -> None:
        """Make ``stored`` the committed offset unless a later-written one is."""
        if stored.supersedes(self.offsets.get(key)):
            self.offsets[key] = stored

    def has_pending_txn_offset(self, key: TopicPartitionKey) -> bool:
        return any(key in offsets for offsets in self.pending_txn_offsets.values())

    def complete_txn(self, producer_id: int, commit: bool, marker_offset: int) -> int:
        """Apply a transaction marker at ``marker_offset``: the producer's pending offsets
        written before it become committed (COMMIT) or are dropped (ABORT). Offsets after
        the marker belong to the producer's next transaction and stay. Returns how many
        pending offsets the marker resolved."""
        pending = self.pending_txn_offsets.get(producer_id)
        if not pending:
            return 0
        done = [key for key, stored in pending.items() if stored.log_offset < marker_offset]
        for key in done:
            stored = pending.pop(key)
            if commit:
                self.commit_offset(key, stored)
        if not pending:
            del self.pending_txn_offsets[producer_id]
        return len(done)

    def drop_offsets(self, keys, written_before: int | None = None) -> None:
        """Forget committed and pending offsets of ``keys`` (a tombstone written at log
        offset ``written_before`` removes only what was written before it)."""
        for key in keys:
            stored = self.offsets.get(key)
            if stored is not None and (written_before is None
                                       or stored.log_offset < written_before):
                del self.offsets[key]
            for producer_id, pending in list(self.pending_txn_offsets.items()):
                stored = pending.get(key)
                if stored is not None and (written_before is None
                                           or stored.log_offset < written_before):
                    del pending[key]
                    if not pending:
                        del self.pending_txn_offsets[producer_id]

    def transition(self, state: GroupState, wall_ms: int) -> None:
        self.state = state
        self.state_timestamp_ms = wall_ms

    def fences(self, instance_id: str | None, member_id: str) -> bool:
        """Whether a request naming ``instance_id`` comes from an older incarnation of that
        static member (another member id holds the instance id now)."""
        if instance_id is None:
            return False
        known = self.static_members.get(instance_id)
        return known is not None and known != member_id

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def all_joined(self) -> bool:
        return (not self.pending_members
                and all(m.awaiting_join is not None for m in self.members.values()))

    def rebalance_timeout_s(self) -> float:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0) / 1000

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Whether a member with these protocols could join (Kafka's supportsProtocols)."""
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        if protocol_type != self.protocol_type:
            return False
        candidates = self.candidate_protocols()
        return any(name in candidates for name, _ in protocols)

    def candidate_protocols(self) -> set[str]:
        sets = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str:
        """The protocol every member supports that most members prefer (Kafka's vote)."""
        candidates = self.candidate_protocols()
        votes = Counter(next(name for name, _ in m.protocols if name in candidates)
                        for m in self.members.values())
        # Ties go to the first member's preference, as in Kafka's maxBy over members.
        best = max(votes.values())
        for member in self.members.values():
            for name, _ in member.protocols:
                if votes.get(name) == best:
                    return name
        raise AssertionError("no protocol selected")

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (``consumer`` protocol), None if unknown."""
        from pylog.coordinator.records import subscribed_topics

        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            topics |= subscribed_topics(member.metadata_for(self.protocol_name))
        return topics
