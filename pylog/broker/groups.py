"""Handlers of the group APIs: request bodies in, the coordinator's answers out.

FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch,
OffsetDelete, ListGroups, DescribeGroups and DeleteGroups; TxnOffsetCommit is served
through ``Dispatcher.serve`` with ``txn_offset_commit``. Each handler translates one
API's versions into a call on ``GroupCoordinator`` and its answer back into that
version's response. Answers that must wait (a join until the rebalance completes, a
commit until the in-sync replicas have it) come back as a ``GroupWork`` that the network
layer parks until the coordinator wakes the group's ``__consumer_offsets`` partition.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from pylog.broker.txn_verification import NETWORK_EXCEPTION, VERIFY_TIMEOUT_S, verification_error
from pylog.coordinator.codes import (
    COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, REBALANCE_IN_PROGRESS)
from pylog.coordinator.coordinator import GroupCoordinator
from pylog.coordinator.group import Pending
from pylog.coordinator.membership import JoinRequest, join_error, sync_error
from pylog.coordinator.store import TxnProducer, offsets_tp
from pylog.errors import KafkaError
from pylog.log.producer_state import SENTINEL
from pylog.protocol import ApiKey
from pylog.security.acls import ResourceType
from pylog.security.operations import all_operations
from pylog.types import TopicPartition

GROUP_KEY = 0
TRANSACTION_KEY = 1
# Slack beyond a member's rebalance timeout before a parked JoinGroup gives up: the
# coordinator's own timers answer it first.
JOIN_SLACK_S = 5.0


@dataclass
class GroupWork:
    """A group request waiting for its ``Pending`` answers; ``attempt`` until it returns
    the response body."""

    pendings: list[Pending]
    render: Callable[[list[dict]], dict]
    on_timeout: dict
    deadline: float
    poll: Callable[[], None]
    partitions: list[TopicPartition] = field(default_factory=list)

    def attempt(self, final: bool) -> dict | None:
        self.poll()
        if all(p.body is not None for p in self.pendings):
            return self.render([p.body for p in self.pendings])
        if final:
            return self.render([p.body if p.body is not None else self.on_timeout
                                for p in self.pendings])
        return None


@dataclass
class VerifiedCommit:
    """A TxnOffsetCommit waiting for its transaction's verification, then for its write:
    ``commit()`` once ``verification`` says the partition is in the transaction (its
    answer, a body or a GroupWork to wait on), else ``refuse(error code)``."""

    verification: Pending
    commit: Callable[[], object]
    refuse: Callable[[int], dict]
    deadline: float
    partitions: list[TopicPartition]
    written: GroupWork | None = None

    def attempt(self, final: bool) -> dict | None:
        if self.written is not None:
            return self.written.attempt(final)
        answer = self.verification.body
        if answer is None:
            if not final:
                return None
            answer = {"error_code": NETWORK_EXCEPTION}
        if answer["error_code"]:
            return self.refuse(answer["error_code"])
        outcome = self.commit()
        if not isinstance(outcome, GroupWork):
            return outcome
        self.written = outcome  # its deadline is before this one's
        return outcome.attempt(final)


def _failed_commit(body: dict, code: int) -> dict:
    return {"throttle_time_ms": 0, "topics": [
        {"name": topic["name"], "partitions": [
            {"partition_index": p["partition_index"], "error_code": code}
            for p in topic["partitions"]]}
        for topic in body["topics"]]}


class GroupHandlers:
    """Group API handlers over one ``GroupCoordinator``."""

    def __init__(self, coordinator: GroupCoordinator, clock: Callable[[], float],
                 transactions=None, verifier=None) -> None:
        self.coordinator = coordinator
        self.clock = clock
        self.transactions = transactions  # a TransactionCoordinator: FindCoordinator type 1
        self.verifier = verifier  # a TxnVerifier: TxnOffsetCommit is verified (KIP-890)

    def handle(self, api_key: int, version: int, body: dict, client_id: str | None,
               client_host: str, listener: str | None = None):
        """``listener``: the name of the listener the client came in on (FindCoordinator
        answers with the coordinator's address there)."""
        if api_key == ApiKey.FIND_COORDINATOR:
            return self.find_coordinator(body, version, client_id or "", client_host, listener)
        handler = _HANDLERS[api_key]
        return handler(self, body, version, client_id or "", client_host)

    def _wait(self, group_id: str, pendings: list[Pending], render, on_timeout: dict,
              timeout_s: float):
        work = GroupWork(pendings, render, on_timeout, self.clock() + timeout_s,
                         self.coordinator.poll,
                         [offsets_tp(self.coordinator.partition_of(group_id))])
        return work.attempt(final=False) or work

    # -- FindCoordinator ----------------------------------------------------------------

    def find_coordinator(self, body: dict, version: int, client_id: str, host: str,
                         listener: str | None = None) -> dict:
        keys = body["coordinator_keys"] if version >= 4 else [body["key"]]
        found = [self._find_one(key, body["key_type"], listener) for key in keys]
        if version >= 4:
            return {"throttle_time_ms": 0, "coordinators": found}
        one = found[0]
        return {"throttle_time_ms": 0, "error_code": one["error_code"],
                "error_message": one["error_message"], "node_id": one["node_id"],
                "host": one["host"], "port": one["port"]}

    def _find_one(self, key: str, key_type: int, listener: str | None = None) -> dict:
        result = {"key": key, "node_id": -1, "host": "", "port": -1,
                  "error_code": COORDINATOR_NOT_AVAILABLE, "error_message": None}
        if key_type == TRANSACTION_KEY and self.transactions is not None:
            broker = self.transactions.coordinator_of(key)
            leaderless = "the transactional id's __transaction_state partition has no leader"
        elif key_type == GROUP_KEY:
            broker = self.coordinator.coordinator_of(key)
            leaderless = "the group's __consumer_offsets partition has no leader"
        else:
            result["error_message"] = f"coordinators of key type {key_type} are not served"
            return result
        if broker is None:
            result["error_message"] = leaderless
            return result
        if listener is not None and broker.on_listener(listener) is None:
            result["error_message"] = f"the coordinator has no listener {listener}"
            return result
        broker = broker.on_listener(listener) if listener is not None else broker
        result.update(node_id=broker.broker_id, host=broker.host, port=broker.port,
                      error_code=0)
        return result

    # -- membership -----------------------------------------------------------------------

    def join_group(self, body: dict, version: int, client_id: str, host: str):
        rebalance_timeout = body["rebalance_timeout_ms"] if version >= 1 else -1
        if rebalance_timeout < 0:
            rebalance_timeout = body["session_timeout_ms"]
        request = JoinRequest(
            body["group_id"], body["member_id"], body["group_instance_id"],
            body["session_timeout_ms"], rebalance_timeout, body["protocol_type"],
            [(p["name"], bytes(p["metadata"])) for p in body["protocols"]], client_id,
            f"/{host}" if host else "", version >= 4)
        answer = self.coordinator.run_locked(lambda: self.coordinator.membership.join(request))

        def render(bodies: list[dict]) -> dict:
            out = dict(bodies[0], throttle_time_ms=0)
            if version < 7 and out["protocol_name"] is None:
                out["protocol_name"] = ""
            if version < 9 and out["skip_assignment"]:
                # A restarted static leader keeps the current assignment; a client that
                # cannot be told to skip it is told it is not the leader (as Kafka does).
                out.update(members=[], leader="")
            return out

        if not isinstance(answer, Pending):
            return render([answer])
        return self._wait(request.group_id, [answer], render,
                          join_error(REBALANCE_IN_PROGRESS, request.member_id),
                          rebalance_timeout / 1000 + JOIN_SLACK_S)

    def sync_group(self, body: dict, version: int, client_id: str, host: str):
        assignments = {a["member_id"]: bytes(a["assignment"]) for a in body["assignments"]}
        answer = self.coordinator.run_locked(lambda: self.coordinator.membership.sync(
            body["group_id"], body["generation_id"], body["member_id"],
            body["group_instance_id"], body["protocol_type"], body["protocol_name"],
            assignments))

        def render(bodies: list[dict]) -> dict:
            return dict(bodies[0], throttle_time_ms=0)

        if not isinstance(answer, Pending):
            return render([answer])
        timeout = self.coordinator.config["group.max.session.timeout.ms"] / 1000
        return self._wait(body["group_id"], [answer], render,
                          sync_error(REBALANCE_IN_PROGRESS), timeout)

    def heartbeat(self, body: dict, version: int, client_id: str, host: str) -> dict:
        error = self.coordinator.run_locked(lambda: self.coordinator.membership.heartbeat(
            body["group_id"], body["generation_id"], body["member_id"],
            body["group_instance_id"]))
        return {"throttle_time_ms": 0, "error_code": error}

    def leave_group(self, body: dict, version: int, client_id: str, host: str) -> dict:
        if version >= 3:
            members = [(m["member_id"], m["group_instance_id"]) for m in body["members"]]
        else:
            members = [(body["member_id"], None)]
        error, results = self.coordinator.run_locked(
            lambda: self.coordinator.membership.leave(body["group_id"], members))
        if version < 3:
            return {"throttle_time_ms": 0, "error_code": error or results[0][2]}
        return {"throttle_time_ms": 0, "error_code": error, "members": [
            {"member_id": m, "group_instance_id": i, "error_code": e} for m, i, e in results]}

    # -- offsets ----------------------------------------------------------------------------

    def offset_commit(self, body: dict, version: int, client_id: str, host: str):
        generation = body["generation_id_or_member_epoch"] if version >= 1 else -1
        member_id = body["member_id"] if version >= 1 else ""
        return self._commit(body, lambda offsets: self.coordinator.offsets.commit(
            body["group_id"], generation, member_id, body["group_instance_id"], offsets))

    def txn_offset_commit(self, version: int, body: dict, session=None):
        """TxnOffsetCommit v0-4, as a ``Dispatcher.serve`` service. With a ``verifier``
        (KIP-890), the transaction coordinator first confirms that the group's offsets
        partition is in the producer's transaction."""
        def commit(producer: TxnProducer):
            # Clients before 2.0 do not retry COORDINATOR_LOAD_IN_PROGRESS.
            return self._commit(body, lambda offsets: self.coordinator.txn_offsets.commit(
                body["group_id"], producer, body["generation_id"], body["member_id"],
                body["group_instance_id"], offsets), loading_unavailable=version < 2)

        producer_id, epoch = body["producer_id"], body["producer_epoch"]
        if self.verifier is None:
            return commit(TxnProducer(producer_id, epoch))
        tp = offsets_tp(self.coordinator.partition_of(body["group_id"]))
        try:
            guard = self.coordinator.store.logs.leader_log(
                tp.topic, tp.partition).start_verification(producer_id)
        except KafkaError:
            guard = None  # not the coordinator: the commit itself answers so
        if guard is None:
            return commit(TxnProducer(producer_id, epoch, SENTINEL))
        verification = Pending()

        def answered(errors: dict) -> None:  # from the verifier's thread
            verification.complete({"error_code": errors.get(tp, 0)})
            self.coordinator.store.logs.waiters.notify(tp)

        errors = self.verifier.verify(body["transactional_id"], producer_id, epoch, {tp},
                                      answered)
        if errors is not None:
            verification.complete({"error_code": errors.get(tp, 0)})
        work = VerifiedCommit(verification, lambda: commit(TxnProducer(producer_id, epoch, guard)),
                              lambda code: _failed_commit(body, verification_error(code)),
                              self.clock() + VERIFY_TIMEOUT_S + self._commit_timeout_s(), [tp])
        return work.attempt(final=False) or work

    def _commit(self, body: dict, commit: Callable, loading_unavailable: bool = False):
        """An OffsetCommit or TxnOffsetCommit: ``commit(offsets)`` under the coordinator's
        lock answers an error code per partition, or a Pending one waited on until the
        write is replicated."""
        offsets = {}
        for topic in body["topics"]:
            for p in topic["partitions"]:
                offsets[(topic["name"], p["partition_index"])] = (
                    p["committed_offset"], p["committed_leader_epoch"], p["committed_metadata"])
        answer = self.coordinator.run_locked(lambda: commit(offsets))

        def render(bodies: list[dict]) -> dict:
            errors = bodies[0]
            if loading_unavailable:
                errors = {k: COORDINATOR_NOT_AVAILABLE if e == COORDINATOR_LOAD_IN_PROGRESS
                          else e for k, e in errors.items()}
            return {"throttle_time_ms": 0, "topics": [
                {"name": topic["name"], "partitions": [
                    {"partition_index": p["partition_index"],
                     "error_code": errors[(topic["name"], p["partition_index"])]}
                    for p in topic["partitions"]]}
                for topic in body["topics"]]}

        if not isinstance(answer, Pending):
            return render([answer])
        return self._wait(body["group_id"], [answer], render,
                          dict.fromkeys(offsets, COORDINATOR_NOT_AVAILABLE),
                          self._commit_timeout_s())

    def _commit_timeout_s(self) -> float:
        return self.coordinator.config["offsets.commit.timeout.ms"] / 1000 + 1

    def offset_fetch(self, body: dict, version: int, client_id: str, host: str) -> dict:
        require_stable = version >= 7 and body["require_stable"]
        if version >= 8:
            groups = [self._fetch_group(g["group_id"], g["topics"], version, require_stable)
                      for g in body["groups"]]
            return {"throttle_time_ms": 0, "groups": groups}
        topics = body["topics"]  # null (v2+): every partition with a committed offset
        result = self._fetch_group(body["group_id"], topics, version, require_stable)
        if version < 2 and result["error_code"]:
            for topic in result["topics"]:
                for partition in topic["partitions"]:
                    partition["error_code"] = result["error_code"]
        return {"throttle_time_ms": 0, "topics": result["topics"],
                "error_code": result["error_code"]}

    def _fetch_group(self, group_id: str, topics, version: int,
                     require_stable: bool = False) -> dict:
        wanted = None if topics is None else [(t["name"], list(t["partition_indexes"]))
                                              for t in topics]
        error, found = self.coordinator.run_locked(
            lambda: self.coordinator.offsets.fetch(group_id, wanted, require_stable))
        if error and wanted is not None:
            found = {(t, p): (None, error) for t, parts in wanted for p in parts}
        by_topic: dict[str, list] = {}
        for (topic, partition), (value, partition_error) in found.items():
            by_topic.setdefault(topic, []).append({
                "partition_index": partition,
                "committed_offset": -1 if value is None else value.offset,
                "committed_leader_epoch": -1 if value is None else value.leader_epoch,
                "metadata": "" if value is None else value.metadata,
                "error_code": partition_error})
        return {"group_id": group_id, "error_code": error, "topics": [
            {"name": name, "partitions": parts} for name, parts in by_topic.items()]}

    def offset_delete(self, body: dict, version: int, client_id: str, host: str):
        wanted = [(t["name"], p["partition_index"]) for t in body["topics"]
                  for p in t["partitions"]]
        answer = self.coordinator.run_locked(
            lambda: self.coordinator.offsets.delete_offsets(body["group_id"], wanted))

        def render(bodies: list[dict]) -> dict:
            error, results = bodies[0]["error_code"], bodies[0]["results"]
            return {"throttle_time_ms": 0, "error_code": error, "topics": [
                {"name": t["name"], "partitions": [
                    {"partition_index": p["partition_index"],
                     "error_code": results.get((t["name"], p["partition_index"]), 0)}
                    for p in t["partitions"]]} for t in body["topics"]] if not error else []}

        if not isinstance(answer, Pending):
            error, results = answer
            return render([{"error_code": error, "results": results}])
        return self._wait(body["group_id"], [answer], render,
                          {"error_code": COORDINATOR_NOT_AVAILABLE, "results": {}},
                          self.coordinator.config["offsets.commit.timeout.ms"] / 1000 + 1)

    # -- administration -----------------------------------------------------------------------

    def list_groups(self, body: dict, version: int, client_id: str, host: str) -> dict:
        types = {t.lower() for t in body.get("types_filter") or []}
        if types and "classic" not in types:
            return {"throttle_time_ms": 0, "error_code": 0, "groups": []}
        groups = self.coordinator.run_locked(
            lambda: self.coordinator.offsets.list_groups(set(body.get("states_filter") or [])))
        return {"throttle_time_ms": 0, "error_code": 0, "groups": groups}

    def describe_groups(self, body: dict, version: int, client_id: str, host: str) -> dict:
        groups = self.coordinator.run_locked(
            lambda: [self.coordinator.offsets.describe(g) for g in body["groups"]])
        if version >= 3 and body["include_authorized_operations"]:
            # (with an authorizer, RequestAuthorization narrows these)
            groups = [dict(g, authorized_operations=all_operations(ResourceType.GROUP))
                      if g["error_code"] == 0 else g for g in groups]
        return {"throttle_time_ms": 0, "groups": groups}

    def delete_groups(self, body: dict, version: int, client_id: str, host: str):
        names = list(body["groups_names"])
        answers = self.coordinator.run_locked(
            lambda: [self.coordinator.offsets.delete_group(g) for g in names])
        pendings = [a if isinstance(a, Pending) else _done({"error_code": a}) for a in answers]

        def render(bodies: list[dict]) -> dict:
            return {"throttle_time_ms": 0, "results": [
                {"group_id": g, "error_code": b["error_code"]} for g, b in zip(names, bodies)]}

        work = GroupWork(pendings, render, {"error_code": COORDINATOR_NOT_AVAILABLE},
                         self.clock() + self.coordinator.config["offsets.commit.timeout.ms"]
                         / 1000 + 1, self.coordinator.poll,
                         sorted({offsets_tp(self.coordinator.partition_of(g)) for g in names},
                                key=lambda tp: tp.partition))
        return work.attempt(final=False) or work


def _done(body: dict) -> Pending:
    pending = Pending()
    pending.complete(body)
    return pending


_HANDLERS = {
    ApiKey.FIND_COORDINATOR: GroupHandlers.find_coordinator,
    ApiKey.JOIN_GROUP: GroupHandlers.join_group,
    ApiKey.SYNC_GROUP: GroupHandlers.sync_group,
    ApiKey.HEARTBEAT: GroupHandlers.heartbeat,
    ApiKey.LEAVE_GROUP: GroupHandlers.leave_group,
    ApiKey.OFFSET_COMMIT: GroupHandlers.offset_commit,
    ApiKey.OFFSET_FETCH: GroupHandlers.offset_fetch,
    ApiKey.OFFSET_DELETE: GroupHandlers.offset_delete,
    ApiKey.LIST_GROUPS: GroupHandlers.list_groups,
    ApiKey.DESCRIBE_GROUPS: GroupHandlers.describe_groups,
    ApiKey.DELETE_GROUPS: GroupHandlers.delete_groups,
}
GROUP_APIS = frozenset(_HANDLERS)
