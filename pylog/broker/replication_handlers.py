"""OffsetForLeaderEpoch: where a leader epoch ends in the leader's log (KIP-101/279).

Followers ask it before fetching, to truncate a tail the leader does not have; consumers
(KIP-320) ask it to check their position after a leader change. Per partition: the
largest epoch at or below the requested one, and the start offset of the next epoch
(the log end for the latest epoch); (-1, -1) when the log has no such epoch. Only the
leader answers; ``current_leader_epoch`` is fenced like a Fetch's.
"""

from __future__ import annotations

from pylog.broker.partitions import PartitionLogs
from pylog.errors import KafkaError
from pylog.types import TopicPartition


def handle_offset_for_leader_epoch(body: dict, version: int, logs: PartitionLogs) -> dict:
    topics_out = []
    for topic in body["topics"]:
        partitions_out = []
        for p in topic["partitions"]:
            result = {"error_code": 0, "partition": p["partition"], "leader_epoch": -1,
                      "end_offset": -1}
            tp = TopicPartition(topic["topic"], p["partition"])
            try:
                partition_log = logs.leader_log(tp.topic, tp.partition,
                                                p.get("current_leader_epoch", -1))
                epoch, end_offset = partition_log.end_offset_for_epoch(p["leader_epoch"])
                result.update(leader_epoch=epoch, end_offset=end_offset)
            except KafkaError as error:
                result["error_code"] = error.errno
            partitions_out.append(result)
        topics_out.append({"topic": topic["topic"], "partitions": partitions_out})
    return {"throttle_time_ms": 0, "topics": topics_out}
