"""Record batch v2 headers: parse and check a batch without decoding its records.

This is the broker's path: it validates whole batches and assigns offsets while the
records themselves stay opaque (and stay compressed).

Layout of a v2 record batch, big-endian, 61-byte header then the records::

    offset  size  field
    0       8     baseOffset            assigned by the broker; not covered by the CRC
    8       4     batchLength           bytes after this field (whole batch = batchLength + 12)
    12      4     partitionLeaderEpoch  not covered by the CRC
    16      1     magic                 2
    17      4     crc                   CRC-32C (Castagnoli) of bytes [21, end of batch)
    21      2     attributes            bits 0-2 compression, 3 timestampType,
                                        4 isTransactional, 5 isControlBatch
    23      4     lastOffsetDelta
    27      8     baseTimestamp
    35      8     maxTimestamp
    43      8     producerId
    51      2     producerEpoch
    53      4     baseSequence
    57      4     recordsCount
    61      ...   records (compressed as a whole when attributes say so)
"""

from __future__ import annotations

import struct
from typing import Iterator, NamedTuple

from crc32c import crc32c

from pylog.errors import (
    BatchCrcError,
    BatchLengthError,
    TruncatedBatchError,
    UnsupportedMagicError,
)

MAGIC = 2
BATCH_HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes not counted by batchLength
CRC_START = 21  # the CRC covers [CRC_START, end)

# The whole header in one unpack.
_HEADER = struct.Struct(">qiibIhiqqqhii")
_LENGTH_AND_MAGIC = struct.Struct(">qiib")  # baseOffset, batchLength, epoch, magic
_BASE_OFFSET = struct.Struct(">q")
_PARTITION_LEADER_EPOCH = struct.Struct(">i")
_PARTITION_LEADER_EPOCH_POSITION = 12  # see the layout above
_CRC = struct.Struct(">I")
_CRC_POSITION = 17
_ATTRIBUTES = struct.Struct(">h")
_ATTRIBUTES_POSITION = 21
_MAX_TIMESTAMP = struct.Struct(">q")
MAX_TIMESTAMP_POSITION = 35

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20


class BatchHeader(NamedTuple):
    """The 61-byte header of one record batch, as read from bytes.

    A named tuple, not a dataclass: the broker reads one per batch it appends or serves,
    and a tuple is built straight from ``struct.unpack`` (``_make_header``) for a tenth
    of a frozen dataclass's cost.
    """

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes of the whole batch, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        """0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd."""
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        """0 CreateTime, 1 LogAppendTime."""
        return (self.attributes & TIMESTAMP_TYPE_BIT) >> 3

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)


def read_batch_header(buf: bytes | bytearray | memoryview, pos: int = 0,
                      max_batch_size: int | None = None) -> BatchHeader:
    """Parse the header of the batch at ``buf[pos:]`` and check its framing.

    Checks that the header is complete, the magic is 2, the length is at least a header
    and at most ``max_batch_size`` (if given), and that the whole batch is in ``buf``.
    The CRC is not checked here; see :func:`check_crc`.

    Raises TruncatedBatchError, UnsupportedMagicError or BatchLengthError.
    """
    available = len(buf) - pos
    if available < LOG_OVERHEAD + 5:
        raise TruncatedBatchError(
            f"batch at position {pos}: {available} bytes left, need a {BATCH_HEADER_SIZE}-byte header")
    _, batch_length, _, magic = _LENGTH_AND_MAGIC.unpack_from(buf, pos)
    if magic != MAGIC:
        raise UnsupportedMagicError(f"batch at position {pos}: magic {magic}, only magic 2 is supported")
    size = batch_length + LOG_OVERHEAD
    if size < BATCH_HEADER_SIZE:
        raise BatchLengthError(f"batch at position {pos}: length {batch_length} is shorter than a header")
    if max_batch_size is not None and size > max_batch_size:
        raise BatchLengthError(f"batch at position {pos}: {size} bytes exceeds the limit of {max_batch_size}")
    if available < BATCH_HEADER_SIZE:
        raise TruncatedBatchError(
            f"batch at position {pos}: {available} bytes left, need a {BATCH_HEADER_SIZE}-byte header")
    if available < size:
        raise TruncatedBatchError(f"batch at position {pos}: {available} bytes left of a {size}-byte batch")
    return _make_header(_HEADER.unpack_from(buf, pos))


def _make_header(fields: tuple) -> BatchHeader:
    """A BatchHeader from the 13 values ``_HEADER`` unpacks, without the keyword machinery."""
    return tuple.__new__(BatchHeader, fields)


def compute_crc(buf: bytes | bytearray | memoryview, pos: int, size: int) -> int:
    """CRC-32C of the CRC-covered part of the batch at ``buf[pos:pos+size]``."""
    view = memoryview(buf)
    return crc32c(view[pos + CRC_START:pos + size])


def check_crc(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> None:
    """Raise BatchCrcError unless the batch's stored CRC matches its contents."""
    actual = compute_crc(buf, pos, header.size)
    if actual != header.crc:
        raise BatchCrcError(
            f"batch at position {pos} (base offset {header.base_offset}): "
            f"stored CRC {header.crc:#010x}, computed {actual:#010x}")


def iter_batch_headers(buf: bytes | bytearray | memoryview, *, verify_crc: bool = True,
                       max_batch_size: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for each batch in a buffer of back-to-back batches.

    Only headers are parsed (and the CRC checked when ``verify_crc``); records are not
    decoded. Any invalid or partial batch raises a CorruptRecordError subclass, so a
    caller that wants the valid prefix catches it and uses the last position yielded.
    """
    pos = 0
    end = len(buf)
    view = memoryview(buf)
    while pos < end:
        header = read_batch_header(buf, pos, max_batch_size)
        size = header[1] + LOG_OVERHEAD
        if verify_crc and crc32c(view[pos + CRC_START:pos + size]) != header[4]:
            check_crc(buf, pos, header)  # raises, with the message
        yield pos, header
        pos += size


def checked_batch_headers(buf: bytes | bytearray | memoryview) -> list[tuple[int, BatchHeader]]:
    """``(position, header)`` of every batch in ``buf``, each CRC checked: what
    ``list(iter_batch_headers(buf))`` gives, and the same errors, in one loop with the
    header checks inlined (the broker runs it on every batch it is sent)."""
    view = memoryview(buf)
    end = len(view)
    unpack = _HEADER.unpack_from
    new = tuple.__new__
    batches = []
    pos = 0
    while pos < end:
        if end - pos < BATCH_HEADER_SIZE:
            read_batch_header(buf, pos)  # raises, with the message
        fields = unpack(view, pos)
        size = fields[1] + LOG_OVERHEAD
        if (fields[3] != MAGIC or size < BATCH_HEADER_SIZE or end - pos < size
                or crc32c(view[pos + CRC_START:pos + size]) != fields[4]):
            header = read_batch_header(buf, pos)  # raises on the framing, with the message
            check_crc(buf, pos, header)  # else on the CRC
        batches.append((pos, new(BatchHeader, fields)))
        pos += size
    return batches


def set_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    """Overwrite the baseOffset field of the batch at ``buf[pos:]`` (the CRC stays valid)."""
    _BASE_OFFSET.pack_into(buf, pos, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    """Overwrite the partitionLeaderEpoch field of the batch at ``buf[pos:]`` (the CRC stays
    valid: like baseOffset, the field is outside the bytes it covers)."""
    _PARTITION_LEADER_EPOCH.pack_into(buf, pos + _PARTITION_LEADER_EPOCH_POSITION, epoch)


def set_log_append_time(buf: bytearray | memoryview, pos: int, header: BatchHeader,
                        timestamp: int) -> BatchHeader:
    """Stamp the batch at ``buf[pos:]`` with the broker's append time, as a topic with
    ``message.timestamp.type=LogAppendTime`` does: the timestampType bit set, maxTimestamp
    ``timestamp`` (every record of the batch then has it) and the CRC recomputed. The
    records keep their deltas. Returns the batch's new header."""
    attributes = header.attributes | TIMESTAMP_TYPE_BIT
    _ATTRIBUTES.pack_into(buf, pos + _ATTRIBUTES_POSITION, attributes)
    _MAX_TIMESTAMP.pack_into(buf, pos + MAX_TIMESTAMP_POSITION, timestamp)
    crc = compute_crc(buf, pos, header.size)
    _CRC.pack_into(buf, pos + _CRC_POSITION, crc)
    return header._replace(crc=crc, attributes=attributes, max_timestamp=timestamp)
