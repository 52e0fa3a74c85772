"""Producer: asynchronous sends with batching, compression, retries and delivery futures.

``send()`` picks the partition, appends the record to the partition's open batch and
returns a ``concurrent.futures.Future``; a background sender thread (see
:mod:`pylog.client.sender`) ships batches when they reach ``batch_size`` bytes or have
waited ``linger_ms``. Every future ends with a RecordMetadata or an exception.
``produce()`` is the fast path for many records: the same, without a future (an optional
``on_delivery`` callback instead), so a record costs its encoding into the batch and
little more.

With a ``transactional_id`` the producer writes in transactions (see
:mod:`pylog.client.txn_manager` for the states and the kinds of errors): records sent
between ``begin_transaction`` and ``commit_transaction`` become visible to read_committed
consumers together, or never after ``abort_transaction``; consumed offsets can be
committed in the same transaction (``send_offsets_to_transaction``).
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future
from typing import Any, Callable, Iterable, Mapping

from pylog.client.accumulator import NEW_FUTURE, PartitionQueue, RecordAccumulator
from pylog.client.network import NetworkClient
from pylog.client.partitioner import as_partitioner
from pylog.client.results import RecordMetadata
from pylog.client.sender import Idempotence, Sender
from pylog.client.txn_manager import (
    ConsumerGroupMetadata, ProducerFencedError, TransactionAbortableError, TransactionAbortedError,
    TransactionManager, TransactionStateError, TxnState)
from pylog.errors import (
    ConfigError,
    PylogError,
    RequestTimedOutError,
    RetriableError,
    UnknownTopicOrPartitionError,
)
from pylog.records import Compression
from pylog.records.record import Headers
from pylog.types import TopicPartition

__all__ = ["Producer", "ConsumerGroupMetadata", "TransactionStateError", "TransactionAbortedError",
           "TransactionAbortableError", "ProducerFencedError"]
log = logging.getLogger(__name__)
_ACKS = {"0": 0, "1": 1, "all": -1, "-1": -1}
MAX_RETRIES = 2**31 - 1
MAX_IDEMPOTENT_IN_FLIGHT = 5


class Producer:
    """Send records to topics.

    >>> producer = Producer("127.0.0.1:9092", linger_ms=5, compression="zstd")
    >>> future = producer.send("events", b"hello", key=b"user-1")
    >>> future.result().offset
    41
    >>> for line in lines:  # many records: no future each
    ...     producer.produce("events", line, on_delivery=report)
    >>> producer.close()

    Parameters: ``acks`` 0 (no answer), 1 (leader wrote it) or "all"/-1 (in-sync replicas
    have it); ``linger_ms`` and ``batch_size`` (bytes) control batching; ``compression``
    none/gzip/snappy/lz4/zstd; ``retries`` and ``retry_backoff_ms`` for retriable errors;
    ``request_timeout_ms`` for every network call; ``partitioner`` (see
    :mod:`pylog.client.partitioner`); ``max_in_flight`` requests per broker connection;
    ``buffer_memory`` bytes may wait unsent before ``send`` blocks (at most
    ``max_block_ms``); ``delivery_timeout_ms`` bounds the time from send to result;
    ``security``: librdkafka-named security settings (a mapping or a
    :class:`~pylog.client.security.SecurityConfig`; default PLAINTEXT).
    ``enable_idempotence`` (default on, as in the Java client since 3.0): the broker writes
    each record once and in order per partition, whatever the retries; it needs acks=all
    (the default then), ``max_in_flight`` <= 5 and retries (default: until
    ``delivery_timeout_ms``). Left at its default, it turns off when ``acks`` or
    ``max_in_flight`` conflict; ``enable_idempotence=True`` with them raises ConfigError.
    ``transactional_id`` makes the producer transactional (idempotence is then on; a
    conflicting setting raises ConfigError): ``init_transactions`` once, then
    ``begin_transaction``, ``send``..., ``commit_transaction`` or ``abort_transaction``. The
    coordinator aborts a transaction left open longer than ``transaction_timeout_ms``.
    Bad settings raise ConfigError naming the setting.

    >>> producer = Producer("127.0.0.1:9092", transactional_id="orders-loader")
    >>> producer.init_transactions()
    >>> producer.begin_transaction()
    >>> producer.send("orders", b"order 17 paid")
    >>> producer.commit_transaction()
    """

    def __init__(self, bootstrap_servers: str | list[str], acks: int | str | None = None,
                 linger_ms: int = 5, batch_size: int = 16384, compression: str = "none",
                 retries: int | None = None,
                 retry_backoff_ms: int = 100, request_timeout_ms: int = 30000,
                 partitioner: Any = None, max_in_flight: int = 5, *, client_id: str = "pylog",
                 buffer_memory: int = 32 * 1024 * 1024, max_block_ms: int = 60000,
                 delivery_timeout_ms: int = 120000, metadata_max_age_ms: int = 300000,
                 clock: Callable[[], float] = time.monotonic,
                 wall_clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
                 security=None, enable_idempotence: bool | None = None,
                 transactional_id: str | None = None, transaction_timeout_ms: int = 60000) -> None:
        if transactional_id is not None:
            if not transactional_id:
                raise ConfigError("transactional_id", "must not be empty")
            if enable_idempotence is False:
                raise ConfigError("enable_idempotence", "must be on with transactional_id "
                                                        "(transactions build on idempotence)")
            if transaction_timeout_ms <= 0:
                raise ConfigError("transaction_timeout_ms", f"must be positive, got {transaction_timeout_ms}")
            enable_idempotence = True
        self.transactional_id = transactional_id
        self.enable_idempotence = _idempotence(enable_idempotence, acks, max_in_flight, retries)
        self.acks = -1 if acks is None and self.enable_idempotence else _parse_acks(1 if acks is None else acks)
        if retries is None:
            retries = MAX_RETRIES if self.enable_idempotence else 5
        for key, value in (("linger_ms", linger_ms), ("retries", retries),
                           ("retry_backoff_ms", retry_backoff_ms)):
            if value < 0:
                raise ConfigError(key, f"must not be negative, got {value}")
        for key, value in (("batch_size", batch_size), ("max_in_flight", max_in_flight),
                           ("buffer_memory", buffer_memory)):
            if value <= 0:
                raise ConfigError(key, f"must be positive, got {value}")
        codec = Compression.parse(compression)
        self._network = NetworkClient(bootstrap_servers, client_id=client_id,
                                      request_timeout_ms=request_timeout_ms,
                                      metadata_max_age_ms=metadata_max_age_ms,
                                      allow_auto_topic_creation=True, clock=clock,
                                      security=security)
        self._partitioner = as_partitioner(partitioner)
        self._clock = clock
        self._wall_clock_ms = wall_clock_ms
        self._max_block_s = max_block_ms / 1000
        self._retry_backoff_s = retry_backoff_ms / 1000
        self._retries = retries
        self._routes: dict[str, _TopicRoute] = {}
        on_new_batch = getattr(self._partitioner, "on_new_batch", None)
        self._acc = RecordAccumulator(
            batch_size=batch_size, linger_s=linger_ms / 1000, compression=codec,
            buffer_memory=buffer_memory, clock=clock,
            on_new_batch=(lambda tp: on_new_batch(tp.topic, tp.partition)) if on_new_batch else (lambda tp: None),
            transactional=transactional_id is not None)
        idempotence = Idempotence() if self.enable_idempotence else None
        self._txn = None if transactional_id is None else TransactionManager(
            self._network, transactional_id, transaction_timeout_ms, idempotence,
            retry_backoff_s=self._retry_backoff_s, clock=clock, on_state=self._on_txn_state)
        # send() refuses records while this is set (one check per record, as for closed):
        # a closed producer, or a transactional one outside a transaction.
        self._refusal: Callable[[], PylogError] | None = None if self._txn is None else self._txn.send_refusal
        self._sender = Sender(self._network, self._acc, acks=self.acks, retries=retries,
                              retry_backoff_s=self._retry_backoff_s,
                              request_timeout_ms=request_timeout_ms,
                              delivery_timeout_s=delivery_timeout_ms / 1000,
                              max_in_flight=max_in_flight, clock=clock,
                              idempotence=idempotence, txn=self._txn)
        self._closed = False
        self._sender.start()

    def send(self, topic: str, value: bytes | str | None, key: bytes | str | None = None,
             partition: int | None = None, headers: Mapping[str, Any] | Iterable | None = None,
             timestamp: int | None = None) -> Future:
        """Queue one record; the future resolves to RecordMetadata(topic, partition, offset, timestamp).

        ``timestamp`` is in ms (default: now). Errors finding the topic or delivering the
        record (UnknownTopicOrPartitionError, timeouts, broker errors) are set on the future.
        Raises TypeError for values that are not bytes/str/None, PylogError once closed;
        a transactional producer raises TransactionStateError outside a transaction.
        For many small records, :meth:`produce` (no future) is cheaper.
        """
        refusal = self._refusal
        if refusal is not None:
            raise refusal()
        try:
            return self._append(topic, value, key, partition, headers, timestamp, NEW_FUTURE)
        except PylogError as exc:
            failed: Future = Future()
            failed.set_exception(exc)
            return failed

    def produce(self, topic: str, value: bytes | str | None, key: bytes | str | None = None,
                partition: int | None = None, *,
                on_delivery: Callable[[PylogError | None, RecordMetadata], Any] | None = None,
                headers: Mapping[str, Any] | Iterable | None = None, timestamp: int | None = None) -> None:
        """Queue one record without a future: the fast path for many records.

        The record is encoded into its partition's batch at once and nothing else is kept
        for it, unless ``on_delivery(error, metadata)`` is given: the sender thread calls it
        once the record is written (``error`` None, ``metadata`` a RecordMetadata with its
        offset) or has failed (``error`` the exception, ``metadata.offset`` -1), in send
        order per partition. Keep callbacks short; one that raises is logged. ``flush``
        waits for every record, idempotence and transactions work as with :meth:`send`.

        >>> producer.produce("events", b"hello", key=b"user-1")
        >>> producer.produce("events", b"again", on_delivery=lambda err, md: print(err or md.offset))
        >>> producer.flush()
        42

        An error that keeps the record from being queued (UnknownTopicOrPartitionError,
        RequestTimedOutError when the buffer stays full for ``max_block_ms``) goes to
        ``on_delivery`` before ``produce`` returns, or is raised without one. Raises
        TypeError for values that are not bytes/str/None, PylogError once closed;
        a transactional producer raises TransactionStateError outside a transaction.
        A record that fails with nobody waiting for it is counted in a logged warning.
        """
        refusal = self._refusal
        if refusal is not None:
            raise refusal()
        try:
            self._append(topic, value, key, partition, headers, timestamp, on_delivery)
        except PylogError as exc:
            if on_delivery is None:
                raise
            on_delivery(exc, RecordMetadata(topic, -1 if partition is None else partition, -1,
                                            -1 if timestamp is None else int(timestamp)))

    def _append(self, topic: str, value, key, partition: int | None, headers, timestamp: int | None,
                waiter: object) -> Future | None:
        """Queue a record for ``send``/``produce`` (see RecordAccumulator.append's ``waiter``)."""
        if value is not None and value.__class__ is not bytes:
            value = _to_bytes("value", value)
        if key is not None and key.__class__ is not bytes:
            key = _to_bytes("key", key)
        try:
            route = self._routes.get(topic)
            if route is None or route.snapshot is not self._network.snapshot():
                route = self._route(topic)
            if partition is None:
                partition = self._partitioner.partition(topic, key, route.partitions, route.available)
            queue = route.queues.get(partition)
            if queue is None:
                queue = self._partition_queue(route, topic, partition)
            return self._acc.append_to(queue, key, value, _headers(headers) if headers else (),
                                       self._wall_clock_ms() if timestamp is None else int(timestamp),
                                       self._max_block_s, waiter)
        except PylogError as exc:
            if self._txn is not None:
                self._txn.record_failed(exc)  # the transaction cannot commit without it
            raise

    def _route(self, topic: str) -> "_TopicRoute":
        """The topic's partitions, looked up again when the metadata snapshot changed (the
        sender refreshes it when it is stale or old)."""
        snapshot = self._network.snapshot()
        route = self._routes.get(topic)
        if route is None or route.snapshot is not snapshot or self._network.stale:
            metadata = self._topic_metadata(topic)
            partitions = sorted(metadata.partitions)
            route = self._routes[topic] = _TopicRoute(
                self._network.snapshot(), partitions,
                [p for p in partitions if metadata.partitions[p].leader >= 0],
                {p: old for p, old in ({} if route is None else route.queues).items() if p in partitions})
        return route

    def _partition_queue(self, route: "_TopicRoute", topic: str, partition: int) -> PartitionQueue:
        """The accumulator's queue for a partition the route has not used yet."""
        if partition not in route.partitions:
            raise UnknownTopicOrPartitionError(f"{topic} has no partition {partition} "
                                               f"(partitions 0-{len(route.partitions) - 1})")
        queue = route.queues[partition] = self._acc.partition_queue(TopicPartition(topic, partition))
        return queue

    def _topic_metadata(self, topic: str):
        deadline = self._clock() + self._max_block_s
        unknown = 0
        while True:
            try:
                metadata = self._network.topic(topic)
                if metadata.partitions:
                    return metadata
                raise UnknownTopicOrPartitionError(f"topic {topic!r} has no partitions yet")
            except RetriableError as exc:
                # A topic being auto-created answers LEADER_NOT_AVAILABLE for a moment; a
                # topic that stays unknown for ``retries`` refreshes does not exist.
                unknown += isinstance(exc, UnknownTopicOrPartitionError)
                if unknown > self._retries or self._clock() + self._retry_backoff_s > deadline:
                    raise
                self._network.mark_stale()
                time.sleep(self._retry_backoff_s)

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued now and wait until every record has a result.

        Raises RequestTimedOutError if that takes longer than ``timeout`` seconds.
        """
        deadline = None if timeout is None else self._clock() + timeout
        acc = self._acc
        with acc.cond:
            acc.flushing += 1
            acc.cond.notify_all()
            try:
                while acc.incomplete:
                    remaining = None if deadline is None else deadline - self._clock()
                    if remaining is not None and remaining <= 0:
                        raise RequestTimedOutError(f"flush: {acc.incomplete} batches still undelivered "
                                                   f"after {timeout:g}s")
                    acc.cond.wait(1.0 if remaining is None else min(remaining, 1.0))
            finally:
                acc.flushing -= 1

    # -- transactions ----------------------------------------------------------------

    def init_transactions(self, timeout: float | None = None) -> None:
        """Register the transactional id with its coordinator and take the producer id,
        fencing any older producer with the same id (its open transaction is aborted).
        Call once, before the first transaction.

        ``timeout`` seconds (default ``max_block_ms``); after RequestTimedOutError call it
        again. Raises ProducerFencedError, TransactionalIdAuthorizationFailedError
        (fatal: close the producer), TransactionStateError when called twice.
        """
        txn = self._transactional("init_transactions")
        txn.init(self._deadline(timeout))

    def begin_transaction(self) -> None:
        """Start a transaction: ``send`` is allowed until it is committed or aborted.
        Raises TransactionStateError outside state READY (no network call)."""
        self._transactional("begin_transaction").begin()

    def send_offsets_to_transaction(self, offsets: Mapping[TopicPartition | tuple[str, int], int],
                                    group: str | ConsumerGroupMetadata, timeout: float | None = None) -> None:
        """Commit a consumer group's offsets (partition -> next offset to read) as part of
        the transaction: they become the group's committed offsets only if it commits.

        ``group``: the group id, or a :class:`ConsumerGroupMetadata` with the member's
        generation and id (the coordinator then refuses a member that left the group).
        Raises TransactionStateError outside a transaction; a refused commit makes the
        transaction abortable (TopicAuthorizationFailedError, UnknownMemberIdError, ...).
        """
        txn = self._transactional("send_offsets_to_transaction")
        metadata = group if isinstance(group, ConsumerGroupMetadata) else ConsumerGroupMetadata(str(group))
        if not metadata.group_id:
            raise ConfigError("group", "must not be empty")
        wanted = {tp if isinstance(tp, TopicPartition) else TopicPartition(*tp): int(offset)
                  for tp, offset in offsets.items()}
        txn.send_offsets(wanted, metadata, self._deadline(timeout))

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Deliver every record of the transaction, then commit it (EndTxn).

        ``timeout`` seconds (default ``max_block_ms``): after RequestTimedOutError call it
        again. If a record could not be delivered it raises TransactionAbortableError:
        call ``abort_transaction``. ProducerFencedError and other fatal errors leave only
        ``close``.
        """
        txn = self._transactional("commit_transaction")
        deadline = self._deadline(timeout)
        txn.begin_commit()
        self.flush(max(deadline - self._clock(), 0.0))
        txn.end(True, deadline)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the transaction: records not yet sent fail with TransactionAbortedError,
        records already written are never shown to read_committed consumers.

        Allowed in a transaction and after an abortable error; after RequestTimedOutError
        call it again.
        """
        txn = self._transactional("abort_transaction")
        deadline = self._deadline(timeout)
        txn.begin_abort()
        self.flush(max(deadline - self._clock(), 0.0))  # the sender fails what it drains now
        txn.end(False, deadline)

    def _transactional(self, operation: str) -> TransactionManager:
        if self._closed:
            raise PylogError(f"{operation}: the producer is closed")
        if self._txn is None:
            raise TransactionStateError(f"{operation}: this producer is not transactional "
                                        f"(create it with transactional_id=...)")
        return self._txn

    def _deadline(self, timeout: float | None) -> float:
        return self._clock() + (self._max_block_s if timeout is None else timeout)

    def _on_txn_state(self, state: TxnState) -> None:
        if not self._closed:
            self._refusal = None if state is TxnState.IN_TRANSACTION else self._txn.send_refusal

    def close(self, timeout: float | None = None) -> None:
        """Deliver what is queued (within ``timeout`` seconds), stop the sender, disconnect.
        A transaction still open is aborted first, as the Java client does.

        Records still undelivered when the timeout passes fail with RequestTimedOutError.
        """
        if self._closed:
            return
        deadline = None if timeout is None else self._clock() + timeout
        if self._txn is not None and self._txn.state in (
                TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR, TxnState.ABORTING):
            try:
                self.abort_transaction(timeout)
            except PylogError as exc:
                log.warning("closing producer %s: the open transaction was not aborted (%s); "
                            "its coordinator aborts it after transaction_timeout_ms", self.transactional_id, exc)
        self._closed = True
        self._refusal = _closed_error
        with self._acc.cond:
            self._sender.closing = True
            self._acc.cond.notify_all()
        self._sender.join(None if deadline is None else max(deadline - self._clock(), 0.0))
        if self._sender.is_alive():
            error = RequestTimedOutError("the producer was closed before the record was delivered")
            for batch in self._acc.queued_batches():
                self._sender._fail(batch, error)
            self._sender.join(5)
        self._network.close()

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


class _TopicRoute:
    """A topic's partitions under one metadata snapshot: all, with a leader, and the
    accumulator queue of each partition used (looked up once, not per record)."""

    __slots__ = ("snapshot", "partitions", "available", "queues")

    def __init__(self, snapshot, partitions: list[int], available: list[int],
                 queues: dict[int, PartitionQueue]) -> None:
        self.snapshot, self.partitions, self.available, self.queues = snapshot, partitions, available, queues


def _closed_error() -> PylogError:
    return PylogError("the producer is closed")


def _parse_acks(acks: int | str) -> int:
    parsed = _ACKS.get(str(acks).strip().lower())
    if parsed is None:
        raise ConfigError("acks", f"must be 0, 1 or all (-1), got {acks!r}")
    return parsed


def _idempotence(wanted: bool | None, acks, max_in_flight: int, retries: int | None) -> bool:
    """Whether the producer is idempotent: ``wanted``, or by default unless a setting conflicts."""
    conflicts = []
    if acks is not None and _parse_acks(acks) != -1:
        conflicts.append(("acks", f"must be all (-1) with enable_idempotence, got {acks!r}"))
    if max_in_flight > MAX_IDEMPOTENT_IN_FLIGHT:
        conflicts.append(("max_in_flight", f"must be at most {MAX_IDEMPOTENT_IN_FLIGHT} with "
                          f"enable_idempotence, got {max_in_flight}"))
    if retries == 0:
        conflicts.append(("retries", "must be positive with enable_idempotence"))
    if wanted and conflicts:
        raise ConfigError(*conflicts[0])
    return bool(wanted if wanted is not None else not conflicts)


def _to_bytes(name: str, value) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"{name} must be bytes, str or None, not {type(value).__name__}")


def _headers(headers: Mapping[str, Any] | Iterable | None) -> Headers:
    if not headers:
        return ()
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    return tuple((str(k), _to_bytes("header value", v)) for k, v in pairs)
