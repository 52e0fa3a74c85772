"""Choosing a partition for a record.

``DefaultPartitioner`` places keyed records exactly where the Java client and
librdkafka's ``murmur2_random`` put them: ``(murmur2(key) & 0x7fffffff) % partitions``.
Records without a key stick to one partition until the accumulator starts a new batch
for it, then move to another (Kafka's sticky partitioning: fuller batches, fewer requests).

A custom partitioner is any object with ``partition(topic, key, partitions, available)
-> int`` (and optionally ``on_new_batch(topic, partition)``), or a plain callable
``f(topic, key, partitions) -> int``.
"""

from __future__ import annotations

import random
import struct
import threading
from typing import Callable, Protocol, Sequence

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 hash of ``data`` as an unsigned 32-bit integer (Utils.murmur2)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length & ~3
    for (k,) in struct.iter_unpack("<I", data[:whole]):
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    extra = length & 3
    if extra == 3:
        h ^= data[whole + 2] << 16
    if extra >= 2:
        h ^= data[whole + 1] << 8
    if extra >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def murmur2_partition(key: bytes, num_partitions: int) -> int:
    """The partition index Java and librdkafka (murmur2_random) choose for ``key``."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


class Partitioner(Protocol):
    def partition(self, topic: str, key: bytes | None, partitions: Sequence[int],
                  available: Sequence[int]) -> int: ...


class DefaultPartitioner:
    """murmur2 for keyed records; sticky for records without a key."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._sticky: dict[str, int] = {}
        self._lock = threading.Lock()

    def partition(self, topic: str, key: bytes | None, partitions: Sequence[int],
                  available: Sequence[int]) -> int:
        if key is not None:
            return partitions[murmur2_partition(key, len(partitions))]
        with self._lock:
            current = self._sticky.get(topic)
            if current is None or current not in partitions:
                current = self._sticky[topic] = self._rng.choice(list(available or partitions))
            return current

    def on_new_batch(self, topic: str, partition: int) -> None:
        """The batch for the sticky partition is full: move on to another partition."""
        with self._lock:
            if self._sticky.get(topic) == partition:
                del self._sticky[topic]


class RoundRobinPartitioner:
    """Every record (keyed or not) to the next partition in turn."""

    def __init__(self) -> None:
        self._next: dict[str, int] = {}
        self._lock = threading.Lock()

    def partition(self, topic: str, key: bytes | None, partitions: Sequence[int],
                  available: Sequence[int]) -> int:
        choices = list(available or partitions)
        with self._lock:
            n = self._next.get(topic, 0)
            self._next[topic] = n + 1
        return choices[n % len(choices)]


class _CallablePartitioner:
    def __init__(self, func: Callable[[str, bytes | None, Sequence[int]], int]) -> None:
        self._func = func

    def partition(self, topic, key, partitions, available) -> int:
        return self._func(topic, key, partitions)


def as_partitioner(value: object | None) -> Partitioner:
    """The partitioner to use for a Producer's ``partitioner`` argument."""
    if value is None:
        return DefaultPartitioner()
    if hasattr(value, "partition"):
        return value  # type: ignore[return-value]
    if callable(value):
        return _CallablePartitioner(value)  # type: ignore[arg-type]
    raise TypeError(f"partitioner must have a partition() method or be callable, not {value!r}")
