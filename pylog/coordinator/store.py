"""``__consumer_offsets`` as the coordinator uses it: which partitions this broker leads,
appends that count once the in-sync replicas have them, and reading a partition back.

A coordinator writes as a producer with acks=all would: an append is done when the
partition's high watermark passes it while this broker still leads in the same leader
epoch (``AppendTicket.outcome``). Standalone, the broker is the whole ISR and an append is
done at once. Failures map to what a group client understands: a lost leadership is
NOT_COORDINATOR, a short ISR COORDINATOR_NOT_AVAILABLE, a slow ISR REQUEST_TIMED_OUT.
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
    UnknownTopicOrPartitionError)
from pylog.records.batch import build_batch, iter_records, next_offset_after
from pylog.records.compression import Compression
from pylog.records.record import Record
from pylog.types import TopicPartition

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"

NotCoordinatorError = errors.NotCoordinatorError
CoordinatorNotAvailableError = errors.CoordinatorNotAvailableError


def offsets_tp(partition: int) -> TopicPartition:
    return TopicPartition(OFFSETS_TOPIC, partition)


@dataclass
class AppendTicket:
    """An append to ``__consumer_offsets`` waiting to count (see ``outcome``)."""

    partition: int
    replica: object | None  # PartitionReplica in cluster mode, None standalone
    leader_epoch: int
    required_offset: int
    deadline: float

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
               timestamp_ms: int) -> AppendTicket:
        """Append keyed records (None values are tombstones) as leader.

        Raises NotCoordinatorError when this broker does not lead the partition and
        CoordinatorNotAvailableError when its ISR is below ``min.insync.replicas``.
        """
        batch = build_batch([(key, value, (), timestamp_ms) for key, value in records],
                            compression=Compression.NONE)
        tp = offsets_tp(partition)
        try:
            if self.logs.replicas is None:
                info = self.logs.leader_log(OFFSETS_TOPIC, partition).append(batch)
                return AppendTicket(partition, None, 0, info.last_offset + 1, 0.0)
            info, replica, epoch = self.logs.replicas.append_as_leader(tp, batch, -1)
        except (NotLeaderOrFollowerError, UnknownTopicOrPartitionError) as error:
            raise NotCoordinatorError(str(error)) from None
        except NotEnoughReplicasError as error:
            raise CoordinatorNotAvailableError(str(error)) from None
        return AppendTicket(partition, replica, epoch, info.last_offset + 1,
                            self.clock() + self.commit_timeout_s)

    def read_partition(self, partition: int) -> Iterator[Record]:
        """Every record of a partition this broker leads, up to its log end (a new leader
        keeps what it has, so what it loads is what it will serve)."""
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
            yield from iter_records(buf)
            offset = following
