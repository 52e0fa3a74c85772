"""DescribeProducers (API 61, KIP-664): the producers a partition keeps state for, as
``kafka-transactions.sh describe-producers`` and kafka-python's ``describe_producers`` ask:
id, epoch, last sequence and timestamp, coordinator epoch, and where its open transaction
started (-1: none). That is what holds the last stable offset back: a transaction left open
by a producer that went away shows here with its start offset.

Answered from this broker's replica of each partition, leader or follower, as Kafka does;
UNKNOWN_TOPIC_OR_PARTITION or NOT_LEADER_OR_FOLLOWER (no replica here) per partition.
"""

from __future__ import annotations

from pylog.broker.partitions import PartitionLogs
from pylog.errors import KafkaError
from pylog.protocol import ApiKey

API_KEY = ApiKey.DESCRIBE_PRODUCERS
VERSIONS = (0, 0)


class DescribeProducersHandler:
    def __init__(self, logs: PartitionLogs) -> None:
        self.logs = logs

    def handle(self, version: int, body: dict, session) -> dict:
        return {"throttle_time_ms": 0, "topics": [
            {"name": topic["name"], "partitions": [
                self._partition(topic["name"], index) for index in topic["partition_indexes"]]}
            for topic in body["topics"]]}

    def _partition(self, topic: str, index: int) -> dict:
        result = {"partition_index": index, "error_code": 0, "error_message": None,
                  "active_producers": []}
        try:
            producers = self.logs.replica_log(topic, index).active_producers()
        except KafkaError as error:
            return dict(result, error_code=error.errno, error_message=str(error))
        result["active_producers"] = [
            {"producer_id": pid, "producer_epoch": epoch, "last_sequence": sequence,
             "last_timestamp": timestamp, "coordinator_epoch": coordinator_epoch,
             "current_txn_start_offset": start}
            for pid, epoch, sequence, timestamp, coordinator_epoch, start in sorted(producers)]
        return result
