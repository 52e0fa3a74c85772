"""Producer state snapshots: ``<offset>.snapshot`` in the partition directory.

A snapshot holds the producer state of every batch below ``offset`` (its name, 20 digits
like the segments). The log writes one when a segment rolls (at the new segment's base
offset) and at a clean close (at the log end). Opening a log loads the newest snapshot
at or below the log end and replays the batch headers after it; a crash therefore costs
at most a scan of headers from the last roll. Truncation drops the snapshots above the
new end and rebuilds the same way. A snapshot that fails its CRC is deleted and the next
older one used (or the log scanned from its start).

Layout, big-endian (version 2)::

    offset  size  field
    0       2     version               2
    2       4     crc                   CRC-32C of bytes [6, end)
    6       4     producerCount
    then producerCount times:
            8     producerId
            2     producerEpoch
            4     coordinatorEpoch      of its last marker, -1 if none
            8     currentTxnFirstOffset its open transaction's first offset, -1 if none
            8     lastTimestamp         of its last batch or marker
            1     batchCount            0..5, oldest first
            then batchCount times:
            4     firstSequence
            4     lastSequence
            8     lastOffset
            4     offsetDelta           lastOffset - firstOffset
            8     timestamp             the batch's max timestamp
    4     unreplicatedCount             completed transactions whose marker was not yet
    then unreplicatedCount times:       below the high watermark (the LSO waits for them)
            8     firstOffset
            8     lastOffset            the marker

Version 1 (no transaction fields, no unreplicated list, 1..5 batches) is still read.

Written as ``<name>.tmp``, fsynced, renamed; the directory is fsynced.
"""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

from crc32c import crc32c

from pylog.log import layout
from pylog.log.checkpoint import fsync_directory
from pylog.log.producer_state import BatchMetadata, ProducerStateEntry, ProducerStateManager

log = logging.getLogger(__name__)

VERSION = 2
_HEADER = struct.Struct(">hIi")
_PRODUCER_V1 = struct.Struct(">qhb")
_PRODUCER = struct.Struct(">qhiqqb")
_BATCH = struct.Struct(">iiqiq")
_COUNT = struct.Struct(">i")
_TXN = struct.Struct(">qq")


class CorruptSnapshotError(ValueError):
    """A snapshot file that cannot be read: short, bad CRC or unknown version."""


def encode_snapshot(state: ProducerStateManager) -> bytes:
    body = bytearray()
    entries = list(state.producers.values())
    for entry in entries:
        body += _PRODUCER.pack(entry.producer_id, entry.epoch, entry.coordinator_epoch,
                               entry.txn_first_offset, entry.last_timestamp, len(entry.batches))
        for b in entry.batches:
            body += _BATCH.pack(b.first_seq, b.last_seq, b.last_offset, b.offset_delta, b.timestamp)
    body += _COUNT.pack(len(state.unreplicated))
    for first, last in state.unreplicated.items():
        body += _TXN.pack(first, last)
    tail = _COUNT.pack(len(entries)) + bytes(body)
    return _HEADER.pack(VERSION, crc32c(tail), len(entries)) + bytes(body)


def decode_snapshot(buf: bytes) -> ProducerStateManager:
    try:
        version, crc, count = _HEADER.unpack_from(buf, 0)
    except struct.error:
        raise CorruptSnapshotError(f"{len(buf)} bytes: too short for a snapshot header") from None
    if version not in (1, VERSION):
        raise CorruptSnapshotError(f"unknown snapshot version {version}")
    if crc32c(buf[6:]) != crc:
        raise CorruptSnapshotError("snapshot CRC mismatch")
    pos, entries, unreplicated = _HEADER.size, [], []
    try:
        for _ in range(count):
            if version == 1:
                producer_id, epoch, batch_count = _PRODUCER_V1.unpack_from(buf, pos)
                coordinator_epoch, txn_first, last_timestamp = -1, -1, -1
                pos += _PRODUCER_V1.size
            else:
                (producer_id, epoch, coordinator_epoch, txn_first, last_timestamp,
                 batch_count) = _PRODUCER.unpack_from(buf, pos)
                pos += _PRODUCER.size
            batches = []
            for _ in range(batch_count):
                batches.append(BatchMetadata(*_BATCH.unpack_from(buf, pos)))
                pos += _BATCH.size
            entries.append(ProducerStateEntry(producer_id, epoch, batches, coordinator_epoch,
                                              txn_first, last_timestamp))
        if version > 1:
            (txn_count,) = _COUNT.unpack_from(buf, pos)
            pos += _COUNT.size
            for _ in range(txn_count):
                unreplicated.append(_TXN.unpack_from(buf, pos))
                pos += _TXN.size
    except struct.error:
        raise CorruptSnapshotError("snapshot ends inside an entry") from None
    if pos != len(buf):
        raise CorruptSnapshotError(f"{len(buf) - pos} bytes after the last entry")
    return ProducerStateManager(entries, unreplicated)


def write_snapshot(directory: Path, state: ProducerStateManager, offset: int) -> Path:
    """Write ``state`` (of the batches below ``offset``) as ``<offset>.snapshot``:
    temp file, fsync, rename, directory fsync."""
    path = layout.snapshot_file(directory, offset)
    temp = path.with_name(path.name + layout.TEMP_SUFFIX)
    with open(temp, "wb") as f:
        f.write(encode_snapshot(state))
        f.flush()
        os.fsync(f.fileno())
    os.replace(temp, path)
    fsync_directory(directory)
    return path


def snapshot_offsets(directory: Path) -> list[int]:
    """Offsets of the snapshots in ``directory``, ascending."""
    found = (layout.parse_snapshot_file(p.name) for p in directory.iterdir())
    return sorted(o for o in found if o is not None)


def delete_snapshots(directory: Path, *, above: int | None = None, below: int | None = None) -> None:
    """Delete snapshots with offsets > ``above`` and those < ``below``."""
    for offset in snapshot_offsets(directory):
        if (above is not None and offset > above) or (below is not None and offset < below):
            layout.snapshot_file(directory, offset).unlink(missing_ok=True)


def load_latest_snapshot(directory: Path, up_to: int) -> tuple[int, ProducerStateManager] | None:
    """``(offset, state)`` of the newest readable snapshot at or below ``up_to``; corrupt
    ones are deleted on the way. None if there is none."""
    for offset in reversed(snapshot_offsets(directory)):
        if offset > up_to:
            continue
        path = layout.snapshot_file(directory, offset)
        try:
            return offset, decode_snapshot(path.read_bytes())
        except (OSError, CorruptSnapshotError) as exc:
            log.warning("%s: deleting unreadable producer snapshot (%s)", path, exc)
            path.unlink(missing_ok=True)
    return None
