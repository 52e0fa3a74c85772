"""One SimpleConsumer per process and client settings, shared by every caller in it.

A Spark executor's Python worker runs many map tasks one after another (and a thread
pool may run several at once). A consumer per task pays ApiVersions and Metadata each
time; :func:`shared_consumer` hands every task the same consumer instead, so its broker
connections and metadata outlive the task. The consumer is thread-safe: each connection
serialises its requests under a lock, and metadata snapshots are replaced whole.

A shared consumer re-resolves leaders by itself: after NOT_LEADER_OR_FOLLOWER,
UNKNOWN_TOPIC_OR_PARTITION, a dead connection or metadata older than
``metadata_max_age_ms`` it refreshes metadata and retries (see
:mod:`pylog.client.network`), so a moved leader or a restarted broker needs no new
consumer.

The cache is per process: a forked child starts with an empty cache (it must not share
its parent's sockets).
"""

from __future__ import annotations

import atexit
import os
import threading
from typing import Any, Iterable

from pylog.client.consumer import SimpleConsumer
from pylog.client.network import parse_bootstrap

_lock = threading.Lock()
_consumers: dict[tuple, SimpleConsumer] = {}


class SharedConsumer:
    """A caller's handle on a cached SimpleConsumer: every method but ``close`` is the
    consumer's; ``close`` (and leaving a ``with`` block) does nothing, since other callers
    use the same connections. :func:`close_shared_consumers` closes them for real."""

    __slots__ = ("_consumer",)

    def __init__(self, consumer: SimpleConsumer) -> None:
        self._consumer = consumer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._consumer, name)

    def close(self) -> None:
        """Leave the shared consumer open for the process's other callers."""

    def __enter__(self) -> "SharedConsumer":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def shared_consumer(bootstrap_servers: str | Iterable[str], **settings: Any) -> SharedConsumer:
    """The process's SimpleConsumer for these bootstrap servers and settings (created on
    first use); the same arguments as ``SimpleConsumer``.

    >>> consumer = shared_consumer(["b1:9092", "b2:9092"], client_id="loader",
    ...                            isolation_level="read_committed")
    >>> result = consumer.fetch_raw("events", 0, 1200)
    >>> consumer.close()   # a no-op: the connections stay for the next task

    Raises ConfigError for bad settings (as SimpleConsumer does).
    """
    key = (tuple(parse_bootstrap(bootstrap_servers)), tuple(sorted(settings.items())))
    with _lock:
        consumer = _consumers.get(key)
        if consumer is None:
            consumer = _consumers[key] = SimpleConsumer(
                [f"{host}:{port}" for host, port in key[0]], **settings)
    return SharedConsumer(consumer)


def close_shared_consumers() -> None:
    """Close every cached consumer (at exit, or in tests); the next call makes new ones."""
    with _lock:
        consumers = list(_consumers.values())
        _consumers.clear()
    for consumer in consumers:
        consumer.close()


def _forget_after_fork() -> None:
    # The child's copies of the parent's sockets are the parent's: drop them unclosed.
    global _lock
    _lock = threading.Lock()
    _consumers.clear()


os.register_at_fork(after_in_child=_forget_after_fork)
atexit.register(close_shared_consumers)

__all__ = ["shared_consumer", "close_shared_consumers", "SharedConsumer"]
