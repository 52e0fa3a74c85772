"""Consumer group administration: what kafka-consumer-groups.sh does, over the wire protocol.

    >>> with GroupsAdmin("127.0.0.1:9092") as admin:
    ...     [g.group_id for g in admin.list_groups(states=["Stable"])]
    ...     admin.describe_group("billing").state
    ...     admin.committed_offsets("billing")
    ['billing']
    'Stable'
    {TopicPartition(topic='invoices', partition=0): 1200}

Each group lives at its coordinator (FindCoordinator, see ``group_offsets``): DescribeGroups,
OffsetFetch, OffsetCommit, DeleteGroups and OffsetDelete go there, and are tried again
when the coordinator moved or is still loading. ListGroups goes to every broker, since
each lists only the groups it coordinates. Log offsets come from the partition leaders
(ListOffsets, through ``OffsetLister``).

Resetting offsets is an OffsetCommit without a member (generation -1, member id ""):
the coordinator accepts it only while the group has no active members.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

from pylog.client.group_offsets import (
    NO_OFFSET,
    commit_offsets,
    coordinator_request,
    fetch_offsets,
    find_coordinator_node,
    with_coordinator_retries,
)
from pylog.client.network import NetworkClient, check_error, with_retries
from pylog.client.offsets import LATEST, OffsetLister, run_per_leader
from pylog.errors import (
    KafkaError,
    PylogError,
    RetriableError,
    UnknownTopicOrPartitionError,
)
from pylog.protocol import ApiKey
from pylog.protocol.primitives import read_array, read_int16, read_int32, read_string
from pylog.types import BrokerEndpoint, TopicPartition

CONSUMER_PROTOCOL = "consumer"
DEAD = "Dead"
EMPTY = "Empty"
# Group states of the classic protocol, as ListGroups and DescribeGroups spell them.
GROUP_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", DEAD, EMPTY)
GROUP_ID_NOT_FOUND = 69


@dataclass(frozen=True, slots=True)
class GroupListing:
    """A group as ListGroups names it (state "" from brokers older than ListGroups v4)."""

    group_id: str
    protocol_type: str
    state: str


@dataclass(frozen=True, slots=True)
class GroupMember:
    """One member of a group, with the partitions its assignment gives it."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """A group as its coordinator describes it. ``state`` "Dead": no such group."""

    group_id: str
    state: str
    protocol_type: str
    assignment_strategy: str
    coordinator: BrokerEndpoint
    members: tuple[GroupMember, ...] = field(default=())

    @property
    def exists(self) -> bool:
        return self.state != DEAD

    @property
    def active(self) -> bool:
        """True while members hold the group (its offsets cannot be reset then)."""
        return self.state not in (EMPTY, DEAD)


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """One row of ``describe``: a partition the group has an offset for and/or a member on.

    ``current_offset`` is None without a committed offset, ``log_end_offset`` when the
    partition could not be asked (deleted topic), ``member`` for an unassigned partition.
    """

    partition: TopicPartition
    current_offset: int | None
    log_end_offset: int | None
    member: GroupMember | None

    @property
    def lag(self) -> int | None:
        if self.current_offset is None or self.log_end_offset is None:
            return None
        return self.log_end_offset - self.current_offset


@dataclass(frozen=True, slots=True)
class OffsetReset:
    """Where ``reset-offsets`` moves a group's offsets.

    ``scenario`` is one of ``SCENARIOS``; ``value`` is the offset (to-offset), the shift
    (shift-by, may be negative) or the epoch milliseconds (to-datetime).
    """

    scenario: str
    value: int = 0

    SCENARIOS = ("to-earliest", "to-latest", "to-offset", "shift-by", "to-datetime")


def decode_assignment(data: bytes | memoryview) -> tuple[TopicPartition, ...]:
    """The partitions in a ConsumerProtocolAssignment (empty bytes: none yet).

    Layout (all versions, 0-3, read alike: newer versions may only append fields)::

        version               int16
        assigned_partitions   int32 count, then per topic:
          topic                 string
          partitions            int32 count, then int32 partition ids
        user_data             nullable bytes (not read)
    """
    if not data:
        return ()
    _version, offset = read_int16(data, 0)

    def read_topic(buf, at: int):
        topic, at = read_string(buf, at)
        partitions, at = read_array(buf, at, read_int32, nullable=False)
        return [TopicPartition(topic, p) for p in partitions], at

    topics, _ = read_array(data, offset, read_topic)
    return tuple(sorted(tp for partitions in topics or () for tp in partitions))


class GroupsAdmin:
    """List, describe, reset and delete consumer groups.

    Parameters: ``bootstrap_servers``, ``client_id``, ``request_timeout_ms`` (every network
    call), ``attempts`` for retriable errors (coordinator moving or loading, leader
    changes) and ``sleep`` between them, ``security``: librdkafka-named security settings (a mapping or a
    :class:`~pylog.client.security.SecurityConfig`; default PLAINTEXT). Errors are KafkaError subclasses: for example
    GroupIdNotFoundError, NonEmptyGroupError, UnknownTopicOrPartitionError,
    UnsupportedVersionError (a broker without the API), NetworkExceptionError (no broker
    reachable).
    """

    def __init__(self, bootstrap_servers: str | list[str], client_id: str = "pylog",
                 request_timeout_ms: int = 30000, *, attempts: int = 3,
                 sleep: Callable[[float], None] = time.sleep, security=None) -> None:
        self._network = NetworkClient(bootstrap_servers, client_id=client_id,
                                      request_timeout_ms=request_timeout_ms, security=security)
        self._attempts = attempts
        self._sleep = sleep
        self._lister = OffsetLister(self._network, self._retry)

    def _retry(self, action):
        return with_retries(action, network=self._network, retries=self._attempts - 1,
                            backoff_s=0.1, sleep=self._sleep)

    def _at_coordinator(self, action):
        return with_coordinator_retries(action, self._attempts, self._sleep)

    # -- groups --------------------------------------------------------------------

    def list_groups(self, states: Iterable[str] | None = None) -> list[GroupListing]:
        """Consumer groups (protocol "consumer", or "" for groups that only hold offsets)
        of every broker, sorted by id; with ``states`` only the groups in one of them.

        >>> [g.group_id for g in admin.list_groups(states=["Empty"])]
        """
        wanted = sorted(set(states or ()))

        def body(version: int) -> dict:
            return {"states_filter": wanted, "types_filter": []}

        def ask(broker_id: int, _) -> list[dict]:
            response = self._network.request_to(broker_id, ApiKey.LIST_GROUPS, body)
            check_error(response["error_code"], f"ListGroups at broker {broker_id}")
            return response["groups"]

        def attempt() -> list[dict]:
            brokers = self._network.refresh_metadata([]).brokers
            answers = run_per_leader(dict.fromkeys(brokers), ask)
            for answer in answers:
                if isinstance(answer, BaseException):
                    raise answer
            return [group for answer in answers for group in answer]

        listings = {}
        for group in self._retry(attempt):
            if group["protocol_type"] in (CONSUMER_PROTOCOL, ""):
                listings[group["group_id"]] = GroupListing(
                    group["group_id"], group["protocol_type"], group.get("group_state", ""))
        found = sorted(listings.values(), key=lambda g: g.group_id)
        if wanted and any(not g.state for g in found):  # brokers before ListGroups v4
            found = [GroupListing(g.group_id, g.protocol_type, self.describe_group(g.group_id).state)
                     for g in found]
        return [g for g in found if not wanted or g.state in wanted]

    def describe_group(self, group: str) -> GroupDescription:
        """State, assignment strategy and members (with decoded assignments) of ``group``;
        state "Dead" when there is no such group.

        >>> [m.client_id for m in admin.describe_group("billing").members]
        """

        def attempt() -> GroupDescription:
            coordinator = find_coordinator_node(self._network, group)
            response = self._network.request_at(
                coordinator.host, coordinator.port, ApiKey.DESCRIBE_GROUPS,
                {"groups": [group], "include_authorized_operations": False})
            answer = response["groups"][0]
            if answer["error_code"] == GROUP_ID_NOT_FOUND:
                return GroupDescription(group, DEAD, "", "", coordinator)
            check_error(answer["error_code"], f"group {group}: describe")
            consumer = answer["protocol_type"] == CONSUMER_PROTOCOL
            members = tuple(GroupMember(
                m["member_id"], m.get("group_instance_id"), m["client_id"], m["client_host"],
                decode_assignment(m["member_assignment"]) if consumer else ())
                for m in answer["members"])
            return GroupDescription(group, answer["group_state"], answer["protocol_type"],
                                    answer["protocol_data"], coordinator, members)

        return self._at_coordinator(attempt)

    def delete_groups(self, groups: Sequence[str]) -> dict[str, KafkaError | None]:
        """Delete each group (its committed offsets too): None where it was deleted, else
        the coordinator's refusal, such as NonEmptyGroupError or GroupIdNotFoundError.

        >>> admin.delete_groups(["old-report"])
        {'old-report': None}
        """
        results: dict[str, KafkaError | None] = {}
        for group in dict.fromkeys(groups):
            results[group] = self._at_coordinator(lambda group=group: self._delete_group(group))
        return results

    def _delete_group(self, group: str) -> KafkaError | None:
        response = coordinator_request(self._network, group, ApiKey.DELETE_GROUPS,
                                       {"groups_names": [group]})
        code = next(r["error_code"] for r in response["results"] if r["group_id"] == group)
        if not code:
            return None
        cls = KafkaError.for_code(code)
        error = cls(cls.name)
        if isinstance(error, RetriableError):
            raise error
        return error

    # -- offsets -------------------------------------------------------------------

    def committed_offsets(self, group: str, partitions: Sequence[TopicPartition] | None = None
                          ) -> dict[TopicPartition, int]:
        """The group's committed offsets (of ``partitions``, or all), without the
        partitions it has none for."""
        found = fetch_offsets(self._network, group, partitions, attempts=self._attempts,
                              sleep=self._sleep)
        return {tp: offset for tp, offset in sorted(found.items()) if offset != NO_OFFSET}

    def commit_offsets(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Set the group's offsets (refused while the group has active members: UNKNOWN_MEMBER_ID
        or REBALANCE_IN_PROGRESS)."""
        commit_offsets(self._network, group, offsets, attempts=self._attempts, sleep=self._sleep)

    def delete_offsets(self, group: str, partitions: Sequence[TopicPartition]
                       ) -> dict[TopicPartition, KafkaError | None]:
        """Remove the group's committed offsets of ``partitions``: None where removed, else
        the partition's error (GroupSubscribedToTopicError while members consume it).
        Raises the group's error (GroupIdNotFoundError, NonEmptyGroupError, ...)."""
        topics: dict[str, list] = {}
        for tp in sorted(set(partitions)):
            topics.setdefault(tp.topic, []).append({"partition_index": tp.partition})
        body = {"group_id": group,
                "topics": [{"name": name, "partitions": ps} for name, ps in topics.items()]}

        def attempt() -> dict[TopicPartition, KafkaError | None]:
            response = coordinator_request(self._network, group, ApiKey.OFFSET_DELETE, body)
            check_error(response["error_code"], f"group {group}: delete offsets")
            results = {}
            for topic in response["topics"]:
                for p in topic["partitions"]:
                    cls = KafkaError.for_code(p["error_code"]) if p["error_code"] else None
                    results[TopicPartition(topic["name"], p["partition_index"])] = \
                        cls(cls.name) if cls else None
            return results

        return self._at_coordinator(attempt)

    def topic_partitions(self, topics: Mapping[str, Sequence[int] | None]) -> list[TopicPartition]:
        """The named partitions of each topic (None: all of them), checked to exist.

        Raises UnknownTopicOrPartitionError naming the topic or the missing partitions.
        """
        known = self._retry(lambda: self._network.topics(topics))
        chosen, missing = [], []
        for name, partitions in topics.items():
            ids = sorted(known[name].partitions) if partitions is None else list(partitions)
            for partition in dict.fromkeys(ids):
                tp = TopicPartition(name, partition)
                (chosen if partition in known[name].partitions else missing).append(tp)
        if missing:
            raise UnknownTopicOrPartitionError(
                "the partitions " + ", ".join(map(str, missing)) + " do not exist")
        return chosen

    def log_end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Latest offset of each partition that still exists (partitions of deleted topics
        and removed partitions are left out)."""
        partitions = list(dict.fromkeys(partitions))
        snapshot = self._network.refresh_metadata(sorted({tp.topic for tp in partitions}))
        existing = [tp for tp in partitions if tp.topic in snapshot.topics
                    and not snapshot.topics[tp.topic].error_code
                    and tp.partition in snapshot.topics[tp.topic].partitions]
        if not existing:
            return {}
        return self._lister.list([dict.fromkeys(existing, LATEST)])[0]

    def describe_offsets(self, group: str) -> tuple[GroupDescription, list[PartitionLag]]:
        """The group and, like ``kafka-consumer-groups.sh --describe``, a row per assigned
        partition (members with most partitions first) and then per partition with a
        committed offset but no member: committed offset, log end offset and lag."""
        description = self.describe_group(group)
        if not description.exists:
            return description, []
        committed = self.committed_offsets(group)
        owners = {tp: m for m in description.members for tp in m.assignment}
        ordered = sorted(owners, key=lambda tp: (-len(owners[tp].assignment), owners[tp].member_id, tp))
        ordered += sorted(tp for tp in committed if tp not in owners)
        log_end = self.log_end_offsets(ordered)
        return description, [PartitionLag(tp, committed.get(tp), log_end.get(tp), owners.get(tp))
                             for tp in ordered]

    def plan_reset(self, group: str, partitions: Sequence[TopicPartition],
                   reset: OffsetReset) -> dict[TopicPartition, int]:
        """The offsets ``reset`` moves ``partitions`` to, kept within each partition's
        ``[log start, latest]`` (as Kafka's tool does). Nothing is committed.

        A timestamp with no record at or after it resets to the latest offset. Raises
        PylogError for shift-by on a partition without a committed offset.
        """
        bounds = self._lister.bounds(list(partitions))
        if reset.scenario == "to-earliest":
            return {tp: bounds[tp].log_start_offset for tp in partitions}
        if reset.scenario == "to-latest":
            return {tp: bounds[tp].latest for tp in partitions}
        if reset.scenario == "to-datetime":
            found = self._lister.list([dict.fromkeys(partitions, reset.value)])[0]
            return {tp: bounds[tp].latest if found[tp] < 0 else found[tp] for tp in partitions}
        if reset.scenario == "to-offset":
            wanted = dict.fromkeys(partitions, reset.value)
        elif reset.scenario == "shift-by":
            committed = self.committed_offsets(group, partitions)
            without = [str(tp) for tp in partitions if tp not in committed]
            if without:
                raise PylogError(f"cannot shift the offsets of {', '.join(without)}: group "
                                 f"{group!r} has no committed offset there")
            wanted = {tp: committed[tp] + reset.value for tp in partitions}
        else:
            raise ValueError(f"unknown reset scenario {reset.scenario!r}")
        return {tp: min(max(offset, bounds[tp].log_start_offset), bounds[tp].latest)
                for tp, offset in wanted.items()}

    def close(self) -> None:
        self._network.close()

    def __enter__(self) -> "GroupsAdmin":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


__all__ = ["GroupsAdmin", "GroupDescription", "GroupMember", "GroupListing", "PartitionLag",
           "OffsetReset", "decode_assignment", "GROUP_STATES"]
