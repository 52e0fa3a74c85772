"""Topic placement: which brokers hold which partitions (the seeds' algorithm).

Over the live broker ids sorted ascending (``b[0..n-1]``), partition ``i`` goes to broker
``b[i mod n]`` and its replica ``j`` to ``b[(i + j) mod n]``; replica 0 is the preferred
leader. Pure functions, no ZooKeeper.
"""

from __future__ import annotations

import functools
import re
from typing import Iterable

from pylog.errors import (InvalidPartitionsError, InvalidReplicaAssignmentError,
                          InvalidReplicationFactorError, InvalidTopicError)

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")


# Topics the brokers write themselves; clients may read them but not produce to them.
INTERNAL_TOPICS = frozenset({"__consumer_offsets"})


@functools.lru_cache(maxsize=4096)
def validate_topic_name(name: str) -> None:
    """Raise InvalidTopicError unless ``name`` is a legal Kafka topic name. Called per
    partition of every produce: legal names are remembered (an error is never cached)."""
    if name in _LEGAL_NAMES_SEEN:
        return
    if not name or name in (".", ".."):
        raise InvalidTopicError(f"topic name {name!r} is not allowed")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(f"topic name is longer than {MAX_TOPIC_NAME_LENGTH} characters")
    if not _LEGAL_TOPIC_NAME.match(name):
        raise InvalidTopicError(f"topic name {name!r} has characters other than "
                                "ASCII letters, digits, '.', '_' and '-'")
    if len(_LEGAL_NAMES_SEEN) >= _LEGAL_NAMES_KEPT:
        _LEGAL_NAMES_SEEN.clear()  # bounded: clients may send any number of names
    _LEGAL_NAMES_SEEN.add(name)


_LEGAL_NAMES_SEEN: set[str] = set()
_LEGAL_NAMES_KEPT = 100_000


def assign_replicas(num_partitions: int, replication_factor: int,
                    live_broker_ids: Iterable[int]) -> dict[int, tuple[int, ...]]:
    """Map each partition to its replica list (leader first).

    Raises InvalidPartitionsError if ``num_partitions < 1`` and
    InvalidReplicationFactorError if ``replication_factor`` is below 1 or above the number
    of live brokers.

    >>> assign_replicas(4, 2, [3, 1, 2])
    {0: (1, 2), 1: (2, 3), 2: (3, 1), 3: (1, 2)}
    """
    brokers = sorted(set(live_broker_ids))
    if num_partitions < 1:
        raise InvalidPartitionsError(f"number of partitions must be at least 1, "
                                     f"got {num_partitions}")
    if replication_factor < 1:
        raise InvalidReplicationFactorError(f"replication factor must be at least 1, "
                                            f"got {replication_factor}")
    if replication_factor > len(brokers):
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor} is larger than the "
            f"{len(brokers)} live broker(s) {brokers}")
    n = len(brokers)
    return {i: tuple(brokers[(i + j) % n] for j in range(replication_factor))
            for i in range(num_partitions)}


def check_partition_growth(topic: str, current: int, total: int) -> None:
    """InvalidPartitionsError unless ``total`` adds partitions (they can never be removed)."""
    if total <= current:
        raise InvalidPartitionsError(f"The topic {topic} currently has {current} partition(s); "
                                     f"{total} would not be an increase.")


def assign_new_partitions(current: dict[int, tuple[int, ...]], total: int,
                          live_broker_ids: Iterable[int]) -> dict[int, tuple[int, ...]]:
    """Replicas for partitions ``len(current)..total-1`` with the topic's replication
    factor, placed by the same rule as at creation (partition i over the live brokers).

    >>> assign_new_partitions({0: (1, 2), 1: (2, 3)}, 3, [1, 2, 3])
    {2: (3, 1)}
    """
    factor = len(next(iter(current.values()))) if current else 1
    placed = assign_replicas(total, factor, live_broker_ids)
    return {p: replicas for p, replicas in placed.items() if p >= len(current)}


def check_replica_assignment(assignment: dict[int, list[int] | tuple[int, ...]],
                             broker_ids: Iterable[int], first: int = 0,
                             replication_factor: int | None = None
                             ) -> dict[int, tuple[int, ...]]:
    """A replica assignment a client gave (CreateTopics, CreatePartitions), checked as
    Kafka checks it: partitions ``first``, ``first + 1``, ... with no gap, each with the
    same number of replicas (``replication_factor`` if given), none twice, every one a
    broker in ``broker_ids``. Returns it with tuples. Raises InvalidReplicaAssignmentError.

    >>> check_replica_assignment({0: [2, 1], 1: [1, 2]}, [1, 2])
    {0: (2, 1), 1: (1, 2)}
    """
    if sorted(assignment) != list(range(first, first + len(assignment))):
        raise InvalidReplicaAssignmentError(
            f"partitions should be a consecutive sequence from {first}, got "
            f"{sorted(assignment)}")
    known = set(broker_ids)
    sizes = {len(replicas) for replicas in assignment.values()}
    if replication_factor is not None:
        sizes.add(replication_factor)
    if len(sizes) > 1:
        raise InvalidReplicaAssignmentError(
            "all partitions should have the same number of replicas"
            + (f" as the topic ({replication_factor})" if replication_factor else ""))
    checked = {}
    for partition, replicas in sorted(assignment.items()):
        replicas = tuple(replicas)
        if not replicas:
            raise InvalidReplicaAssignmentError(f"partition {partition} has no replicas")
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignmentError(
                f"duplicate replica assignment for partition {partition}: {list(replicas)}")
        unknown = sorted(set(replicas) - known)
        if unknown:
            raise InvalidReplicaAssignmentError(
                f"unknown broker(s) {unknown} in the replica assignment of partition "
                f"{partition}; the brokers are {sorted(known)}")
        checked[partition] = replicas
    return checked
