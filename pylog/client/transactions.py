"""Read-committed fetches: hide the records of aborted transactions.

A read_committed Fetch (isolation_level 1) returns batches up to the last stable offset
plus, per partition, ``aborted_transactions``: ``(producer_id, first_offset)`` of every
aborted transaction overlapping the returned range. A transaction's batches are the
transactional batches of its producer from ``first_offset`` until its control batch.
Control batch records have a 4-byte key::

    offset  size  field
    0       2     version   0
    2       2     type      0 = ABORT, 1 = COMMIT

:func:`drop_aborted` replaces each aborted batch by an *empty* batch with the same
offsets (61-byte header, recordsCount 0, no compression, CRC recomputed), the form
Kafka's log cleaner leaves behind. Offsets stay contiguous, so a reader's next offset
still moves past the aborted records and decoders need no special case. Every fetch
(either isolation level) also gets the CRC of control batches that were written
without one (stored as 0, as librdkafka's mock cluster does) computed, so the decoder's
CRC check does not refuse a source's transaction markers.
"""

from __future__ import annotations

import struct

from crc32c import crc32c

from pylog.errors import TruncatedBatchError
from pylog.records import decode_batch
from pylog.records.header import (BATCH_HEADER_SIZE, COMPRESSION_MASK, CRC_START, LOG_OVERHEAD,
                                  BatchHeader, read_batch_header)

READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"
ISOLATION_LEVELS = {READ_UNCOMMITTED: 0, READ_COMMITTED: 1}

ABORT_MARKER = 0
_HEADER = struct.Struct(">qiibIhiqqqhii")
_CONTROL_KEY = struct.Struct(">hh")
_CRC = struct.Struct(">I")


def drop_aborted(buf: bytes, aborted: list[dict] | None) -> bytes:
    """``buf`` (back-to-back batches) with the batches of aborted transactions emptied.

    ``aborted`` is the Fetch response's ``aborted_transactions``. Control batches whose
    CRC was never computed (stored as 0, as librdkafka's mock cluster writes them) get
    it computed, so decoders can check every batch. Data batches are not CRC-checked
    here (the decoder does that); a partial trailing batch is kept unchanged. Returns
    ``buf`` itself when nothing changed.
    """
    starts = sorted((a["first_offset"], a["producer_id"]) for a in aborted or ())
    active: set[int] = set()
    replaced: list[tuple[int, int, bytes]] = []
    next_start = pos = 0
    while pos < len(buf):
        try:
            header = read_batch_header(buf, pos)
        except TruncatedBatchError:
            break
        end = pos + header.size
        while next_start < len(starts) and starts[next_start][0] <= header.last_offset:
            active.add(starts[next_start][1])
            next_start += 1
        if header.is_control:
            batch = _with_crc(buf[pos:end]) if header.crc == 0 else None
            if header.producer_id in active and _is_abort_marker(batch or buf[pos:end]):
                active.discard(header.producer_id)
            if batch is not None:
                replaced.append((pos, end, batch))
        elif header.is_transactional and header.producer_id in active:
            replaced.append((pos, end, empty_batch(header)))
        pos = end
    if not replaced:
        return buf
    out, last = bytearray(), 0
    for start, end, batch in replaced:
        out += buf[last:start]
        out += batch
        last = end
    out += buf[last:]
    return bytes(out)


def empty_batch(header: BatchHeader) -> bytes:
    """A batch with ``header``'s offsets, producer and timestamps but no records."""
    batch = _HEADER.pack(
        header.base_offset, BATCH_HEADER_SIZE - LOG_OVERHEAD, header.partition_leader_epoch, header.magic,
        0, header.attributes & ~COMPRESSION_MASK, header.last_offset_delta, header.base_timestamp,
        header.max_timestamp, header.producer_id, header.producer_epoch, header.base_sequence, 0)
    return _with_crc(batch)


def _with_crc(batch: bytes | bytearray) -> bytes:
    batch = bytearray(batch)
    _CRC.pack_into(batch, CRC_START - 4, crc32c(bytes(batch[CRC_START:])))
    return bytes(batch)


def _is_abort_marker(batch: bytes) -> bool:
    records = decode_batch(batch).records
    if not records or records[0].key is None or len(records[0].key) < _CONTROL_KEY.size:
        return False
    _, kind = _CONTROL_KEY.unpack_from(records[0].key)
    return kind == ABORT_MARKER
