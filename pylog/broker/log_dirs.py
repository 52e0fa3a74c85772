"""DescribeLogDirs (API 35): each of this broker's log dirs with its partitions' sizes, as
``kafka-log-dirs.sh --describe`` and kafka-python's ``describe_log_dirs`` ask for them.

Per partition: the bytes of its segments, and its offset lag as Kafka reports it for a
replica's own log (how far its log end is behind the high watermark: 0). Per dir (v4): the file system's
total and usable bytes. ``topics`` null asks for every partition. pylog moves no replica
between dirs (AlterReplicaLogDirs is not served), so no log is a "future" one.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from pylog.broker.partitions import PartitionLogs
from pylog.protocol import ApiKey

API_KEY = ApiKey.DESCRIBE_LOG_DIRS
VERSIONS = (1, 4)


class LogDirsHandler:
    def __init__(self, logs: PartitionLogs) -> None:
        self.logs = logs

    def handle(self, version: int, body: dict, session) -> dict:
        wanted = None if body["topics"] is None else {
            (t["topic"], p) for t in body["topics"] for p in t["partitions"]}
        # Reported as configured (absolute); matched with each log's dir resolved.
        named = {Path(d).resolve(): Path(d).absolute() for d in self.logs.manager.log_dirs}
        by_dir: dict[Path, dict[str, list[dict]]] = {path: {} for path in named}
        for tp in sorted(self.logs.local_partitions()):
            if wanted is not None and (tp.topic, tp.partition) not in wanted:
                continue
            partition_log = self.logs.local_log(tp.topic, tp.partition)
            if partition_log is None:
                continue
            topics = by_dir.setdefault(partition_log.directory.parent.resolve(), {})
            topics.setdefault(tp.topic, []).append({
                "partition_index": tp.partition, "partition_size": partition_log.size_bytes,
                # Kafka's lag of a current (not future) replica: how far its log end is
                # behind the high watermark, which on a broker's own log is never.
                "offset_lag": max(0, partition_log.high_watermark
                                  - partition_log.log_end_offset),
                "is_future_key": False})
        return {"throttle_time_ms": 0, "error_code": 0, "results": [
            {"error_code": 0, "log_dir": str(named.get(log_dir, log_dir)),
             "topics": [{"name": name, "partitions": partitions}
                        for name, partitions in topics.items()],
             **_usage(log_dir)}
            for log_dir, topics in by_dir.items()]}


def _usage(log_dir: Path) -> dict:
    try:
        usage = shutil.disk_usage(log_dir)
    except OSError:
        return {"total_bytes": -1, "usable_bytes": -1}
    return {"total_bytes": usage.total, "usable_bytes": usage.free}
