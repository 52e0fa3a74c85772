"""``__transaction_state`` as the transaction coordinator uses it (an
``InternalTopicStore``): created on first use from the broker's
``transaction.state.log.*`` settings, one record per state change of a transactional id.
"""

from __future__ import annotations

from typing import Callable, Iterator

from pylog.broker.partitions import PartitionLogs
from pylog.cluster.metadata import ClusterMetadata
from pylog.coordinator.internal_topic import InternalTopicStore
from pylog.records.record import Record
from pylog.types import TopicPartition

TRANSACTION_TOPIC = "__transaction_state"
# Kafka's request.timeout.ms: how long a state write may wait for the in-sync replicas.
APPEND_TIMEOUT_S = 30.0


def txn_tp(partition: int) -> TopicPartition:
    return TopicPartition(TRANSACTION_TOPIC, partition)


class TransactionLogStore(InternalTopicStore):
    """Reads and writes ``__transaction_state`` through the broker's partition logs.

    ``settings``: the broker's ``transaction.state.log.*`` values (partitions,
    replication factor, min ISR, segment bytes, load buffer size).
    """

    def __init__(self, logs: PartitionLogs, metadata: ClusterMetadata, settings,
                 clock: Callable[[], float]) -> None:
        super().__init__(TRANSACTION_TOPIC, logs, metadata, APPEND_TIMEOUT_S,
                         settings["transaction.state.log.load.buffer.size"], clock)
        self.settings = settings

    def ensure_topic(self) -> bool:
        """Create ``__transaction_state`` on first use; False if it cannot exist yet."""
        settings = self.settings
        return self.create_if_missing(
            settings["transaction.state.log.num.partitions"],
            settings["transaction.state.log.replication.factor"],
            {"segment.bytes": str(settings["transaction.state.log.segment.bytes"])},
            min_insync_replicas=settings["transaction.state.log.min.isr"])

    def read_partition(self, partition: int) -> Iterator[Record]:
        """Every record of a partition this broker leads, up to its log end."""
        for header, records in self.read_batches(partition):
            if not header.is_control:
                yield from records
