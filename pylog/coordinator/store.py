"""``__consumer_offsets`` as the group coordinator uses it (an ``InternalTopicStore``).

Offsets a transaction commits are appended as a transactional batch carrying the
producer's id and epoch (``TxnProducer``), so the transaction's COMMIT or ABORT marker (a
control batch written later by the transaction coordinator) settles them;
``read_batches`` hands the loader every batch, control batches included, with its header.
"""

from __future__ import annotations

from typing import Callable

from pylog.broker.partitions import PartitionLogs
from pylog.cluster.metadata import ClusterMetadata
from pylog.coordinator.internal_topic import AppendTicket, InternalTopicStore, TxnProducer
from pylog.errors import CoordinatorNotAvailableError, NotCoordinatorError
from pylog.types import TopicPartition

__all__ = ["OFFSETS_TOPIC", "AppendTicket", "CoordinatorNotAvailableError",
           "NotCoordinatorError", "OffsetsTopicStore", "TxnProducer", "offsets_tp"]

OFFSETS_TOPIC = "__consumer_offsets"


def offsets_tp(partition: int) -> TopicPartition:
    return TopicPartition(OFFSETS_TOPIC, partition)


class OffsetsTopicStore(InternalTopicStore):
    """Reads and writes ``__consumer_offsets`` through the broker's partition logs;
    an append waits ``offsets.commit.timeout.ms`` for the in-sync replicas."""

    def __init__(self, logs: PartitionLogs, metadata: ClusterMetadata,
                 commit_timeout_ms: int, load_buffer_bytes: int,
                 clock: Callable[[], float]) -> None:
        super().__init__(OFFSETS_TOPIC, logs, metadata, commit_timeout_ms / 1000,
                         load_buffer_bytes, clock)
