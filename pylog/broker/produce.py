"""Produce: validate each partition's batches and append them to the partition log.

Every partition gets its own error code, so one bad partition costs only itself:
CORRUPT_MESSAGE (framing, magic, CRC), MESSAGE_TOO_LARGE (a batch over
``message.max.bytes``), RECORD_LIST_TOO_LARGE, UNKNOWN_TOPIC_OR_PARTITION,
NOT_LEADER_OR_FOLLOWER, INVALID_TOPIC_EXCEPTION. Versions 0-2 (the old message formats)
are advertised so librdkafka keeps compression on, but refused with UNSUPPORTED_VERSION.
acks=0 gets no response at all; acks=-1 is acks=1 until replication exists.
"""

from __future__ import annotations

import logging

from pylog.broker.partitions import PartitionLogs
from pylog.cluster.placement import validate_topic_name
from pylog.errors import (
    CorruptMessageError, InvalidRequiredAcksError, KafkaError, UnsupportedVersionError)

log = logging.getLogger(__name__)

MIN_SERVED_VERSION = 3


def _partition_result(index: int, error: KafkaError | None = None, base_offset: int = -1,
                      log_start_offset: int = -1) -> dict:
    return {"index": index, "error_code": 0 if error is None else error.errno,
            "base_offset": base_offset, "log_append_time_ms": -1,
            "log_start_offset": log_start_offset, "record_errors": [],
            "error_message": None if error is None else str(error)}


def handle_produce(body: dict, version: int, logs: PartitionLogs) -> dict | None:
    """The response body, or None for acks=0."""
    acks = body["acks"]
    topics_out = []
    for topic_data in body["topic_data"]:
        name = topic_data["name"]
        results = [_produce_partition(name, p, version, acks, logs)
                   for p in topic_data["partition_data"]]
        topics_out.append({"name": name, "partition_responses": results})
    if acks == 0:
        return None
    return {"responses": topics_out, "throttle_time_ms": 0}


def _produce_partition(topic: str, partition_data: dict, version: int, acks: int,
                       logs: PartitionLogs) -> dict:
    index = partition_data["index"]
    try:
        if version < MIN_SERVED_VERSION:
            raise UnsupportedVersionError(
                f"Produce v{version} (message format v0/v1) is not supported; use v3 or later")
        if acks not in (0, 1, -1):
            raise InvalidRequiredAcksError(f"acks must be 0, 1 or -1, got {acks}")
        validate_topic_name(topic)
        records = partition_data["records"]
        if records is None:
            raise CorruptMessageError("the records of a produce request may not be null")
        partition_log = logs.leader_log(topic, index)
        info = partition_log.append(records)
        return _partition_result(index, base_offset=info.first_offset,
                                 log_start_offset=info.log_start_offset)
    except KafkaError as error:
        log.debug("produce to %s-%d refused: %s", topic, index, error)
        return _partition_result(index, error)
