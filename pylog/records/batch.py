"""Build and decode whole v2 record batches (layout in :mod:`pylog.records.header`).

A batch is built by :class:`BatchBuilder` (the producer's accumulator appends records one
at a time and asks for the size so far) or by :func:`build_batch` in one call. Decoding
checks framing and CRC, decompresses the records section once, and decodes the records.

Fetch responses hold back-to-back batches whose last one may be cut short by the
broker's max_bytes: :func:`iter_records` stops cleanly there, while a complete batch that
is corrupt raises.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

from crc32c import crc32c

from pylog.errors import CorruptRecordError, RecordDecodeError, TruncatedBatchError
from pylog.records.compression import Compression, compress, decompress
from pylog.records.header import (
    BATCH_HEADER_SIZE,
    CONTROL_BIT,
    LOG_OVERHEAD,
    MAGIC,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    check_crc,
    read_batch_header,
)
from pylog.records.record import Header, Record, decode_records_into, record_size_bound
from pylog.records.records_buffer import RecordsBuffer

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc: the part before the CRC'd bytes.
_PREFIX = struct.Struct(">qiibI")
# attributes .. recordsCount: the CRC'd part of the header.
_CRC_HEADER = struct.Struct(">hiqqqhii")
_BATCH_LENGTH_BASE = BATCH_HEADER_SIZE - LOG_OVERHEAD


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    """One batch: its header and its records with absolute offsets."""

    header: BatchHeader
    records: list[Record]


class BatchBuilder:
    """Accumulates records into one v2 batch.

    >>> builder = BatchBuilder(compression=Compression.ZSTD)
    >>> builder.append(b"key", b"value", timestamp=1_700_000_000_000)
    0
    >>> batch = builder.build()

    ``size_in_bytes`` is the uncompressed batch size so far; ``would_exceed`` tells the
    producer whether one more record pushes it over ``batch.size``.
    """

    def __init__(self, *, compression: int = Compression.NONE, base_offset: int = 0,
                 producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                 partition_leader_epoch: int = -1, is_transactional: bool = False,
                 is_control: bool = False, log_append_time: bool = False) -> None:
        self.compression = Compression(compression)
        self.base_offset = base_offset
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.partition_leader_epoch = partition_leader_epoch
        self._attributes = int(self.compression)
        if is_transactional:
            self._attributes |= TRANSACTIONAL_BIT
        if is_control:
            self._attributes |= CONTROL_BIT
        if log_append_time:
            self._attributes |= TIMESTAMP_TYPE_BIT
        # Encoded as appended (in C when built): ``records.append`` is the producer's hot path.
        self.records = RecordsBuffer()

    @property
    def record_count(self) -> int:
        return len(self.records)

    @property
    def size_in_bytes(self) -> int:
        """Bytes of the batch built now, before compression."""
        return BATCH_HEADER_SIZE + self.records.size

    def would_exceed(self, limit: int, key: bytes | None, value: bytes | None,
                     headers: Sequence[Header] = ()) -> bool:
        """True if the batch is not empty and appending this record may exceed ``limit``."""
        return len(self.records) > 0 and self.size_in_bytes + record_size_bound(key, value, headers) > limit

    def append(self, key: bytes | None, value: bytes | None, headers: Sequence[Header] = (),
               timestamp: int = 0) -> int:
        """Add a record (timestamp in ms); return its offset delta within the batch."""
        offset_delta = len(self.records)
        self.records.append(key, value, timestamp, tuple(map(tuple, headers)) if headers else ())
        return offset_delta

    def build(self) -> bytes:
        """The finished batch bytes (compressed, CRC set)."""
        records = self.records
        body = compress(self.compression, records.getvalue())
        count = len(records)
        crc_header = _CRC_HEADER.pack(
            self._attributes, max(count - 1, 0), records.base_timestamp, records.max_timestamp,
            self.producer_id, self.producer_epoch, self.base_sequence, count)
        crc = crc32c(body, crc32c(crc_header))
        prefix = _PREFIX.pack(self.base_offset, _BATCH_LENGTH_BASE + len(body),
                              self.partition_leader_epoch, MAGIC, crc)
        return b"".join((prefix, crc_header, body))


def build_batch(records: Iterable[Sequence], *, base_offset: int = 0,
                compression: int = Compression.NONE, producer_id: int = -1,
                producer_epoch: int = -1, base_sequence: int = -1,
                partition_leader_epoch: int = -1, is_transactional: bool = False) -> bytes:
    """One batch from ``(key, value, headers, timestamp_ms)`` tuples or RecordInputs
    (``is_transactional``: part of the producer's open transaction)."""
    builder = BatchBuilder(compression=compression, base_offset=base_offset,
                           producer_id=producer_id, producer_epoch=producer_epoch,
                           base_sequence=base_sequence,
                           partition_leader_epoch=partition_leader_epoch,
                           is_transactional=is_transactional)
    for key, value, headers, timestamp in records:
        builder.append(key, value, headers or (), timestamp)
    return builder.build()


def records_section(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> bytes:
    """The decompressed records section of a checked batch."""
    view = memoryview(buf)[pos + BATCH_HEADER_SIZE:pos + header.size]
    return decompress(header.compression, view)


def decode_batch(buf: bytes | bytearray | memoryview, pos: int = 0) -> DecodedBatch:
    """Decode the complete batch at ``buf[pos:]`` (framing, CRC, decompression, records).

    Raises TruncatedBatchError, UnsupportedMagicError, BatchLengthError, BatchCrcError,
    CompressionError or RecordDecodeError.
    """
    header = read_batch_header(buf, pos)
    check_crc(buf, pos, header)
    return _decode_checked(buf, pos, header)


def _decode_checked(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> DecodedBatch:
    columns: tuple[list, ...] = ([], [], [], [], [])
    decode_section_into(buf, pos, header, *columns)
    return DecodedBatch(header, list(map(Record, *columns)))


def decode_section_into(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader,
                        offsets: list, timestamps: list, keys: list, values: list,
                        headers: list) -> None:
    """Decode the records of a checked batch, appending each field to its column."""
    if header.records_count < 0:
        raise RecordDecodeError(f"batch at position {pos}: negative record count")
    first = len(timestamps)
    decode_records_into(records_section(buf, pos, header), header.records_count,
                        header.base_offset, header.base_timestamp,
                        offsets, timestamps, keys, values, headers)
    if header.attributes & TIMESTAMP_TYPE_BIT:
        # LogAppendTime: every record has the time the broker appended the batch.
        timestamps[first:] = [header.max_timestamp] * (len(timestamps) - first)


def iter_batches(buf: bytes | bytearray | memoryview, *,
                 skip_control: bool = True) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` of each complete, CRC-checked batch.

    A partial batch at the end (normal in fetch responses) ends the iteration; a complete
    batch that is corrupt raises a CorruptRecordError subclass.
    """
    pos = 0
    end = len(buf)
    while pos < end:
        try:
            header = read_batch_header(buf, pos)
        except TruncatedBatchError:
            return
        check_crc(buf, pos, header)
        if not (skip_control and header.attributes & CONTROL_BIT):
            yield pos, header
        pos += header.size


def next_offset_after(buf: bytes | bytearray | memoryview) -> int | None:
    """The offset after the last complete batch of ``buf``, from the headers alone (no CRC
    check, no decompression): where the next fetch starts. None when no batch is
    complete or the framing is broken (decoding the buffer reports that properly)."""
    pos, end, found = 0, len(buf), None
    try:
        while pos < end:
            header = read_batch_header(buf, pos)
            found = header.next_offset
            pos += header.size
    except CorruptRecordError:  # TruncatedBatchError included: the partial tail
        pass
    return found


def iter_records(buf: bytes | bytearray | memoryview, *, skip_control: bool = True) -> Iterator[Record]:
    """Every record of the back-to-back batches in ``buf`` (a fetch response's records)."""
    for pos, header in iter_batches(buf, skip_control=skip_control):
        yield from _decode_checked(buf, pos, header).records
