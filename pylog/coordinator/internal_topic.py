"""An internal topic a coordinator keeps its state in (``__consumer_offsets`` for the
group coordinator, ``__transaction_state`` for the transaction coordinator): creating it
on first use, which partitions this broker leads and who leads the others, appends that
count once the in-sync replicas have them, and reading a partition back.

A coordinator writes as a producer with acks=all would: an append is done when the
partition's high watermark passes it while this broker still leads in the same leader
epoch (``AppendTicket.outcome``). Standalone, the broker is the whole ISR and an append is
done at once. A lost leadership is NOT_COORDINATOR, a short ISR COORDINATOR_NOT_AVAILABLE,
a slow ISR REQUEST_TIMED_OUT; each coordinator maps these to its clients' codes.
``AppendQueue`` holds the appends still waiting and wakes the requests parked on them.

An append may be a transactional batch of a producer (``TxnProducer``): it continues the
producer's sequence in the partition, as the producer's own next batch would, because the
log checks a producer's batches by sequence number (a repeated one is a duplicate, not
written). The coordinator is the only writer of a producer's records in its topic
(clients may not produce there) and appends under its lock; the log's epoch check still
refuses a fenced producer (INVALID_PRODUCER_EPOCH). (Kafka appends these batches as the
coordinator, exempt from sequence checks, with sequence 0.)
"""

from __future__ import annotations

import collections
import logging
from dataclasses import dataclass, field
from typing import Callable, Iterator

from pylog.broker.partitions import AppendWaiters, PartitionLogs
from pylog.broker.replica import Role
from pylog.cluster.metadata import NO_LEADER, ClusterMetadata
from pylog.errors import (
    CoordinatorNotAvailableError, KafkaError, NotCoordinatorError, NotEnoughReplicasError,
    NotLeaderOrFollowerError, RequestTimedOutError, TopicAlreadyExistsError,
    UnknownServerError, UnknownTopicOrPartitionError)
from pylog.log.producer_state import next_sequence
from pylog.records.batch import BatchBuilder, decode_batch, iter_batches, next_offset_after
from pylog.records.compression import Compression
from pylog.records.header import BatchHeader
from pylog.records.record import Record
from pylog.types import BrokerEndpoint, TopicPartition

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TxnProducer:
    """The producer whose transaction an append belongs to; ``guard``: the verification
    guard its append opens the transaction with (KIP-890; None: not verified)."""

    producer_id: int
    producer_epoch: int
    guard: object = field(default=None, compare=False, hash=False, repr=False)


@dataclass
class AppendTicket:
    """An append to an internal topic waiting to count (see ``outcome``)."""

    partition: int
    replica: object | None  # PartitionReplica in cluster mode, None standalone
    leader_epoch: int
    required_offset: int
    deadline: float
    base_offset: int = -1  # the log offset of the appended batch

    def outcome(self, now: float) -> KafkaError | None | bool:
        """False while waiting; None once replicated; else the error to answer with."""
        replica = self.replica
        if replica is None:
            return None
        role, epoch, isr = replica.role_snapshot()
        if epoch != self.leader_epoch or role is Role.FOLLOWER:
            return NotCoordinatorError(f"leadership of {replica.tp} moved during the write")
        if role is Role.LEADER and replica.log.high_watermark >= self.required_offset:
            if len(isr) < replica.log.config.min_insync_replicas:
                return CoordinatorNotAvailableError(f"{replica.tp}: the ISR is too small")
            return None
        if now >= self.deadline:
            return RequestTimedOutError(f"{replica.tp}: the in-sync replicas did not "
                                        "confirm the write in time")
        return False


class InternalTopicStore:
    """Reads and writes one internal topic through the broker's partition logs.

    ``append_timeout_s``: how long an append may wait for the in-sync replicas;
    ``load_buffer_bytes``: how much ``read_batches`` reads at a time.
    """

    def __init__(self, topic: str, logs: PartitionLogs, metadata: ClusterMetadata,
                 append_timeout_s: float, load_buffer_bytes: int,
                 clock: Callable[[], float]) -> None:
        self.topic = topic
        self.logs = logs
        self.metadata = metadata
        self.append_timeout_s = append_timeout_s
        self.load_buffer_bytes = load_buffer_bytes
        self.clock = clock

    def tp(self, partition: int) -> TopicPartition:
        return TopicPartition(self.topic, partition)

    def num_partitions(self) -> int | None:
        topic = self.metadata.topic(self.topic)
        return None if topic is None else topic.num_partitions

    def create_if_missing(self, partitions: int, replication_factor: int,
                          configs: dict[str, str], min_insync_replicas: int | None = None
                          ) -> bool:
        """Create the topic (compacted) unless it exists; False if it cannot exist yet.

        The replication factor is capped to the live brokers, and ``min_insync_replicas``
        (if given) to the replication factor: a topic whose min ISR exceeds its replicas
        could never be written.
        """
        if self.metadata.topic(self.topic) is not None:
            return True
        live = len(self.metadata.brokers())
        if live == 0:
            return False
        replication = max(1, min(replication_factor, live))
        configs = {"cleanup.policy": "compact", **configs}
        described = f"{partitions} partitions, replication factor {replication}"
        if min_insync_replicas is not None:
            min_isr = max(1, min(min_insync_replicas, replication))
            configs["min.insync.replicas"] = str(min_isr)
            described += f", min ISR {min_isr}"
        try:
            self.metadata.create_topic(self.topic, partitions, replication, configs)
            log.info("created %s with %s", self.topic, described)
        except TopicAlreadyExistsError:
            pass
        except KafkaError as error:
            log.warning("could not create %s: %s", self.topic, error)
            return False
        return True

    def leader_of(self, partition: int) -> BrokerEndpoint | None:
        """The live broker leading ``partition``, or None."""
        topic = self.metadata.topic(self.topic)
        state = None if topic is None else topic.partitions.get(partition)
        if state is None or state.leader == NO_LEADER:
            return None
        return next((b for b in self.metadata.brokers() if b.broker_id == state.leader), None)

    def led_partitions(self) -> dict[int, int]:
        """Partitions of the topic this broker leads, with their leader epochs."""
        topic = self.metadata.topic(self.topic)
        if topic is None:
            return {}
        replicas = self.logs.replicas
        if replicas is None:
            return {p: 0 for p in topic.partitions}
        led = {}
        for tp in replicas.led_partitions():
            if tp.topic == self.topic:
                try:
                    role, epoch, _ = replicas.leader_replica(tp).role_snapshot()
                except KafkaError:
                    continue
                if role is Role.LEADER:
                    led[tp.partition] = epoch
        return led

    def append(self, partition: int, records: list[tuple[bytes, bytes | None]],
               timestamp_ms: int, producer: TxnProducer | None = None) -> AppendTicket:
        """Append keyed records (None values are tombstones) as leader, as one batch;
        with ``producer``, a transactional batch of that producer.

        Raises NotCoordinatorError when this broker does not lead the partition and
        CoordinatorNotAvailableError when its ISR is below ``min.insync.replicas``; the
        log's own errors (a fenced producer epoch) pass through.
        """
        tp = self.tp(partition)
        try:
            if producer is None:
                builder = BatchBuilder(compression=Compression.NONE)
            else:
                builder = BatchBuilder(
                    compression=Compression.NONE, is_transactional=True,
                    producer_id=producer.producer_id, producer_epoch=producer.producer_epoch,
                    base_sequence=self._next_sequence(partition, producer))
            for key, value in records:
                builder.append(key, value, (), timestamp_ms)
            batch = builder.build()
            allow = True if producer is None or producer.guard is None else producer.guard
            if self.logs.replicas is None:
                info = self.logs.leader_log(self.topic, partition).append(
                    batch, allow_transactional=allow)
                replica, epoch, deadline = None, 0, 0.0
            else:
                info, replica, epoch = self.logs.replicas.append_as_leader(
                    tp, batch, -1, allow_transactional=allow)
                deadline = self.clock() + self.append_timeout_s
        except (NotLeaderOrFollowerError, UnknownTopicOrPartitionError) as error:
            raise NotCoordinatorError(str(error)) from None
        except NotEnoughReplicasError as error:
            raise CoordinatorNotAvailableError(str(error)) from None
        if producer is not None and info.record_count != len(records):
            # The log answered with an earlier batch of the producer as a duplicate:
            # these records were not written, so they must not count as stored.
            raise UnknownServerError(f"{tp}: the log did not write the coordinator's batch "
                                     f"of producer {producer} (taken for a duplicate)")
        return AppendTicket(partition, replica, epoch, info.last_offset + 1, deadline,
                            info.first_offset)

    def _next_sequence(self, partition: int, producer: TxnProducer) -> int:
        """The base sequence of the producer's next batch in the partition: 0 in a new
        epoch, else one past its last batch's."""
        state = self.logs.replica_log(self.topic, partition).producer_state(
            producer.producer_id)
        if state is None:
            return 0
        epoch, batches = state
        if epoch != producer.producer_epoch or not batches:
            return 0  # a newer epoch starts at 0; an older one is refused by the log
        return next_sequence(batches[-1].last_seq)

    def read_batches(self, partition: int) -> Iterator[tuple[BatchHeader, list[Record]]]:
        """Every batch of a partition this broker leads, control batches included, with
        its records, up to its log end (a new leader keeps what it has, so what it loads
        is what it will serve)."""
        partition_log = self.logs.replica_log(self.topic, partition)
        offset = partition_log.log_start_offset
        while offset < partition_log.log_end_offset:
            result = partition_log.read(offset, self.load_buffer_bytes, up_to_log_end=True)
            if result.region is None:
                return
            with result.region as region:
                buf = region.read_bytes()
            following = next_offset_after(buf)
            if following is None or following <= offset:
                return
            for position, header in iter_batches(buf, skip_control=False):
                yield header, decode_batch(buf, position).records
            offset = following


# What a write's caller is told: 0 once replicated, else an error code.
OnDone = Callable[[int], None]


class AppendQueue:
    """A coordinator's appends still waiting for their in-sync replicas, and the
    partitions whose parked requests to wake once something finished.

    ``lock`` is the coordinator's state lock: ``add``, ``fail``, ``drain`` and ``wake``
    are called with it held; ``on_done`` callbacks run with it held. ``error_code`` maps
    a failed write to the code the coordinator's clients understand.
    """

    def __init__(self, store: InternalTopicStore, waiters: AppendWaiters, lock,
                 clock: Callable[[], float], error_code: Callable[[KafkaError], int]) -> None:
        self.store = store
        self.waiters = waiters
        self.lock = lock
        self.clock = clock
        self.error_code = error_code
        self._waiting: list[tuple[AppendTicket, OnDone]] = []
        self._to_wake: set[int] = set()
        self._draining = False

    def add(self, ticket: AppendTicket, on_done: OnDone) -> None:
        self._waiting.append((ticket, on_done))
        self.drain()

    def fail(self, partition: int, error: KafkaError, on_done: OnDone) -> None:
        """An append that raised: answer it at once."""
        on_done(self.error_code(error))
        self._to_wake.add(partition)

    def drain(self) -> None:
        """Finish the appends whose outcome is known.

        An ``on_done`` may add appends (a transaction whose markers all went at once, to
        topics since deleted, writes its Complete state from inside its Prepare state's
        callback): the running pass looks at them too, and a drain called from inside it
        returns at once. Each append leaves the queue before its callback runs, so no
        callback runs twice; one that raises is logged and the pass goes on."""
        if self._draining or not self._waiting:
            return
        now = self.clock()
        self._draining = True
        waiting: list[tuple[AppendTicket, OnDone]] = []
        pending = collections.deque(self._waiting)
        self._waiting = []
        try:
            while pending:
                ticket, on_done = pending.popleft()
                outcome = ticket.outcome(now)
                if outcome is False:
                    waiting.append((ticket, on_done))
                    continue
                self._to_wake.add(ticket.partition)
                try:
                    on_done(0 if outcome is None else self.error_code(outcome))
                except Exception:  # noqa: BLE001 -- one write's bug must not stall the others
                    log.exception("finishing a write to partition %d of %s failed",
                                  ticket.partition, self.store.topic)
                if self._waiting:  # what the callback added: this pass looks at it too
                    pending.extend(self._waiting)
                    self._waiting = []
        finally:
            self._waiting = waiting + list(pending) + self._waiting
            self._draining = False

    def wake(self, partition: int) -> None:
        self._to_wake.add(partition)

    def flush_wakes(self) -> None:
        """Wake the requests parked on the partitions noted since the last call (takes
        the lock; call it after releasing it)."""
        with self.lock:
            partitions, self._to_wake = self._to_wake, set()
        for partition in partitions:
            self.waiters.notify(self.store.tp(partition))

    def poll(self) -> None:
        """Called by parked requests when woken: finish what can be finished."""
        with self.lock:
            self.drain()
        self.flush_wakes()

    def run_locked(self, action: Callable):
        """Run ``action()`` under the lock, then wake the requests it completed."""
        with self.lock:
            result = action()
        self.flush_wakes()
        return result
