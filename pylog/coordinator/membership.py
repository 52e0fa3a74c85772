"""JoinGroup, SyncGroup, Heartbeat and LeaveGroup: Kafka's classic group protocol.

The answers follow Kafka's GroupCoordinator, error for error, because clients act on
them: MEMBER_ID_REQUIRED hands a new member its id (JoinGroup v4+), UNKNOWN_MEMBER_ID and
ILLEGAL_GENERATION make a member rejoin from scratch or with its id, REBALANCE_IN_PROGRESS
makes it rejoin, FENCED_INSTANCE_ID stops an older incarnation of a static member.

Rebalances complete when every member has rejoined, or at the rebalance timeout (the
largest of the members'), when the laggards are removed. An empty group first waits
``group.initial.rebalance.delay.ms`` (extended by each newcomer, up to the rebalance
timeout) so that a group starting up rebalances once rather than once per member. The
leader's assignment is persisted before anyone gets theirs. Members that neither
heartbeat nor wait on a request for a session are removed.

Every public method returns a response body (a dict with the fields of the newest
version; the encoder drops what older versions lack) or a ``Pending`` to wait on.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

from pylog.coordinator.codes import (
    COORDINATOR_NOT_AVAILABLE, FENCED_INSTANCE_ID, GROUP_MAX_SIZE_REACHED,
    ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL, INVALID_GROUP_ID,
    INVALID_SESSION_TIMEOUT, MEMBER_ID_REQUIRED, NONE, REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID)
from pylog.coordinator.group import Group, GroupState, Member, Pending
from pylog.coordinator.records import GroupValue, MemberValue, group_key, group_value

log = logging.getLogger(__name__)


@dataclass
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    client_id: str
    client_host: str
    require_known_member: bool


def join_error(error: int, member_id: str = "") -> dict:
    return {"error_code": error, "generation_id": -1, "protocol_type": None,
            "protocol_name": None, "leader": "", "skip_assignment": False,
            "member_id": member_id, "members": []}


def sync_error(error: int) -> dict:
    return {"error_code": error, "protocol_type": None, "protocol_name": None,
            "assignment": b""}


class Membership:
    """The membership protocol over the coordinator's groups (call with its lock held
    through ``GroupCoordinator.run_locked``)."""

    def __init__(self, coordinator) -> None:
        self.coordinator = coordinator
        config = coordinator.config
        self.min_session_ms = config["group.min.session.timeout.ms"]
        self.max_session_ms = config["group.max.session.timeout.ms"]
        self.initial_delay_s = config["group.initial.rebalance.delay.ms"] / 1000
        self.max_size = config["group.max.size"]

    @property
    def now(self) -> float:
        return self.coordinator.clock()

    # -- JoinGroup --------------------------------------------------------------------------

    def join(self, request: JoinRequest) -> dict | Pending:
        if not request.group_id:
            return join_error(INVALID_GROUP_ID, request.member_id)
        if not self.min_session_ms <= request.session_timeout_ms <= self.max_session_ms:
            return join_error(INVALID_SESSION_TIMEOUT, request.member_id)
        new_member = request.member_id == ""
        group, error = self.coordinator.lookup(request.group_id, create=new_member)
        if error:
            return join_error(error, request.member_id)
        if group is None:
            return join_error(UNKNOWN_MEMBER_ID, request.member_id)
        if group.state is GroupState.DEAD:
            return join_error(COORDINATOR_NOT_AVAILABLE, request.member_id)
        if not request.protocol_type or not request.protocols or not group.supports(
                request.protocol_type, request.protocols):
            return join_error(INCONSISTENT_GROUP_PROTOCOL, request.member_id)
        if new_member:
            return self._join_new(group, request)
        return self._join_known(group, request)

    def _join_new(self, group: Group, request: JoinRequest) -> dict | Pending:
        member_id = f"{request.client_id or 'member'}-{uuid.uuid4()}"
        if request.group_instance_id is not None:
            old_id = group.static_members.get(request.group_instance_id)
            if old_id is not None and old_id in group.members:
                return self._replace_static(group, old_id, member_id, request)
        if len(group.members) + len(group.pending_members) >= self.max_size:
            return join_error(GROUP_MAX_SIZE_REACHED)
        if request.group_instance_id is None and request.require_known_member:
            # KIP-394: hand out the id first, so a client that times out and retries does
            # not leave an unknown member behind to wait out its session.
            group.pending_members[member_id] = self.now + request.session_timeout_ms / 1000
            return join_error(MEMBER_ID_REQUIRED, member_id)
        return self._add_member(group, member_id, request)

    def _join_known(self, group: Group, request: JoinRequest) -> dict | Pending:
        member_id = request.member_id
        if group.fences(request.group_instance_id, member_id):
            return join_error(FENCED_INSTANCE_ID, member_id)
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            return self._add_member(group, member_id, request)
        member = group.members.get(member_id)
        if member is None:
            return join_error(UNKNOWN_MEMBER_ID, member_id)
        member.last_heard = self.now
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            self._update_member(member, request)
            member.awaiting_join = member.awaiting_join or Pending()
            pending = member.awaiting_join
            self._maybe_complete_join(group)
            return pending
        unchanged = member.same_protocols(request.protocols)
        if state is GroupState.COMPLETING_REBALANCE and unchanged:
            return self._current_join(group, member)  # a retry of a lost response
        if state is GroupState.STABLE and unchanged and not group.is_leader(member_id):
            return self._current_join(group, member)  # nothing to reassign
        self._update_member(member, request)
        member.awaiting_join = Pending()
        self._prepare_rebalance(group, f"member {member_id} rejoined")
        pending = member.awaiting_join
        self._maybe_complete_join(group)
        return pending

    def _add_member(self, group: Group, member_id: str, request: JoinRequest) -> Pending:
        member = Member(member_id, request.group_instance_id, request.client_id,
                        request.client_host, request.rebalance_timeout_ms,
                        request.session_timeout_ms, request.protocol_type,
                        [(n, bytes(m)) for n, m in request.protocols], last_heard=self.now,
                        is_new=True)
        member.awaiting_join = Pending()
        group.members[member_id] = member
        if request.group_instance_id is not None:
            group.static_members[request.group_instance_id] = member_id
        if group.protocol_type is None:
            group.protocol_type = request.protocol_type
        if group.state is GroupState.PREPARING_REBALANCE:
            if group.initial_delay_deadline is not None:
                group.initial_delay_deadline = min(self.now + self.initial_delay_s,
                                                   group.initial_delay_limit)
            group.rebalance_deadline = max(group.rebalance_deadline,
                                           self.now + request.rebalance_timeout_ms / 1000)
        else:
            self._prepare_rebalance(group, f"member {member_id} joined")
        pending = member.awaiting_join
        self._maybe_complete_join(group)
        return pending

    def _update_member(self, member: Member, request: JoinRequest) -> None:
        member.protocols = [(n, bytes(m)) for n, m in request.protocols]
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.client_id = request.client_id
        member.client_host = request.client_host

    def _current_join(self, group: Group, member: Member) -> dict:
        return self._join_body(group, member, with_members=group.is_leader(member.member_id))

    def _join_body(self, group: Group, member: Member, with_members: bool,
                   skip_assignment: bool = False) -> dict:
        members = []
        if with_members:
            members = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                        "metadata": m.metadata_for(group.protocol_name)}
                       for m in group.members.values()]
        return {"error_code": NONE, "generation_id": group.generation,
                "protocol_type": group.protocol_type, "protocol_name": group.protocol_name,
                "leader": group.leader_id or "", "skip_assignment": skip_assignment,
                "member_id": member.member_id, "members": members}

    def _replace_static(self, group: Group, old_id: str, member_id: str,
                        request: JoinRequest) -> dict | Pending:
        """A static member restarted: the new incarnation takes the old one's place (and
        assignment) and the old one is fenced; no rebalance when nothing changed."""
        old = group.members.pop(old_id)
        self.answer_waiting(old, FENCED_INSTANCE_ID)
        member = Member(member_id, request.group_instance_id, request.client_id,
                        request.client_host, request.rebalance_timeout_ms,
                        request.session_timeout_ms, request.protocol_type,
                        [(n, bytes(m)) for n, m in request.protocols], last_heard=self.now,
                        assignment=old.assignment)
        group.members[member_id] = member
        group.static_members[request.group_instance_id] = member_id
        if group.leader_id == old_id:
            group.leader_id = member_id
        log.info("group %s: static member %s replaced %s", group.group_id,
                 request.group_instance_id, old_id)
        if group.state is GroupState.PREPARING_REBALANCE:
            member.awaiting_join = Pending()
            pending = member.awaiting_join
            self._maybe_complete_join(group)
            return pending
        if group.state is GroupState.STABLE and old.protocols == member.protocols:
            pending = Pending()
            is_leader = group.is_leader(member_id)
            body = self._join_body(group, member, with_members=is_leader,
                                   skip_assignment=is_leader)

            def stored(error: int) -> None:
                pending.complete(body if error == NONE else join_error(error, member_id))

            self.persist_group(group, None, stored)
            return pending
        # Changed protocols, or CompletingRebalance: the leader may be assigning to the old
        # id, which the new incarnation would never get; rebalance (as Kafka does).
        member.awaiting_join = Pending()
        self._prepare_rebalance(group, f"static member {request.group_instance_id} rejoined")
        pending = member.awaiting_join
        self._maybe_complete_join(group)
        return pending

    # -- rebalancing ------------------------------------------------------------------------

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            for member in group.members.values():
                if member.awaiting_sync is not None:
                    member.awaiting_sync.complete(sync_error(REBALANCE_IN_PROGRESS))
                    member.awaiting_sync = None
                    self.coordinator.wake(group.partition)
        was_empty = group.state is GroupState.EMPTY
        group.syncing = False
        group.transition(GroupState.PREPARING_REBALANCE, self.coordinator.wall_ms())
        timeout = group.rebalance_timeout_s()
        group.rebalance_deadline = self.now + timeout
        if was_empty and self.initial_delay_s > 0:
            group.initial_delay_deadline = self.now + min(self.initial_delay_s, timeout)
            group.initial_delay_limit = self.now + max(timeout, self.initial_delay_s)
        else:
            group.initial_delay_deadline = None
        log.info("group %s: preparing to rebalance generation %d (%s)", group.group_id,
                 group.generation, reason)

    def _maybe_complete_join(self, group: Group) -> None:
        if group.state is not GroupState.PREPARING_REBALANCE:
            return
        now = self.now
        if group.initial_delay_deadline is not None:
            if now < group.initial_delay_deadline:
                return
            group.initial_delay_deadline = None
        elif not (group.all_joined() or now >= group.rebalance_deadline):
            return
        self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        for member in [m for m in group.members.values() if m.awaiting_join is None]:
            log.info("group %s: removing member %s, which did not rejoin in time",
                     group.group_id, member.member_id)
            self._remove(group, member)
        group.generation += 1
        wall = self.coordinator.wall_ms()
        if not group.members:
            group.protocol_name = None
            group.leader_id = None
            group.transition(GroupState.EMPTY, wall)
            self.persist_group(group, None, lambda error: None)
            log.info("group %s: generation %d is empty", group.group_id, group.generation)
            return
        group.protocol_name = group.select_protocol()
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.transition(GroupState.COMPLETING_REBALANCE, wall)
        group.sync_deadline = self.now + group.rebalance_timeout_s()
        for member in group.members.values():
            body = self._join_body(group, member, with_members=group.is_leader(member.member_id))
            member.awaiting_join.complete(body)
            member.awaiting_join = None
            member.is_new = False
            member.last_heard = self.now
        self.coordinator.wake(group.partition)
        log.info("group %s: generation %d with %d members, protocol %s, leader %s",
                 group.group_id, group.generation, len(group.members), group.protocol_name,
                 group.leader_id)

    # -- SyncGroup ----------------------------------------------------------------------------

    def sync(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
             protocol_type: str | None, protocol_name: str | None,
             assignments: dict[str, bytes]) -> dict | Pending:
        group, error = self.coordinator.lookup(group_id)
        if error:
            return sync_error(error)
        error = self._check_member(group, member_id, instance_id, generation)
        if error:
            return sync_error(error)
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
                protocol_name is not None and protocol_name != group.protocol_name):
            return sync_error(INCONSISTENT_GROUP_PROTOCOL)
        member = group.members[member_id]
        member.last_heard = self.now
        if group.state is GroupState.PREPARING_REBALANCE:
            return sync_error(REBALANCE_IN_PROGRESS)
        if group.state is GroupState.STABLE:
            return self._sync_body(group, member.assignment)
        member.awaiting_sync = member.awaiting_sync or Pending()
        pending = member.awaiting_sync
        if group.is_leader(member_id) and not group.syncing:
            group.syncing = True
            generation_now = group.generation

            def stored(error: int) -> None:
                if group.generation != generation_now or \
                        group.state is not GroupState.COMPLETING_REBALANCE:
                    return
                if error != NONE:
                    for m in group.members.values():
                        if m.awaiting_sync is not None:
                            m.awaiting_sync.complete(sync_error(error))
                            m.awaiting_sync = None
                    self._prepare_rebalance(group, "the assignment could not be stored")
                    return
                for m in group.members.values():
                    m.assignment = assignments.get(m.member_id, b"")
                    if m.awaiting_sync is not None:
                        m.awaiting_sync.complete(self._sync_body(group, m.assignment))
                        m.awaiting_sync = None
                group.syncing = False
                group.transition(GroupState.STABLE, self.coordinator.wall_ms())
                log.info("group %s: generation %d is stable", group.group_id, group.generation)

            self.persist_group(group, assignments, stored)
        return pending

    @staticmethod
    def _sync_body(group: Group, assignment: bytes) -> dict:
        return {"error_code": NONE, "protocol_type": group.protocol_type,
                "protocol_name": group.protocol_name, "assignment": assignment}

    # -- Heartbeat and LeaveGroup --------------------------------------------------------------

    def heartbeat(self, group_id: str, generation: int, member_id: str,
                  instance_id: str | None) -> int:
        group, error = self.coordinator.lookup(group_id)
        if error:
            return error
        error = self._check_member(group, member_id, instance_id, generation)
        if error:
            return error
        group.members[member_id].last_heard = self.now
        return REBALANCE_IN_PROGRESS if group.state is GroupState.PREPARING_REBALANCE else NONE

    def _check_member(self, group: Group | None, member_id: str, instance_id: str | None,
                      generation: int | None) -> int:
        """Kafka's checks, in its order, for a request from a member of a generation."""
        if group is None:
            return UNKNOWN_MEMBER_ID
        if group.state is GroupState.DEAD:
            return COORDINATOR_NOT_AVAILABLE
        if group.fences(instance_id, member_id):
            return FENCED_INSTANCE_ID
        if member_id not in group.members or group.state is GroupState.EMPTY:
            return UNKNOWN_MEMBER_ID
        if generation is not None and generation != group.generation:
            return ILLEGAL_GENERATION
        return NONE

    def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> tuple[int, list]:
        """(top-level error, [(member_id, instance_id, error)]) for LeaveGroup."""
        group, error = self.coordinator.lookup(group_id)
        if error:
            return error, []
        if group is None:  # Kafka answers each member, not the request
            return NONE, [(m, i, UNKNOWN_MEMBER_ID) for m, i in members]
        results = []
        for member_id, instance_id in members:
            results.append((member_id, instance_id,
                            self._leave_one(group, member_id, instance_id)))
        return NONE, results

    def _leave_one(self, group: Group, member_id: str, instance_id: str | None) -> int:
        if instance_id is not None:
            known = group.static_members.get(instance_id)
            if known is None:
                return UNKNOWN_MEMBER_ID
            if member_id and known != member_id:
                return FENCED_INSTANCE_ID
            member_id = known
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            self._maybe_complete_join(group)
            return NONE
        member = group.members.get(member_id)
        if member is None:
            return UNKNOWN_MEMBER_ID
        log.info("group %s: member %s left", group.group_id, member_id)
        self._remove_and_rebalance(group, member, "a member left")
        return NONE

    # -- removal, timers ----------------------------------------------------------------------

    def answer_waiting(self, member: Member, error: int) -> None:
        if member.awaiting_join is not None:
            member.awaiting_join.complete(join_error(error, member.member_id))
            member.awaiting_join = None
        if member.awaiting_sync is not None:
            member.awaiting_sync.complete(sync_error(error))
            member.awaiting_sync = None

    def _remove(self, group: Group, member: Member) -> None:
        self.answer_waiting(member, UNKNOWN_MEMBER_ID)
        group.members.pop(member.member_id, None)
        if member.group_instance_id is not None and \
                group.static_members.get(member.group_instance_id) == member.member_id:
            del group.static_members[member.group_instance_id]
        self.coordinator.wake(group.partition)

    def _remove_and_rebalance(self, group: Group, member: Member, reason: str) -> None:
        self._remove(group, member)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, reason)
        self._maybe_complete_join(group)

    def tick(self, now: float) -> None:
        """Expire silent members and pending ids; finish joins and syncs that are due."""
        for group in self.coordinator.owned_groups():
            self.run_timers(group, now)

    def run_timers(self, group: Group, now: float) -> None:
        """The group's timers that are due. The coordinator's thread runs them every tick,
        and ``lookup`` before any request reads the group: Kafka's timers fire on their
        deadline, so a request sent just after a session ran out (DeleteGroups after the
        last static member's session) must not find the member still there."""
        for member_id, expiry in list(group.pending_members.items()):
            if now >= expiry:
                del group.pending_members[member_id]
        for member in [m for m in group.members.values() if m.expired(now)]:
            log.info("group %s: member %s expired after %d ms without a heartbeat",
                     group.group_id, member.member_id, member.session_timeout_ms)
            self._remove_and_rebalance(group, member, "a member's session expired")
        if group.state is GroupState.COMPLETING_REBALANCE and not group.syncing \
                and now >= group.sync_deadline:
            for member in [m for m in group.members.values() if m.awaiting_sync is None]:
                log.info("group %s: member %s sent no SyncGroup in time", group.group_id,
                         member.member_id)
                self._remove(group, member)
            self._prepare_rebalance(group, "members did not sync in time")
        self._maybe_complete_join(group)

    def persist_group(self, group: Group, assignments: dict[str, bytes] | None,
                      on_done) -> None:
        """Write the group's metadata record (with ``assignments`` if given)."""
        members = tuple(MemberValue(
            m.member_id, m.group_instance_id, m.client_id, m.client_host,
            m.rebalance_timeout_ms, m.session_timeout_ms, m.metadata_for(group.protocol_name),
            m.assignment if assignments is None else assignments.get(m.member_id, b""))
            for m in group.members.values())
        value = GroupValue(group.protocol_type or "", group.generation, group.protocol_name,
                           group.leader_id, group.state_timestamp_ms, members)
        self.coordinator.persist(group.partition, [(group_key(group.group_id),
                                                    group_value(value))], on_done)
