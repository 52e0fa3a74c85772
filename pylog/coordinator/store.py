"""``__consumer_offsets`` as the coordinator uses it: which partitions this broker leads,
appends that count once the in-sync replicas have them, and reading a partition back.

A coordinator writes as a producer with acks=all would: an append is done when the
partition's high watermark passes it while this broker still leads in the same leader
epoch (``AppendTicket.outcome``). Standalone, the broker is the whole ISR and an append is
done at once. Failures map to what a group client understands: a lost leadership is
NOT_COORDINATOR, a short ISR COORDINATOR_NOT_AVAILABLE, a slow ISR REQUEST_TIMED_OUT.

Offsets a transaction commits are appended as a transactional batch carrying the
producer's id and epoch, so the transaction's COMMIT or ABORT marker (a control batch
written later by the transaction coordinator) settles them; ``read_batches`` hands the
loader every batch, control batches included, with its header. The log checks a
producer's batches by sequence number (a repeated one is a duplicate, not written), so
each such batch continues the producer's sequence in the partition, as the producer's own
next batch would: the coordinator is the only writer of a producer's records in
``__consumer_offsets`` (clients may not produce there) and appends under its lock. The
log's epoch check still refuses a fenced producer (INVALID_PRODUCER_EPOCH). (Kafka appends
these batches as the coordinator, exempt from sequence checks, with sequence 0.)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Iterator

from pylog import errors
from pylog.broker.partitions import PartitionLogs
from pylog.broker.replica import Role
from pylog.cluster.metadata import ClusterMetadata
from pylog.errors import (
    KafkaError, NotEnoughReplicasError, NotLeaderOrFollowerError, RequestTimedOutError,
    UnknownServerError, UnknownTopicOrPartitionError)
from pylog.log.producer_state import next_sequence
from pylog.records.batch import BatchBuilder, decode_batch, iter_batches, next_offset_after
from pylog.records.compression import Compression
from pylog.records.header import BatchHeader
from pylog.records.record import Record
from pylog.types import TopicPartition

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"

NotCoordinatorError = errors.NotCoordinatorError
CoordinatorNotAvailableError = errors.CoordinatorNotAvailableError


def offsets_tp(partition: int) -> TopicPartition:
    return TopicPartition(OFFSETS_TOPIC, partition)


@dataclass(frozen=True, slots=True)
class TxnProducer:
    """The producer whose transaction an append belongs to."""

    producer_id: int
    producer_epoch: int


@dataclass
class AppendTicket:
    """An append to ``__consumer_offsets`` waiting to count (see ``outcome``)."""

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


class OffsetsTopicStore:
    """Reads and writes ``__consumer_offsets`` through the broker's partition logs."""

    def __init__(self, logs: PartitionLogs, metadata: ClusterMetadata,
                 commit_timeout_ms: int, load_buffer_bytes: int,
                 clock: Callable[[], float]) -> None:
        self.logs = logs
        self.metadata = metadata
        self.commit_timeout_s = commit_timeout_ms / 1000
        self.load_buffer_bytes = load_buffer_bytes
        self.clock = clock

    def num_partitions(self) -> int | None:
        topic = self.metadata.topic(OFFSETS_TOPIC)
        return None if topic is None else topic.num_partitions

    def led_partitions(self) -> dict[int, int]:
        """Partitions of ``__consumer_offsets`` this broker leads, with their leader epochs."""
        topic = self.metadata.topic(OFFSETS_TOPIC)
        if topic is None:
            return {}
        replicas = self.logs.replicas
        if replicas is None:
            return {p: 0 for p in topic.partitions}
        led = {}
        for tp in replicas.led_partitions():
            if tp.topic == OFFSETS_TOPIC:
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
        tp = offsets_tp(partition)
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
            if self.logs.replicas is None:
                info = self.logs.leader_log(OFFSETS_TOPIC, partition).append(batch)
                replica, epoch, deadline = None, 0, 0.0
            else:
                info, replica, epoch = self.logs.replicas.append_as_leader(tp, batch, -1)
                deadline = self.clock() + self.commit_timeout_s
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
        state = self.logs.replica_log(OFFSETS_TOPIC, partition).producer_state(
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
        partition_log = self.logs.replica_log(OFFSETS_TOPIC, partition)
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
