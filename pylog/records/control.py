"""Transaction markers: the control batches that end a producer's transaction.

A marker is a v2 batch with the transactional and control attribute bits set
(:mod:`pylog.records.header`), the producer's id and epoch, base sequence -1, and one
record whose key and value say how the transaction ended (Kafka's ``EndTransactionMarker``)::

    key, 4 bytes, big-endian          value, 6 bytes, big-endian
    offset  size  field               offset  size  field
    0       2     version   0         0       2     version           0
    2       2     type      0 ABORT   2       4     coordinatorEpoch
                            1 COMMIT

Readers skip control batches; a read_committed consumer uses an ABORT marker to stop
dropping the aborted transaction's records of that producer. Pure code over bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from pylog.errors import CorruptRecordError
from pylog.records.batch import BatchBuilder, decode_batch
from pylog.records.header import BatchHeader

CONTROL_KEY_VERSION = 0
MARKER_VALUE_VERSION = 0
ABORT = 0
COMMIT = 1

_KEY = struct.Struct(">hh")  # version, type
_VALUE = struct.Struct(">hi")  # version, coordinatorEpoch


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """What a marker says: committed or aborted, and the coordinator epoch that wrote it."""

    commit: bool
    coordinator_epoch: int


def build_marker_batch(producer_id: int, producer_epoch: int, marker: TxnMarker,
                       timestamp_ms: int, partition_leader_epoch: int = -1) -> bytes:
    """One control batch holding ``marker`` for ``producer_id`` at ``producer_epoch``
    (base offset 0: the log assigns it)."""
    builder = BatchBuilder(producer_id=producer_id, producer_epoch=producer_epoch,
                           base_sequence=-1, partition_leader_epoch=partition_leader_epoch,
                           is_transactional=True, is_control=True)
    builder.append(_KEY.pack(CONTROL_KEY_VERSION, COMMIT if marker.commit else ABORT),
                   _VALUE.pack(MARKER_VALUE_VERSION, marker.coordinator_epoch),
                   timestamp=timestamp_ms)
    return builder.build()


def read_marker(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> TxnMarker:
    """The marker of the control batch at ``buf[pos:]`` (its ``header`` already read).

    Raises CorruptRecordError if the batch holds no marker record (a control batch
    of another type, or a malformed key or value)."""
    batch = decode_batch(buf, pos)
    if not batch.records:
        raise CorruptRecordError(f"control batch at offset {header.base_offset} has no record")
    record = batch.records[0]
    key, value = record.key, record.value
    if key is None or len(key) < _KEY.size:
        raise CorruptRecordError(f"control batch at offset {header.base_offset}: key too short")
    _, kind = _KEY.unpack_from(key)
    if kind not in (ABORT, COMMIT):
        raise CorruptRecordError(f"control batch at offset {header.base_offset}: type {kind} "
                                 "is not a transaction marker")
    if value is None or len(value) < _VALUE.size:
        raise CorruptRecordError(f"control batch at offset {header.base_offset}: marker value "
                                 "too short")
    _, coordinator_epoch = _VALUE.unpack_from(value)
    return TxnMarker(kind == COMMIT, coordinator_epoch)
