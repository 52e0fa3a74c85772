"""Choosing a partition for a record.

``DefaultPartitioner`` places keyed records exactly where the Java client and
librdkafka's ``murmur2_random`` put them: ``(murmur2(key) & 0x7fffffff) % partitions``.
Records without a key stick to one partition until the accumulator starts a new batch
for it, then move to another (Kafka's sticky partitioning: fuller batches, fewer requests).

A custom partitioner is any object with ``partition(topic, key, partitions, available)
-> int`` (and optionally ``on_new_batch(topic, partition)``), or a plain callable
``f(topic, key, partitions) -> int``.

The hash runs once per keyed record, so it is in C when the records extension is built
(``pylog/records/_speedups.c``); :func:`py_murmur2` is its pure-Python twin (same answer
for every input), used without a C compiler or with ``PYLOG_RECORDS_SPEEDUPS=0``.
"""

from __future__ import annotations

import os
import random
import struct
import threading
from typing import Callable, Protocol, Sequence

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF

try:
    from pylog.records._speedups import murmur2 as native_murmur2
except ImportError:  # built without a C compiler
    native_murmur2 = None


def py_murmur2(data: bytes) -> int:
    """Kafka's murmur2 hash of ``data`` as an unsigned 32-bit integer (Utils.murmur2)."""
    if not isinstance(data, (bytes, bytearray)):  # any other buffer: its bytes, as C reads them
        data = memoryview(data).cast("B")
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


def native_hash() -> bool:
    """Whether keys are hashed in C: the extension is built and ``$PYLOG_RECORDS_SPEEDUPS``
    is not ``0``."""
    return native_murmur2 is not None and os.environ.get("PYLOG_RECORDS_SPEEDUPS", "1") != "0"


murmur2 = native_murmur2 if native_hash() else py_murmur2
"""Kafka's murmur2 hash of a bytes-like ``data`` as an unsigned 32-bit integer (Utils.murmur2)."""


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
        if key is not None:  # as murmur2_partition, inlined: once per keyed record
            return partitions[(murmur2(key) & 0x7FFFFFFF) % len(partitions)]
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
