"""Offsets committed inside a transaction: TxnOffsetCommit and the markers that settle them.

A TxnOffsetCommit is checked as an OffsetCommit is (the coordinator owns the group and has
loaded it; from version 3 on a member id, generation and instance id are checked when
given), then its offsets are appended to the group's ``__consumer_offsets`` partition as
one transactional batch carrying the request's producer id and epoch, and answered once
the in-sync replicas have it. From the append on they are *pending* under that producer
id: OffsetFetch does not show them, and with ``require_stable`` answers
UNSTABLE_OFFSET_COMMIT for their partitions so consumers retry.

The transaction coordinator ends the transaction by writing a COMMIT or ABORT marker to
every partition the transaction touched, the group's ``__consumer_offsets`` partition
among them. Once a marker is written and replicated, ``on_marker`` settles the producer's
pending offsets written before it: COMMIT makes them committed unless a plain commit of
the same partition was written after them, ABORT drops them. Markers are applied on the
coordinator's own thread (as Kafka schedules them), never on the thread that wrote them.
"""

from __future__ import annotations

import logging

from pylog.coordinator.codes import (
    COORDINATOR_NOT_AVAILABLE, FENCED_INSTANCE_ID, ILLEGAL_GENERATION, INVALID_GROUP_ID,
    NONE, UNKNOWN_MEMBER_ID)
from pylog.coordinator.group import (
    Group, GroupState, Pending, StoredOffset, TopicPartitionKey)
from pylog.coordinator.records import offset_key, offset_value
from pylog.coordinator.store import TxnProducer

log = logging.getLogger(__name__)


class TxnOffsetManager:
    """Pending transactional offsets of the coordinator's groups, and which groups each
    producer has pending offsets in (so a marker finds its groups without a scan)."""

    def __init__(self, coordinator) -> None:
        self.coordinator = coordinator
        self._groups_of_producer: dict[int, set[str]] = {}

    # -- TxnOffsetCommit ----------------------------------------------------------------------

    def commit(self, group_id: str, producer: TxnProducer, generation: int, member_id: str,
               instance_id: str | None,
               offsets: dict[TopicPartitionKey, tuple[int, int, str | None]]) -> dict | Pending:
        """``offsets``: (topic, partition) -> (offset, leader epoch, metadata). Returns
        {(topic, partition): error} or a Pending of it. Call with the lock held."""
        if not group_id:
            return dict.fromkeys(offsets, INVALID_GROUP_ID)
        group, error = self.coordinator.lookup(group_id, create=True)
        if error:
            return dict.fromkeys(offsets, error)
        error = _txn_commit_allowed(group, generation, member_id, instance_id)
        if error:
            return dict.fromkeys(offsets, error)
        results, values = self.coordinator.offsets.values_to_commit(offsets)
        if not values:
            return results
        pending = Pending()
        written: list[StoredOffset] = []

        def appended(log_offset: int) -> None:
            mine = group.pending_txn_offsets.setdefault(producer.producer_id, {})
            for key, value in values.items():
                mine[key] = stored = StoredOffset(value, log_offset)
                written.append(stored)
            self._groups_of_producer.setdefault(producer.producer_id, set()).add(group_id)

        def stored(error: int) -> None:
            if error != NONE:
                self._forget_failed(group, producer.producer_id, values, written)
            results.update(dict.fromkeys(values, error))
            pending.complete(results)

        records = [(offset_key(group_id, t, p), offset_value(v)) for (t, p), v in values.items()]
        self.coordinator.persist(group.partition, records, stored, producer=producer,
                                 on_appended=appended)
        return pending

    def _forget_failed(self, group: Group, producer_id: int, values, written) -> None:
        """The write did not count (Kafka's failPendingTxnOffsetCommit): its offsets are
        no longer pending; the client retries, perhaps at another coordinator."""
        mine = group.pending_txn_offsets.get(producer_id)
        if mine is None:
            return
        for key, stored in zip(values, written):
            if mine.get(key) is stored:
                del mine[key]
        if not mine:
            del group.pending_txn_offsets[producer_id]
            self._unindex(producer_id, group.group_id)

    # -- markers ----------------------------------------------------------------------------

    def on_marker(self, partition: int, producer_id: int, commit: bool,
                  marker_offset: int) -> None:
        """Settle the pending offsets ``producer_id`` wrote to the groups of ``partition``
        before ``marker_offset``. Call with the lock held, once the partition is loaded
        (a marker the load already replayed finds nothing written before it)."""
        for group_id in list(self._groups_of_producer.get(producer_id, ())):
            group = self.coordinator.groups.get(group_id)
            if group is None or group.state is GroupState.DEAD:
                self._unindex(producer_id, group_id)
                continue
            if group.partition != partition:
                continue
            settled = group.complete_txn(producer_id, commit, marker_offset)
            if producer_id not in group.pending_txn_offsets:
                self._unindex(producer_id, group_id)
            if settled:
                log.debug("group %s: %d offsets of producer %d %s", group_id, settled,
                          producer_id, "committed" if commit else "aborted")

    # -- the producer index -------------------------------------------------------------------

    def index_group(self, group: Group) -> None:
        """Note the producers with pending offsets in a loaded group."""
        for producer_id in group.pending_txn_offsets:
            self._groups_of_producer.setdefault(producer_id, set()).add(group.group_id)

    def forget_partition(self, partition: int, group_ids: set[str]) -> None:
        """The groups of ``partition`` were unloaded: drop them from the index."""
        for producer_id in list(self._groups_of_producer):
            self._groups_of_producer[producer_id] -= group_ids
            if not self._groups_of_producer[producer_id]:
                del self._groups_of_producer[producer_id]

    def _unindex(self, producer_id: int, group_id: str) -> None:
        groups = self._groups_of_producer.get(producer_id)
        if groups is not None:
            groups.discard(group_id)
            if not groups:
                del self._groups_of_producer[producer_id]


def _txn_commit_allowed(group: Group, generation: int, member_id: str,
                        instance_id: str | None) -> int:
    """Kafka's validateOffsetCommit for transactional commits: a request naming no member
    (TxnOffsetCommit before v3, or a producer outside the group) is let through, as its
    producer epoch already fences zombies; one naming a member is checked like a
    member's OffsetCommit."""
    if group.state is GroupState.DEAD:
        return COORDINATOR_NOT_AVAILABLE
    if generation < 0 and group.state is GroupState.EMPTY:
        return NONE
    if generation < 0 and not member_id and instance_id is None:
        return NONE
    if instance_id is not None:
        known = group.static_members.get(instance_id)
        if known is None:
            return UNKNOWN_MEMBER_ID
        if known != member_id:
            return FENCED_INSTANCE_ID
    if member_id not in group.members:
        return UNKNOWN_MEMBER_ID
    if generation != group.generation:
        return ILLEGAL_GENERATION
    return NONE
