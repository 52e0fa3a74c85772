"""Names of everything the log keeps on disk, in one place.

::

    <log.dir>/
      .lock                                  flock held while a LogManager owns the dir
      .clean_shutdown                        present only after a clean LogManager.close()
      recovery-point-offset-checkpoint       see checkpoint.py
      log-start-offset-checkpoint            see checkpoint.py
      replication-offset-checkpoint          replicated high watermarks, see checkpoint.py
      cleaner-offset-checkpoint              where each compacted log's dirty part starts (cleaner)
      <topic>-<partition>/                   one directory per partition (topic may contain '-')
        leader-epoch-checkpoint              first offset of each leader epoch (leader_epoch.py)
        00000000000000368769.log             record batches; the name is the segment's base offset
        00000000000000368769.index           offset index (offset_index.py)
        00000000000000368769.timeindex       time index (time_index.py)
        00000000000000368769.txnindex        aborted transactions, only once there is one
                                             (transaction_index.py)
        00000000000000368769.snapshot        producer state up to that offset (producer_snapshot.py)
        00000000000000368769.log.cleaned     a cleaned segment being written (and its indexes)
        00000000000000368769.log.swap        a cleaned segment ready to replace its originals
                                             (swap.py: recovery completes or discards these)
"""

from __future__ import annotations

import re
from pathlib import Path

from pylog.types import TopicPartition

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
TEMP_SUFFIX = ".tmp"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"

LOCK_FILE = ".lock"
CLEAN_SHUTDOWN_FILE = ".clean_shutdown"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"  # in each partition dir

_SEGMENT_NAME = re.compile(r"^(\d{20})\.(log|index|timeindex|txnindex)$")
_SNAPSHOT_NAME = re.compile(r"^(\d{20})\.snapshot$")
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")


def segment_file_name(base_offset: int, suffix: str) -> str:
    """``segment_file_name(368769, ".log") == "00000000000000368769.log"``."""
    return f"{base_offset:020d}{suffix}"


def log_file(directory: Path, base_offset: int) -> Path:
    return directory / segment_file_name(base_offset, LOG_SUFFIX)


def index_file(directory: Path, base_offset: int) -> Path:
    return directory / segment_file_name(base_offset, INDEX_SUFFIX)


def time_index_file(directory: Path, base_offset: int) -> Path:
    return directory / segment_file_name(base_offset, TIME_INDEX_SUFFIX)


def txn_index_file(directory: Path, base_offset: int) -> Path:
    return directory / segment_file_name(base_offset, TXN_INDEX_SUFFIX)


def parse_segment_file(name: str) -> tuple[int, str] | None:
    """``("00000000000000000042.index")`` -> ``(42, ".index")``; None for other names."""
    match = _SEGMENT_NAME.match(name)
    if match is None:
        return None
    return int(match.group(1)), "." + match.group(2)


def snapshot_file(directory: Path, offset: int) -> Path:
    """The producer state snapshot taken at ``offset`` (the state of every batch below it)."""
    return directory / segment_file_name(offset, SNAPSHOT_SUFFIX)


def parse_snapshot_file(name: str) -> int | None:
    """``("00000000000000000042.snapshot")`` -> ``42``; None for other names."""
    match = _SNAPSHOT_NAME.match(name)
    return None if match is None else int(match.group(1))


def partition_dir_name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


def parse_partition_dir(name: str) -> TopicPartition | None:
    """``"my-topic-3"`` -> ``TopicPartition("my-topic", 3)`` (the partition follows the last '-')."""
    match = _PARTITION_DIR.match(name)
    if match is None:
        return None
    return TopicPartition(match.group(1), int(match.group(2)))
