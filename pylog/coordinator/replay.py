"""Rebuilding the groups of a ``__consumer_offsets`` partition from its batches, in log order.

A plain offset commit record sets the group's committed offset; its tombstone removes it,
and with it the pending transactional offsets of that partition written before it. An
offset commit record in a transactional batch is pending under the batch's producer id
until that producer's control batch: COMMIT makes it committed unless a later-written
commit of the same partition is (the log offsets decide), ABORT drops it. Transactions
still open at the end of the log stay pending, waiting for their marker. Group metadata
records (and their tombstones) keep the last value per group.

This is Kafka's loading of the offsets topic (``GroupMetadataManager`` with the tombstone
rule of its newer ``OffsetMetadataManager``). No I/O: the coordinator feeds it batches.
"""

from __future__ import annotations

import logging
from collections import defaultdict

from pylog.coordinator.group import StoredOffset, TopicPartitionKey
from pylog.coordinator.records import (
    CONTROL_ABORT, CONTROL_COMMIT, GroupKey, GroupValue, OffsetKey, decode_control_type,
    decode_group_value, decode_key, decode_offset_value)
from pylog.errors import KafkaError
from pylog.records.header import BatchHeader
from pylog.records.record import Record

log = logging.getLogger(__name__)


class OffsetsReplay:
    """Feed it every batch of a partition with ``apply``, then read the result:

    ``committed``: group -> {(topic, partition): StoredOffset};
    ``pending``: producer id -> group -> {(topic, partition): StoredOffset} (open transactions);
    ``group_values``: group -> its last GroupValue, or None after a tombstone.
    """

    def __init__(self, partition_name: str = "") -> None:
        self.partition_name = partition_name
        self.committed: dict[str, dict[TopicPartitionKey, StoredOffset]] = defaultdict(dict)
        self.pending: dict[int, dict[str, dict[TopicPartitionKey, StoredOffset]]] = {}
        self.group_values: dict[str, GroupValue | None] = {}
        self.records = 0

    def group_ids(self) -> set[str]:
        """Every group the partition has something for."""
        return ({g for g, offsets in self.committed.items() if offsets}
                | set(self.group_values)
                | {g for groups in self.pending.values() for g, offsets in groups.items()
                   if offsets})

    def pending_by_group(self) -> dict[str, dict[int, dict[TopicPartitionKey, StoredOffset]]]:
        """group -> producer id -> the offsets its open transaction wrote."""
        by_group: dict[str, dict[int, dict[TopicPartitionKey, StoredOffset]]] = {}
        for producer_id, groups in self.pending.items():
            for group_id, offsets in groups.items():
                if offsets:
                    by_group.setdefault(group_id, {})[producer_id] = dict(offsets)
        return by_group

    def apply(self, header: BatchHeader, records: list[Record]) -> None:
        self.records += len(records)
        if header.is_control:
            if records:
                self._marker(header, records[0])
            return
        producer_id = header.producer_id if header.is_transactional else None
        for record in records:
            if record.key is None:
                continue
            try:
                key = decode_key(record.key)
                if isinstance(key, OffsetKey):
                    self._offset(key, record.value, header.base_offset, producer_id)
                elif isinstance(key, GroupKey):
                    self.group_values[key.group] = (None if record.value is None
                                                    else decode_group_value(record.value))
            except KafkaError as error:
                log.warning("%s offset %d: skipping a record that does not decode: %s",
                            self.partition_name, record.offset, error)

    def _offset(self, key: OffsetKey, value: bytes | None, log_offset: int,
                producer_id: int | None) -> None:
        slot = (key.topic, key.partition)
        if producer_id is not None:
            pending = self.pending.setdefault(producer_id, {}).setdefault(key.group, {})
            if value is None:
                pending.pop(slot, None)
            else:
                pending[slot] = StoredOffset(decode_offset_value(value), log_offset)
            return
        if value is None:
            self.committed[key.group].pop(slot, None)
            for groups in self.pending.values():
                groups.get(key.group, {}).pop(slot, None)
        else:
            self.committed[key.group][slot] = StoredOffset(decode_offset_value(value),
                                                           log_offset)

    def _marker(self, header: BatchHeader, record: Record) -> None:
        try:
            kind = decode_control_type(record.key)
        except KafkaError as error:
            log.warning("%s offset %d: skipping a control record that does not decode: %s",
                        self.partition_name, record.offset, error)
            return
        if kind not in (CONTROL_COMMIT, CONTROL_ABORT):
            return
        groups = self.pending.pop(header.producer_id, {})
        if kind == CONTROL_COMMIT:
            for group_id, offsets in groups.items():
                committed = self.committed[group_id]
                for slot, stored in offsets.items():
                    if stored.supersedes(committed.get(slot)):
                        committed[slot] = stored
