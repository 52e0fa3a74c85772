"""DeleteRecords (api key 21): move partitions' log start offsets up, as Kafka does.

Per partition, on its leader: offset -1 means the high watermark; a negative offset or
one above the high watermark is OFFSET_OUT_OF_RANGE; otherwise the log start offset
moves up to it (never down) and the segments wholly below it are deleted
(:meth:`pylog.log.Log.increment_log_start_offset`). A topic whose ``cleanup.policy`` has
no ``delete`` (compact only) refuses with POLICY_VIOLATION, as in Kafka.

The answer's ``low_watermark`` is the smallest log start offset among the in-sync
replicas: followers take the leader's log start offset from their fetch responses and
report theirs in their fetch requests. In a cluster the request waits (parked like an
acks=all Produce) until every in-sync replica has reached the requested offset, or
answers REQUEST_TIMED_OUT at ``timeout_ms`` (the log start has moved on the leader
anyway); with ``timeout_ms`` 0 it answers at once with the low watermark as it is. A
standalone broker answers at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from pylog.broker.partitions import PartitionLogs
from pylog.broker.produce import PartitionWaits
from pylog.broker.replica import PartitionReplica, Role
from pylog.errors import (
    KafkaError, NotLeaderOrFollowerError, OffsetOutOfRangeError, RequestTimedOutError)
from pylog.types import TopicPartition

API_KEY = 21
VERSIONS = (0, 2)
HIGH_WATERMARK = -1  # the offset meaning "up to the high watermark"
PolicyViolationError = KafkaError.for_code(44)  # POLICY_VIOLATION


@dataclass
class PendingDeletion:
    result: dict  # the partition's entry in the response, completed in place
    replica: PartitionReplica
    leader_epoch: int
    offset: int  # what every in-sync replica's log start must reach


class DeleteRecordsWork(PartitionWaits):
    """A DeleteRecords waiting for the in-sync replicas to take the new log starts."""

    def settle(self, waiting: PendingDeletion, final: bool) -> bool:
        role, epoch, _ = waiting.replica.role_snapshot()
        if role is not Role.LEADER or epoch != waiting.leader_epoch:
            waiting.result["error_code"] = NotLeaderOrFollowerError.errno
            return True
        low = waiting.replica.low_watermark()
        if low >= waiting.offset:
            waiting.result["low_watermark"] = low
        elif final:
            waiting.result["error_code"] = RequestTimedOutError.errno
        else:
            return False
        return True


class DeleteRecordsHandler:
    """Serves DeleteRecords for one broker's partition logs."""

    def __init__(self, logs: PartitionLogs, clock: Callable[[], float]) -> None:
        self.logs = logs
        self.clock = clock

    def handle(self, version: int, body: dict, session) -> dict | DeleteRecordsWork:
        pending: dict[TopicPartition, PendingDeletion] = {}
        topics_out = []
        for topic in body["topics"]:
            partitions_out = []
            for p in topic["partitions"]:
                result = {"partition_index": p["partition_index"], "low_watermark": -1,
                          "error_code": 0}
                tp = TopicPartition(topic["name"], p["partition_index"])
                try:
                    self._delete(tp, p["offset"], result, pending)
                except KafkaError as error:
                    result["error_code"] = error.errno
                partitions_out.append(result)
            topics_out.append({"name": topic["name"], "partitions": partitions_out})
        if any(p["error_code"] == 0 for t in topics_out for p in t["partitions"]):
            # The new log starts survive a crash, not only a clean shutdown.
            self.logs.manager.write_checkpoints()
        response = {"throttle_time_ms": 0, "topics": topics_out}
        if body["timeout_ms"] <= 0:  # no waiting: the low watermarks as they are now
            for waiting in pending.values():
                waiting.result["low_watermark"] = waiting.replica.low_watermark()
            return response
        work = DeleteRecordsWork(response, pending, self.clock() + body["timeout_ms"] / 1000)
        return work.attempt(final=False) or work

    def _delete(self, tp: TopicPartition, offset: int, result: dict,
                pending: dict[TopicPartition, PendingDeletion]) -> None:
        if self.logs.replicas is None:
            partition_log = self.logs.leader_log(tp.topic, tp.partition)
            self._move(tp, partition_log, offset)
            result["low_watermark"] = partition_log.log_start_offset
            return
        replica = self.logs.replicas.leader_replica(tp)
        with replica.lock:
            if replica.role is not Role.LEADER:
                raise NotLeaderOrFollowerError(f"this broker does not lead {tp}")
            target = self._move(tp, replica.log, offset)
            pending[tp] = PendingDeletion(result, replica, replica.leader_epoch, target)

    @staticmethod
    def _move(tp: TopicPartition, partition_log, offset: int) -> int:
        """Move the log start of a led partition; the offset it was asked to reach."""
        if not partition_log.config.delete:
            raise PolicyViolationError(f"records of {tp} cannot be deleted: its "
                                       "cleanup.policy does not include delete")
        target = partition_log.high_watermark if offset == HIGH_WATERMARK else offset
        if target < 0:
            raise OffsetOutOfRangeError(f"offset {offset} is not valid for {tp}")
        partition_log.increment_log_start_offset(target)
        return target
