"""Topic placement: which brokers hold which partitions (the seeds' algorithm).

Over the live broker ids sorted ascending (``b[0..n-1]``), partition ``i`` goes to broker
``b[i mod n]`` and its replica ``j`` to ``b[(i + j) mod n]``; replica 0 is the preferred
leader. Pure functions, no ZooKeeper.
"""

from __future__ import annotations

import functools
import re
from typing import Iterable

from pylog.errors import (InvalidPartitionsError, InvalidReplicationFactorError,
                          InvalidTopicError)

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
        raise InvalidPartitionsError(f"topic {topic!r} has {current} partitions; the new "
                                     f"count must be larger, got {total}")


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
