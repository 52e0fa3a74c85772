"""ZkConsumer: the seeds' high-level consumer, its group coordinated through ZooKeeper.

Group membership, rebalancing and ownership are ``pylog.cluster.group_member``; this
module fetches the owned partitions and hands their records to the application.

Delivery is at least once: a record counts as processed only when the application comes
back for more (the next iteration step, ``poll`` or ``commit``), and only processed
offsets are committed (periodically, on ``commit()`` and before a partition moves away).
After a crash, the partition's next owner starts from the last commit and may see some
records again, never skip one. A consumer whose ZooKeeper connection is suspended, or
whose session lease has run out after a pause, stops handing out records; records it
fetched but did not hand out are fetched again later.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from itertools import repeat
from types import SimpleNamespace
from typing import Callable, Iterable, Iterator, Mapping

from pylog.client.consumer import SimpleConsumer
from pylog.client.results import OffsetOutOfRange
from pylog.cluster.consumer_group import Subscription
from pylog.cluster.group_member import GroupMember
from pylog.cluster.registry import registered_brokers
from pylog.cluster.session import close_client, connect_client
from pylog.errors import ConfigError, PylogError
from pylog.records import decode_columns
from pylog.records.record import Headers
from pylog.types import TopicPartition

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ConsumedRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()


class ZkConsumer:
    """A member of a ZooKeeper-coordinated consumer group.

    Parameters:
        zookeeper_connect: ``host:port[,...][/chroot]`` of the cluster.
        group_id: the consumer group.
        topics / topic_pattern: named topics, or a whitelist regex matched against every
            topic name (like ``createMessageStreamsByFilter``); exactly one of the two.
        bootstrap_servers: brokers to fetch from; read from ``/brokers/ids`` if None.
        auto_offset_reset: ``earliest`` or ``latest``, where a group without a committed
            offset starts (also used after an out-of-range offset).
        auto_commit / auto_commit_interval_ms: commit processed offsets periodically.
        session_timeout_ms: ZooKeeper session timeout; a crashed member's partitions move
            after it.
        rebalance_max_retries / rebalance_backoff_ms: claiming partitions still owned by
            someone else is retried this often, this far apart.
        consumer_timeout_ms: iteration ends after this long without a record (None: never).

    >>> with ZkConsumer("127.0.0.1:2181", "billing", topics=["events"]) as consumer:
    ...     for record in consumer:
    ...         handle(record.value)

    Raises ConfigError for bad parameters and ZooKeeperUnavailableError if ZooKeeper
    cannot be reached.
    """

    def __init__(self, zookeeper_connect: str, group_id: str, *, topics: Iterable[str] = (),
                 topic_pattern: str | None = None,
                 bootstrap_servers: str | list[str] | None = None,
                 auto_offset_reset: str = "earliest", auto_commit: bool = True,
                 auto_commit_interval_ms: int = 5000, session_timeout_ms: int = 6000,
                 rebalance_max_retries: int = 20, rebalance_backoff_ms: int = 250,
                 fetch_max_bytes: int = 1048576, fetch_max_wait_ms: int = 100,
                 consumer_timeout_ms: int | None = None, consumer_id: str | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.subscription = Subscription.of(topics, topic_pattern)
        if auto_offset_reset not in ("earliest", "latest"):
            raise ConfigError("auto_offset_reset", f"must be earliest or latest, "
                                                   f"got {auto_offset_reset!r}")
        if not group_id:
            raise ConfigError("group_id", "must not be empty")
        self.group_id = group_id
        self.consumer_id = consumer_id or (
            f"{group_id}_{socket.gethostname()}-{int(time.time() * 1000)}-{uuid.uuid4().hex[:8]}")
        self._reset = auto_offset_reset
        self._auto_commit = auto_commit
        self._commit_interval = auto_commit_interval_ms / 1000
        self._fetch_max_bytes = fetch_max_bytes
        self._fetch_max_wait_ms = fetch_max_wait_ms
        self._consumer_timeout = None if consumer_timeout_ms is None else consumer_timeout_ms / 1000
        self._clock, self._sleep = clock, sleep
        self._lock = threading.Condition()
        self._claim_counter = 0
        self._claims: dict[TopicPartition, int] = {}
        self._positions: dict[TopicPartition, int | None] = {}
        self._processed: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}
        self._delivery = _Delivery([], [])
        self._paused = False
        self._closed = False
        self._next_commit = clock() + self._commit_interval
        self._bootstrap = bootstrap_servers
        self._client = connect_client(zookeeper_connect, session_timeout_ms / 1000,
                                      session_timeout_ms / 1000 + 10)
        # The member calls back through the Ownership protocol.
        ownership = SimpleNamespace(release=self._on_release, claimed=self._on_claimed,
                                    lost=self._on_lost, paused=self._on_paused)
        self._member = GroupMember(
            self._client, group_id, self.consumer_id, self.subscription, ownership,
            session_timeout=session_timeout_ms / 1000, commit_on_release=auto_commit,
            rebalance_max_retries=rebalance_max_retries,
            rebalance_backoff=rebalance_backoff_ms / 1000, clock=clock, sleep=sleep)
        try:
            self._fetcher = SimpleConsumer(self._bootstrap_servers(), client_id=self.consumer_id,
                                           retries=1, retry_backoff_ms=50)
            self._member.join()
        except BaseException:
            self._member.leave()
            close_client(self._client)
            raise

    # -- the application's side ---------------------------------------------------------

    def __iter__(self) -> Iterator[ConsumedRecord]:
        """Records as they arrive; each counts as processed when the next is asked for."""
        idle_since = self._clock()
        while not self._closed:
            delivery = self._next_delivery(timeout=0.5)
            if delivery is None:
                if self._consumer_timeout is not None and \
                        self._clock() - idle_since >= self._consumer_timeout:
                    return
                continue
            yield from self._hand_out(delivery)
            idle_since = self._clock()

    def _hand_out(self, delivery: "_Delivery") -> Iterator[ConsumedRecord]:
        records, claims, lease = delivery.records, self._claims, self._member.lease
        for tp, claim, start, end in delivery.spans:
            for index in range(start, end):
                if self._closed:
                    return
                if claims.get(tp) != claim:
                    break  # the partition moved to another consumer meanwhile
                if not lease.valid():
                    # Maybe no longer the owner: hand out nothing more, fetch it again later.
                    self._rewind(delivery, index)
                    return
                delivery.done = index
                yield records[index]
                self._maybe_auto_commit()
            delivery.done = end

    def poll(self, timeout: float = 1.0) -> list[ConsumedRecord]:
        """The next records (maybe none after ``timeout`` seconds).

        The records of the previous ``poll`` count as processed from now on.
        """
        self._delivery.done = len(self._delivery.records)
        self._fold_processed()
        delivery = self._next_delivery(timeout)
        return [] if delivery is None else delivery.records

    def commit(self) -> None:
        """Commit the processed offsets of the owned partitions to ZooKeeper now."""
        self._fold_processed()
        owned = self._member.owned
        with self._lock:
            offsets = {tp: offset for tp, offset in self._processed.items()
                       if tp in owned and self._committed.get(tp) != offset}
        self._member.commit(offsets)
        with self._lock:
            self._committed.update(offsets)

    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions this consumer owns right now."""
        return self._member.owned

    @property
    def session(self) -> tuple[int, bytes] | None:
        """The ZooKeeper session (id, password), or None while disconnected."""
        return self._client.client_id

    def wait_for_assignment(self, timeout: float) -> frozenset[TopicPartition]:
        """Block until the first rebalance is done (the share may be empty)."""
        self._member.wait_idle(timeout)
        return self._member.owned

    def close(self) -> None:
        """Commit (with auto-commit on), leave the group and release everything."""
        if self._closed:
            return
        if self._auto_commit:
            try:
                self.commit()
            except PylogError:
                log.warning("final commit of group %s failed", self.group_id, exc_info=True)
        self._closed = True
        self._member.leave()
        close_client(self._client)
        self._fetcher.close()

    def __enter__(self) -> "ZkConsumer":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # -- fetching -------------------------------------------------------------------------

    def _next_delivery(self, timeout: float) -> "_Delivery | None":
        """The next fetched records, which become the delivery in the application's hands."""
        deadline = self._clock() + timeout
        while not self._closed:
            self._maybe_auto_commit()
            with self._lock:
                wanted = ({} if self._paused or not self._member.lease.valid()
                          else dict(self._positions))
            offsets = self._resolve_positions(wanted)
            if offsets:
                delivery = self._fetch(offsets)
                if delivery.records:
                    self._fold_processed()
                    self._delivery = delivery
                    return delivery
            else:
                with self._lock:
                    self._lock.wait(min(0.1, max(0.0, deadline - self._clock())))
            if self._clock() >= deadline:
                return None
        return None

    def _resolve_positions(self, wanted: dict[TopicPartition, int | None]) -> dict:
        """Look up start offsets still unknown; partitions that fail this time are left out."""
        offsets = {}
        for tp, offset in wanted.items():
            if offset is None:
                try:
                    offset = self._reset_offset(tp)
                except PylogError as exc:
                    log.debug("no start offset for %s yet: %s", tp, exc)
                    continue
                with self._lock:
                    if self._positions.get(tp, 0) is None:
                        self._positions[tp] = self._processed[tp] = offset
            offsets[tp] = offset
        return offsets

    def _reset_offset(self, tp: TopicPartition) -> int:
        if self._reset == "earliest":
            return self._fetcher.earliest_offset(tp.topic, tp.partition)
        return self._fetcher.latest_offset(tp.topic, tp.partition)

    def _fetch(self, offsets: dict[TopicPartition, int]) -> "_Delivery":
        try:
            raw = self._fetcher.fetch_raw_many(offsets, self._fetch_max_bytes,
                                               self._fetch_max_wait_ms)
        except OffsetOutOfRange as exc:
            tp = TopicPartition(exc.topic, exc.partition)
            log.warning("%s: offset %d out of range, resetting to %s", tp, exc.offset, self._reset)
            with self._lock:
                if self._positions.get(tp) == exc.offset:
                    self._positions[tp] = None
            return _Delivery([], [])
        except PylogError:
            # One partition without a leader must not stall the others.
            raw = {}
            for tp, offset in offsets.items():
                try:
                    raw[tp] = self._fetcher.fetch_raw(tp.topic, tp.partition, offset,
                                                      self._fetch_max_bytes, 0)
                except PylogError as exc:
                    log.debug("fetch of %s failed: %s", tp, exc)
        return self._decode(offsets, raw)

    def _decode(self, offsets: dict[TopicPartition, int], raw: dict) -> "_Delivery":
        records: list[ConsumedRecord] = []
        spans = []
        with self._lock:
            for tp, result in raw.items():
                # A partition released (or released and claimed again) since: drop the result.
                if self._positions.get(tp) != offsets[tp]:
                    continue
                columns = decode_columns(result.records, start_offset=offsets[tp])
                if columns.next_offset is None:
                    if result.records:  # one batch larger than the fetch size: ask for more
                        self._fetch_max_bytes *= 2
                    continue
                start = len(records)
                records.extend(map(ConsumedRecord, repeat(tp.topic), repeat(tp.partition),
                                   columns.offsets, columns.timestamps, columns.keys,
                                   columns.values, columns.headers))
                if len(records) > start:
                    spans.append((tp, self._claims[tp], start, len(records)))
                self._positions[tp] = max(offsets[tp], columns.next_offset)
        return _Delivery(records, spans)

    def _rewind(self, delivery: "_Delivery", index: int) -> None:
        """Fetch again from ``records[index]`` on, for partitions still held by their claim."""
        with self._lock:
            delivery.done = index
            for tp, claim, start, end in delivery.spans:
                if end > index and self._claims.get(tp) == claim:
                    self._positions[tp] = delivery.records[max(start, index)].offset

    def _fold_processed(self) -> None:
        with self._lock:
            self._delivery.fold(self._claims, self._processed)

    def _maybe_auto_commit(self) -> None:
        if self._auto_commit and self._clock() >= self._next_commit:
            self._next_commit = self._clock() + self._commit_interval
            try:
                self.commit()
            except PylogError as exc:
                log.warning("auto-commit of group %s failed, retrying later: %s",
                            self.group_id, exc)

    def _bootstrap_servers(self) -> str | list[str]:
        addresses = self._bootstrap or [
            broker.endpoint.address for broker in registered_brokers(self._client)]
        if not addresses:
            raise ConfigError("bootstrap_servers", "not given and no broker is registered "
                                                   "in ZooKeeper")
        return addresses

    # -- Ownership: called by the GroupMember's threads ----------------------------------

    def _on_release(self, partitions: frozenset[TopicPartition]) -> dict[TopicPartition, int]:
        with self._lock:
            self._delivery.fold(self._claims, self._processed)
            offsets = {}
            for tp in partitions:
                self._claims.pop(tp, None)
                self._positions.pop(tp, None)
                processed = self._processed.pop(tp, None)
                if processed is not None and self._committed.pop(tp, None) != processed:
                    offsets[tp] = processed
            return offsets

    def _on_claimed(self, starts: Mapping[TopicPartition, int | None]) -> None:
        with self._lock:
            for tp, start in starts.items():
                self._claim_counter += 1
                self._claims[tp] = self._claim_counter
                self._positions[tp] = start
                if start is not None:
                    self._processed[tp] = self._committed[tp] = start
            self._lock.notify_all()

    def _on_lost(self) -> None:
        with self._lock:
            self._positions.clear()
            self._claims.clear()
            self._lock.notify_all()

    def _on_paused(self, paused: bool) -> None:
        with self._lock:
            self._paused = paused
            self._lock.notify_all()


class _Delivery:
    """Records handed to the application, and how far it has processed them.

    ``spans`` are ``(partition, claim, start, end)``: records ``[start, end)`` came from
    that partition under that claim. ``done`` counts the records processed (set by the
    application's side without a lock: one int). ``fold`` turns the processed prefix into
    next offsets per partition, once per partition rather than once per record.
    """

    __slots__ = ("records", "spans", "done", "folded")

    def __init__(self, records: list[ConsumedRecord], spans: list) -> None:
        self.records = records
        self.spans = spans
        self.done = 0
        self.folded = 0

    def fold(self, claims: dict[TopicPartition, int], processed: dict[TopicPartition, int]) -> None:
        upto = self.done
        for tp, claim, start, end in self.spans:
            if start >= upto:
                break
            if end <= self.folded or claims.get(tp) != claim:
                continue
            next_offset = self.records[min(end, upto) - 1].offset + 1
            if processed.get(tp, -1) < next_offset:
                processed[tp] = next_offset
        self.folded = max(self.folded, upto)
