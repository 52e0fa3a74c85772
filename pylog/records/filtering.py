"""Rewrite a v2 batch keeping some of its records: the log cleaner's codec.

A kept batch keeps what identifies it: baseOffset and lastOffsetDelta (as Kafka's
``overrideLastOffset``, so the producer's last sequence stays ``baseSequence +
lastOffsetDelta`` and the offsets after the batch stay where they were), baseTimestamp,
attributes, producer id, epoch, base sequence and partitionLeaderEpoch. Each kept record
keeps its bytes: its offset and timestamp deltas are relative to the unchanged bases. Only
recordsCount, maxTimestamp (for CreateTime), the records section (recompressed with the
batch's codec) and the CRC change, so offsets in a compacted log have gaps *inside* batches.

Offsets whose batches went entirely are covered by an empty batch (recordsCount 0, no
producer): readers step over it by its lastOffsetDelta, as over a batch emptied by Kafka's
cleaner, and the batches of a segment stay contiguous by their headers.

Pure code over bytes; the layout of a batch is in :mod:`pylog.records.header`, of a record
in :mod:`pylog.records.record`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Sequence

from crc32c import crc32c

from pylog.errors import RecordDecodeError
from pylog.records.batch import records_section
from pylog.records.compression import compress
from pylog.records.header import (
    BATCH_HEADER_SIZE, COMPRESSION_MASK, LOG_OVERHEAD, MAGIC, BatchHeader)
from pylog.records.record import read_varint

try:
    import numpy as np

    from pylog.records import _speedups
except ImportError:  # built without a C compiler: the Python walk below
    _speedups = None

_PREFIX = struct.Struct(">qiibI")  # baseOffset, batchLength, partitionLeaderEpoch, magic, crc
_CRC_HEADER = struct.Struct(">hiqqqhii")  # attributes .. recordsCount
_BATCH_LENGTH_BASE = BATCH_HEADER_SIZE - LOG_OVERHEAD
_LOG_APPEND_TIME = 0x08


@dataclass(frozen=True, slots=True)
class RecordSpans:
    """The records of one batch's decompressed section, as the cleaner needs them:
    where record ``i`` lies (``starts[i]:ends[i]``, length prefix included), its absolute
    offset and timestamp, its key, and whether its value is null (a tombstone)."""

    section: bytes
    starts: Sequence[int]
    ends: Sequence[int]
    offsets: Sequence[int]
    timestamps: Sequence[int]
    keys: Sequence[bytes | None]
    tombstones: Sequence[bool]


def scan_records(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> RecordSpans:
    """The records of the (CRC-checked) batch at ``buf[pos:]``; RecordDecodeError if malformed.

    Uses the C walk of :mod:`pylog.records.vectorised` when it is built (one call per
    batch for every field), else one Python step per record.
    """
    section = records_section(buf, pos, header)
    count = header.records_count
    if count < 0:
        raise RecordDecodeError(f"batch at offset {header.base_offset}: negative record count")
    if _speedups is not None and count:
        try:
            return _scan_native(section, count, header)
        except ValueError:
            pass  # the Python walk reports what is wrong
    return _scan_python(section, count, header)


def _scan_native(section: bytes, count: int, header: BatchHeader) -> RecordSpans:
    starts = _speedups.record_starts(section, count, 0)
    ends = np.full(count, len(section), np.int64).tobytes()
    fields = np.frombuffer(_speedups.record_fields(section, starts, ends, len(section)),
                           np.int64).reshape(8, count)
    ts_delta, offset_delta, key_start, key_length, _, value_length, _, record_end = fields.tolist()
    keys = [None if length < 0 else section[start:start + length]
            for start, length in zip(key_start, key_length)]
    base_offset, base_timestamp = header.base_offset, header.base_timestamp
    return RecordSpans(section, np.frombuffer(starts, np.int64).tolist(), record_end,
                       [base_offset + d for d in offset_delta],
                       [header.max_timestamp] * count if header.attributes & _LOG_APPEND_TIME
                       else [base_timestamp + d for d in ts_delta], keys,
                       [length < 0 for length in value_length])


def _scan_python(section: bytes, count: int, header: BatchHeader) -> RecordSpans:
    starts, ends, offsets, timestamps, keys, tombstones = [], [], [], [], [], []
    pos, end = 0, len(section)
    try:
        for _ in range(count):
            starts.append(pos)
            length, p = read_varint(section, pos)
            record_end = p + length
            if length < 6 or record_end > end:
                raise RecordDecodeError(f"record length {length} at position {pos} out of range")
            ts_delta, p = read_varint(section, p + 1)
            offset_delta, p = read_varint(section, p)
            key_length, p = read_varint(section, p)
            keys.append(None if key_length < 0 else section[p:p + key_length])
            p += max(key_length, 0)
            value_length, p = read_varint(section, p)
            tombstones.append(value_length < 0)
            ends.append(record_end)
            offsets.append(header.base_offset + offset_delta)
            timestamps.append(header.base_timestamp + ts_delta)
            pos = record_end
    except IndexError:
        raise RecordDecodeError("record runs past the end of the batch") from None
    if pos != end:
        raise RecordDecodeError(f"{end - pos} bytes after the last of {count} records")
    if header.attributes & _LOG_APPEND_TIME:
        timestamps = [header.max_timestamp] * count
    return RecordSpans(section, starts, ends, offsets, timestamps, keys, tombstones)


def retain_records(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader,
                   spans: RecordSpans, keep: Sequence[bool]) -> bytes | None:
    """The batch at ``buf[pos:]`` with only the records where ``keep[i]``: the same bytes if
    all are kept, None if none is. See the module docstring for what is preserved."""
    kept = [i for i, wanted in enumerate(keep) if wanted]
    if not kept:
        return None
    if len(kept) == header.records_count:
        return bytes(memoryview(buf)[pos:pos + header.size])
    section = spans.section
    body = compress(header.compression, b"".join([section[spans.starts[i]:spans.ends[i]] for i in kept]))
    if header.attributes & _LOG_APPEND_TIME:
        max_timestamp = header.max_timestamp
    else:
        max_timestamp = max(spans.timestamps[i] for i in kept)
    return _assemble(header.base_offset, header.partition_leader_epoch, header.attributes,
                     header.last_offset_delta, header.base_timestamp, max_timestamp,
                     header.producer_id, header.producer_epoch, header.base_sequence,
                     len(kept), body)


def empty_batch(base_offset: int, last_offset_delta: int, max_timestamp: int,
                partition_leader_epoch: int = -1) -> bytes:
    """A batch with no records covering ``base_offset .. base_offset + last_offset_delta``."""
    return _assemble(base_offset, partition_leader_epoch, 0, last_offset_delta, max_timestamp,
                     max_timestamp, -1, -1, -1, 0, b"")


def recompressed(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader,
                 codec: int, level: int | None = None) -> bytes:
    """The (CRC-checked) batch at ``buf[pos:]`` with its records section compressed with
    ``codec`` at ``level`` instead (a topic's ``compression.type`` and
    ``compression.<codec>.level``); the records and every other field are unchanged, the
    length and CRC recomputed."""
    body = compress(codec, records_section(buf, pos, header), level)
    return _assemble(header.base_offset, header.partition_leader_epoch,
                     (header.attributes & ~COMPRESSION_MASK) | codec, header.last_offset_delta,
                     header.base_timestamp, header.max_timestamp, header.producer_id,
                     header.producer_epoch, header.base_sequence, header.records_count, body)


def with_last_offset_delta(batch: bytes, last_offset_delta: int) -> bytes:
    """``batch`` (one whole batch) covering offsets up to ``base + last_offset_delta``;
    the records are unchanged, the CRC is recomputed."""
    (base_offset, _, epoch, _, _, attributes, _, base_timestamp, max_timestamp, producer_id,
     producer_epoch, base_sequence, count) = struct.unpack_from(">qiibIhiqqqhii", batch)
    return _assemble(base_offset, epoch, attributes, last_offset_delta, base_timestamp,
                     max_timestamp, producer_id, producer_epoch, base_sequence, count,
                     memoryview(batch)[BATCH_HEADER_SIZE:])


def _assemble(base_offset: int, partition_leader_epoch: int, attributes: int,
              last_offset_delta: int, base_timestamp: int, max_timestamp: int,
              producer_id: int, producer_epoch: int, base_sequence: int, count: int,
              body: bytes | memoryview) -> bytes:
    crc_header = _CRC_HEADER.pack(attributes, last_offset_delta, base_timestamp, max_timestamp,
                                  producer_id, producer_epoch, base_sequence, count)
    crc = crc32c(body, crc32c(crc_header))
    prefix = _PREFIX.pack(base_offset, _BATCH_LENGTH_BASE + len(body), partition_leader_epoch,
                          MAGIC, crc)
    return b"".join((prefix, crc_header, body))
