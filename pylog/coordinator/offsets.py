"""Committed offsets and group administration: OffsetCommit, OffsetFetch, OffsetDelete,
DeleteGroups, ListGroups, DescribeGroups, and the expiry of old offsets.

A commit is answered, and becomes visible to OffsetFetch, only once the in-sync replicas
of the group's ``__consumer_offsets`` partition have it, so a coordinator failover never
loses an acknowledged commit. Commits from outside the group's membership (generation
-1, no member id) are accepted only while the group has no members, as Kafka does for
tools that keep their own progress.

Offsets expire ``offsets.retention.minutes`` after the group became empty (for groups
that use the consumer protocol) or after their commit (for groups that only store
offsets); expired offsets and deleted groups are written as tombstones, which
compaction later removes.

Offsets of open transactions (``txn_offsets``) count as Kafka counts them: a partition
with one does not expire and keeps its group alive until the transaction ends; deleting
the group or the partition's offsets writes a tombstone that removes them too (a reload
of the log drops pending offsets written before a tombstone); OffsetFetch with
``require_stable`` answers UNSTABLE_OFFSET_COMMIT for the partition meanwhile.
"""

from __future__ import annotations

import logging

from pylog.coordinator.codes import (
    COORDINATOR_NOT_AVAILABLE, FENCED_INSTANCE_ID, GROUP_ID_NOT_FOUND,
    GROUP_SUBSCRIBED_TO_TOPIC, ILLEGAL_GENERATION, INVALID_GROUP_ID, NONE, NON_EMPTY_GROUP,
    OFFSET_METADATA_TOO_LARGE, REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID,
    UNKNOWN_TOPIC_OR_PARTITION, UNSTABLE_OFFSET_COMMIT)
from pylog.coordinator.group import Group, GroupState, Pending, StoredOffset
from pylog.coordinator.records import OffsetValue, group_key, offset_key, offset_value

log = logging.getLogger(__name__)

NO_OFFSET = -1


class OffsetManager:
    def __init__(self, coordinator) -> None:
        self.coordinator = coordinator
        self.metadata_max_bytes = coordinator.config["offset.metadata.max.bytes"]
        self.retention_ms = coordinator.config["offsets.retention.minutes"] * 60_000

    # -- OffsetCommit -----------------------------------------------------------------------

    def commit(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
               offsets: dict[tuple[str, int], tuple[int, int, str | None]]) -> dict | Pending:
        """``offsets``: (topic, partition) -> (offset, leader epoch, metadata). Returns
        {(topic, partition): error} or a Pending of it."""
        if not group_id:
            return dict.fromkeys(offsets, INVALID_GROUP_ID)
        group, error = self.coordinator.lookup(group_id, create=generation < 0)
        if error:
            return dict.fromkeys(offsets, error)
        if group is None:
            return dict.fromkeys(offsets, ILLEGAL_GENERATION)
        error = self._commit_allowed(group, generation, member_id, instance_id)
        if error:
            return dict.fromkeys(offsets, error)
        results, values = self.values_to_commit(offsets)
        if not values:
            return results
        pending = Pending()
        group.pending_commits += 1
        written_at = []

        def stored(error: int) -> None:
            group.pending_commits -= 1
            if error == NONE and group.state is not GroupState.DEAD:
                for key, value in values.items():
                    group.commit_offset(key, StoredOffset(value, written_at[0]))
            results.update(dict.fromkeys(values, error))
            pending.complete(results)

        records = [(offset_key(group_id, t, p), offset_value(v)) for (t, p), v in values.items()]
        self.coordinator.persist(group.partition, records, stored,
                                 on_appended=written_at.append)
        return pending

    def values_to_commit(self, offsets: dict[tuple[str, int], tuple[int, int, str | None]]
                         ) -> tuple[dict[tuple[str, int], int],
                                    dict[tuple[str, int], OffsetValue]]:
        """The offsets of an OffsetCommit or TxnOffsetCommit as values to write, stamped
        now, and the errors of those refused: a partition that does not exist
        (UNKNOWN_TOPIC_OR_PARTITION), metadata over ``offset.metadata.max.bytes``
        (OFFSET_METADATA_TOO_LARGE)."""
        results: dict[tuple[str, int], int] = {}
        values: dict[tuple[str, int], OffsetValue] = {}
        now_ms = self.coordinator.wall_ms()
        metadata_view = self.coordinator.metadata
        for (topic, partition), (offset, epoch, metadata) in offsets.items():
            topic_meta = metadata_view.topic(topic)
            if topic_meta is None or partition not in topic_meta.partitions:
                results[(topic, partition)] = UNKNOWN_TOPIC_OR_PARTITION
            elif metadata is not None and len(metadata.encode()) > self.metadata_max_bytes:
                results[(topic, partition)] = OFFSET_METADATA_TOO_LARGE
            else:
                values[(topic, partition)] = OffsetValue(offset, epoch, metadata or "", now_ms)
        return results, values

    def _commit_allowed(self, group: Group, generation: int, member_id: str,
                        instance_id: str | None) -> int:
        if group.state is GroupState.DEAD:
            return COORDINATOR_NOT_AVAILABLE
        if group.fences(instance_id, member_id):
            return FENCED_INSTANCE_ID
        if generation < 0 and group.state is GroupState.EMPTY:
            return NONE  # a tool keeping its offsets here, not a member
        member = group.members.get(member_id)
        if member is None:
            return UNKNOWN_MEMBER_ID
        if generation != group.generation:
            return ILLEGAL_GENERATION
        if group.state is GroupState.COMPLETING_REBALANCE:
            return REBALANCE_IN_PROGRESS
        # Stable, or PreparingRebalance: members commit before giving partitions up.
        member.last_heard = self.coordinator.clock()
        return NONE

    # -- OffsetFetch ------------------------------------------------------------------------

    def fetch(self, group_id: str, wanted: list[tuple[str, list[int]]] | None,
              require_stable: bool = False) \
            -> tuple[int, dict[tuple[str, int], tuple[OffsetValue | None, int]]]:
        """(error, {(topic, partition): (committed value or None, partition error)});
        ``wanted`` None means every partition with a committed offset. With
        ``require_stable``, a partition with offsets of an open transaction answers
        UNSTABLE_OFFSET_COMMIT (the client retries) instead of an offset that may be
        about to change."""
        group, error = self.coordinator.lookup(group_id)
        if error:
            return error, {}
        if group is None or group.state is GroupState.DEAD:
            keys = [] if wanted is None else [(t, p) for t, parts in wanted for p in parts]
            return NONE, {key: (None, NONE) for key in keys}
        keys = (sorted(group.offsets) if wanted is None
                else [(t, p) for t, parts in wanted for p in parts])
        found = {}
        for key in keys:
            if require_stable and group.has_pending_txn_offset(key):
                found[key] = (None, UNSTABLE_OFFSET_COMMIT)
            else:
                found[key] = (group.committed(key), NONE)
        return NONE, found

    # -- deletion -----------------------------------------------------------------------------

    def delete_group(self, group_id: str) -> int | Pending:
        group, error = self.coordinator.lookup(group_id)
        if error:
            return error
        if group is None or group.state is GroupState.DEAD:
            return GROUP_ID_NOT_FOUND
        if group.state is not GroupState.EMPTY:
            return NON_EMPTY_GROUP
        pending = Pending()
        group.transition(GroupState.DEAD, self.coordinator.wall_ms())
        records = [(offset_key(group_id, t, p), None) for t, p in _stored_keys(group)]
        records.append((group_key(group_id), None))

        def stored(error: int) -> None:
            if error == NONE:
                if self.coordinator.groups.get(group_id) is group:
                    del self.coordinator.groups[group_id]
                log.info("deleted group %s", group_id)
            else:
                group.state = GroupState.EMPTY
            pending.complete({"error_code": error})

        self.coordinator.persist(group.partition, records, stored)
        return pending

    def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]) \
            -> tuple[int, dict[tuple[str, int], int]] | Pending:
        group, error = self.coordinator.lookup(group_id)
        if error:
            return error, {}
        if group is None or group.state is GroupState.DEAD:
            return GROUP_ID_NOT_FOUND, {}
        subscribed = set() if group.state is GroupState.EMPTY else group.subscribed_topics()
        if subscribed is None:  # members of another protocol: no deletion while active
            return NON_EMPTY_GROUP, {}
        results = {}
        doomed = []
        stored_keys = _stored_keys(group)
        for topic, partition in partitions:
            if topic in subscribed:
                results[(topic, partition)] = GROUP_SUBSCRIBED_TO_TOPIC
            else:
                results[(topic, partition)] = NONE
                if (topic, partition) in stored_keys:
                    doomed.append((topic, partition))
        if not doomed:
            return NONE, results
        pending = Pending()
        written_at = []

        def stored(error: int) -> None:
            if error == NONE:
                group.drop_offsets(doomed, written_before=written_at[0])
                pending.complete({"error_code": NONE, "results": results})
            else:
                pending.complete({"error_code": error, "results": {}})

        self.coordinator.persist(group.partition,
                                 [(offset_key(group_id, t, p), None) for t, p in doomed], stored,
                                 on_appended=written_at.append)
        return pending

    def expire(self, now_ms: int) -> None:
        """Write tombstones for offsets past retention; drop groups left with nothing.
        An offset with a transaction's offset pending does not expire, and a group with
        an open transaction stays (Kafka)."""
        for group in self.coordinator.owned_groups():
            if group.state is not GroupState.EMPTY:
                continue
            if not (group.offsets or group.protocol_type or group.pending_members
                    or group.pending_commits or group.pending_txn_offsets):
                del self.coordinator.groups[group.group_id]  # nothing was ever stored
                continue
            if group.protocol_type:  # a consumer group: retention counts from emptiness
                expired = (list(group.offsets)
                           if now_ms >= group.state_timestamp_ms + self.retention_ms else [])
            else:
                expired = [key for key, stored in group.offsets.items()
                           if now_ms >= stored.value.commit_timestamp + self.retention_ms]
            expired = [key for key in expired if not group.has_pending_txn_offset(key)]
            if not expired:
                continue
            for key in expired:
                del group.offsets[key]
            records = [(offset_key(group.group_id, t, p), None) for t, p in expired]
            if not group.offsets and not group.pending_txn_offsets:
                records.append((group_key(group.group_id), None))
                group.transition(GroupState.DEAD, now_ms)
                del self.coordinator.groups[group.group_id]
            log.info("group %s: %d committed offsets expired", group.group_id, len(expired))
            self.coordinator.persist(group.partition, records, lambda error: None)

    def forget_topics(self, topics: set[str]) -> None:
        """Tombstones for every committed offset of ``topics`` (deleted topics)."""
        for group in self.coordinator.owned_groups():
            gone = [key for key in _stored_keys(group) if key[0] in topics]
            if not gone:
                continue
            group.drop_offsets(gone)
            log.info("group %s: dropped the offsets of %d partitions of deleted topics",
                     group.group_id, len(gone))
            self.coordinator.persist(group.partition, [
                (offset_key(group.group_id, t, p), None) for t, p in gone], lambda error: None)

    # -- ListGroups and DescribeGroups -------------------------------------------------------------

    def list_groups(self, states: set[str]) -> list[dict]:
        wanted = {s.lower() for s in states}
        return [{"group_id": g.group_id, "protocol_type": g.protocol_type or "",
                 "group_state": g.state.value, "group_type": "classic"}
                for g in sorted(self.coordinator.owned_groups(), key=lambda g: g.group_id)
                if not wanted or g.state.value.lower() in wanted]

    def describe(self, group_id: str) -> dict:
        group, error = self.coordinator.lookup(group_id)
        body = {"error_code": error, "group_id": group_id, "group_state": "Dead",
                "protocol_type": "", "protocol_data": "", "members": []}
        if error or group is None:
            return body
        stable = group.state is GroupState.STABLE
        body.update(group_state=group.state.value, protocol_type=group.protocol_type or "",
                    protocol_data=(group.protocol_name or "") if stable else "")
        body["members"] = [{
            "member_id": m.member_id, "group_instance_id": m.group_instance_id,
            "client_id": m.client_id, "client_host": m.client_host,
            "member_metadata": m.metadata_for(group.protocol_name) if stable else b"",
            "member_assignment": m.assignment if stable else b""}
            for m in group.members.values()]
        return body


def _stored_keys(group: Group) -> set[tuple[str, int]]:
    """Partitions with a committed offset or an open transaction's offset: what a
    tombstone must cover to remove them all."""
    keys = set(group.offsets)
    for pending in group.pending_txn_offsets.values():
        keys |= pending.keys()
    return keys
