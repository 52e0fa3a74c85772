"""``__transaction_state`` as the transaction coordinator uses it: creating it on first
use, which partitions this broker leads, appends that count once the in-sync replicas
have them, and reading a partition back.

Appends count as the group coordinator's do (``pylog.coordinator.store.AppendTicket``):
done when the high watermark passes them while this broker still leads in the same
leader epoch; standalone, at once. A lost leadership is NOT_COORDINATOR, a short ISR
COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

import logging
from typing import Callable, Iterator

from pylog.broker.partitions import PartitionLogs
from pylog.broker.replica import Role
from pylog.cluster.metadata import NO_LEADER, ClusterMetadata
from pylog.coordinator.store import AppendTicket
from pylog.errors import (
    CoordinatorNotAvailableError, KafkaError, NotCoordinatorError, NotEnoughReplicasError,
    NotLeaderOrFollowerError, TopicAlreadyExistsError, UnknownTopicOrPartitionError)
from pylog.records.batch import build_batch, iter_records, next_offset_after
from pylog.records.compression import Compression
from pylog.records.record import Record
from pylog.types import BrokerEndpoint, TopicPartition

log = logging.getLogger(__name__)

TRANSACTION_TOPIC = "__transaction_state"
# Kafka's request.timeout.ms: how long a state write may wait for the in-sync replicas.
APPEND_TIMEOUT_S = 30.0


def txn_tp(partition: int) -> TopicPartition:
    return TopicPartition(TRANSACTION_TOPIC, partition)


class TransactionLogStore:
    """Reads and writes ``__transaction_state`` through the broker's partition logs.

    ``settings``: the broker's ``transaction.state.log.*`` values (partitions,
    replication factor, min ISR, segment bytes, load buffer size).
    """

    def __init__(self, logs: PartitionLogs, metadata: ClusterMetadata, settings,
                 clock: Callable[[], float]) -> None:
        self.logs = logs
        self.metadata = metadata
        self.settings = settings
        self.clock = clock

    def num_partitions(self) -> int | None:
        topic = self.metadata.topic(TRANSACTION_TOPIC)
        return None if topic is None else topic.num_partitions

    def ensure_topic(self) -> bool:
        """Create ``__transaction_state`` on first use; False if it cannot exist yet."""
        if self.metadata.topic(TRANSACTION_TOPIC) is not None:
            return True
        live = len(self.metadata.brokers())
        if live == 0:
            return False
        settings = self.settings
        partitions = settings["transaction.state.log.num.partitions"]
        replication = max(1, min(settings["transaction.state.log.replication.factor"], live))
        # A topic whose min ISR exceeds its replicas could never be written: cap it.
        min_isr = max(1, min(settings["transaction.state.log.min.isr"], replication))
        configs = {"cleanup.policy": "compact", "min.insync.replicas": str(min_isr),
                   "segment.bytes": str(settings["transaction.state.log.segment.bytes"])}
        try:
            self.metadata.create_topic(TRANSACTION_TOPIC, partitions, replication, configs)
            log.info("created %s with %d partitions, replication factor %d, min ISR %d",
                     TRANSACTION_TOPIC, partitions, replication, min_isr)
        except TopicAlreadyExistsError:
            pass
        except KafkaError as error:
            log.warning("could not create %s: %s", TRANSACTION_TOPIC, error)
            return False
        return True

    def leader_of(self, partition: int) -> BrokerEndpoint | None:
        topic = self.metadata.topic(TRANSACTION_TOPIC)
        state = None if topic is None else topic.partitions.get(partition)
        if state is None or state.leader == NO_LEADER:
            return None
        return next((b for b in self.metadata.brokers() if b.broker_id == state.leader), None)

    def led_partitions(self) -> dict[int, int]:
        """Partitions of ``__transaction_state`` this broker leads, with their epochs."""
        topic = self.metadata.topic(TRANSACTION_TOPIC)
        if topic is None:
            return {}
        replicas = self.logs.replicas
        if replicas is None:
            return {p: 0 for p in topic.partitions}
        led = {}
        for tp in replicas.led_partitions():
            if tp.topic == TRANSACTION_TOPIC:
                try:
                    role, epoch, _ = replicas.leader_replica(tp).role_snapshot()
                except KafkaError:
                    continue
                if role is Role.LEADER:
                    led[tp.partition] = epoch
        return led

    def append(self, partition: int, key: bytes, value: bytes | None,
               timestamp_ms: int) -> AppendTicket:
        """Append one record (None: a tombstone) as leader; NotCoordinatorError when this
        broker does not lead the partition, CoordinatorNotAvailableError when its ISR is
        below its min ISR."""
        batch = build_batch([(key, value, (), timestamp_ms)], compression=Compression.NONE)
        try:
            if self.logs.replicas is None:
                info = self.logs.leader_log(TRANSACTION_TOPIC, partition).append(batch)
                return AppendTicket(partition, None, 0, info.last_offset + 1, 0.0)
            info, replica, epoch = self.logs.replicas.append_as_leader(txn_tp(partition),
                                                                       batch, -1)
        except (NotLeaderOrFollowerError, UnknownTopicOrPartitionError) as error:
            raise NotCoordinatorError(str(error)) from None
        except NotEnoughReplicasError as error:
            raise CoordinatorNotAvailableError(str(error)) from None
        return AppendTicket(partition, replica, epoch, info.last_offset + 1,
                            self.clock() + APPEND_TIMEOUT_S)

    def read_partition(self, partition: int) -> Iterator[Record]:
        """Every record of a partition this broker leads, up to its log end."""
        partition_log = self.logs.replica_log(TRANSACTION_TOPIC, partition)
        buffer_bytes = self.settings["transaction.state.log.load.buffer.size"]
        offset = partition_log.log_start_offset
        while offset < partition_log.log_end_offset:
            result = partition_log.read(offset, buffer_bytes, up_to_log_end=True)
            if result.region is None:
                return
            with result.region as region:
                buf = region.read_bytes()
            following = next_offset_after(buf)
            if following is None or following <= offset:
                return
            yield from iter_records(buf)
            offset = following
