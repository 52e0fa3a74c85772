"""Decode back-to-back batches into parallel columns (the loader's hot path).

Instead of one object per record, :func:`decode_columns` returns one column per field:
``offsets[i]``, ``timestamps[i]``, ``keys[i]``, ``values[i]`` and ``headers[i]`` describe
record ``i``. Each batch is CRC-checked and decompressed once.

Two decoders fill the columns, and agree exactly (the tests run both):

* ``vectorised`` (the default): numpy over all the records of the buffer at once (see
  :mod:`pylog.records.vectorised`). The columns read like lists, and also hand over
  numpy/Arrow arrays (``IntColumn.to_numpy``, ``BinaryColumn.to_arrow``).
* ``reference``: one tight Python loop per batch (see :mod:`pylog.records.record`),
  filling plain lists. It decodes whatever the vectorised decoder declines (malformed
  batches, so that errors are the reference's), and is chosen with ``decoder=`` or the
  ``PYLOG_RECORDS_DECODER`` environment variable.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from itertools import compress
from typing import Sequence

import numpy as np

from pylog.errors import CorruptRecordError
from pylog.records.batch import decode_section_into, iter_batches, records_section
from pylog.records.compression import Compression
from pylog.records.header import BATCH_HEADER_SIZE, TIMESTAMP_TYPE_BIT
from pylog.records.record import Headers
from pylog.records.vectorised import (
    BinaryColumn,
    DecodedSections,
    IntColumn,
    PADDING,
    Unsupported,
    native_walk,
    record_starts,
)

DECODER_ENV = "PYLOG_RECORDS_DECODER"
DECODERS = ("vectorised", "reference")


@dataclass(frozen=True, slots=True)
class RecordColumns:
    """Records of a buffer of batches as parallel columns (lists, or list-like columns).

    ``bytes_consumed`` is the length of the complete batches read (a partial trailing
    batch is left out); ``next_offset`` is the offset after the last complete batch
    (control batches included), or None when no batch was complete.
    """

    offsets: Sequence[int] = field(default_factory=list)
    timestamps: Sequence[int] = field(default_factory=list)
    keys: Sequence[bytes | None] = field(default_factory=list)
    values: Sequence[bytes | None] = field(default_factory=list)
    headers: Sequence[Headers] = field(default_factory=list)
    bytes_consumed: int = 0
    next_offset: int | None = None
    batch_count: int = 0

    def __len__(self) -> int:
        return len(self.offsets)


def decode_columns(buf: bytes | bytearray | memoryview, *, skip_control: bool = True,
                   start_offset: int | None = None, decoder: str | None = None) -> RecordColumns:
    """Decode every complete batch in ``buf`` into columns.

    Records below ``start_offset`` (a fetch may return a batch that starts before the
    requested offset) are dropped. A partial trailing batch is ignored; a corrupt
    complete batch raises a CorruptRecordError subclass. ``decoder`` is ``"vectorised"``
    or ``"reference"``; by default ``$PYLOG_RECORDS_DECODER``, else vectorised.
    """
    choice = decoder or os.environ.get(DECODER_ENV) or "vectorised"
    if choice not in DECODERS:
        raise ValueError(f"unknown records decoder {choice!r}; expected one of {', '.join(DECODERS)}")
    if choice == "vectorised":
        try:
            return _decode_vectorised(buf, skip_control, start_offset)
        except (Unsupported, CorruptRecordError):
            pass  # the reference decodes it, or raises its own error
    return _decode_reference(buf, skip_control, start_offset)


class _BatchWalk:
    """The complete batches of ``buf`` to decode, as (position, header), control batches
    left out if asked; afterwards, where the walk ended: bytes consumed, the next offset
    and how many batches were handed out (both decoders report these)."""

    def __init__(self, buf: bytes | bytearray | memoryview, skip_control: bool) -> None:
        self._buf = buf
        self._skip_control = skip_control
        self.consumed, self.next_offset, self.batches = 0, None, 0

    def __iter__(self):
        for pos, header in iter_batches(self._buf, skip_control=False):
            self.consumed = pos + header.size
            self.next_offset = header.next_offset
            if self._skip_control and header.is_control:
                continue
            self.batches += 1
            yield pos, header


def _decode_reference(buf: bytes | bytearray | memoryview, skip_control: bool,
                      start_offset: int | None) -> RecordColumns:
    offsets: list[int] = []
    timestamps: list[int] = []
    keys: list = []
    values: list = []
    headers: list = []
    walk = _BatchWalk(buf, skip_control)
    for pos, header in walk:
        first = len(offsets)
        decode_section_into(buf, pos, header, offsets, timestamps, keys, values, headers)
        if start_offset is not None and header.base_offset < start_offset:
            _drop_below(start_offset, first, offsets, timestamps, keys, values, headers)
    return RecordColumns(offsets, timestamps, keys, values, headers, walk.consumed,
                         walk.next_offset, walk.batches)


def _drop_below(start_offset: int, first: int, *columns: list) -> None:
    offsets = columns[0]
    cut = first
    while cut < len(offsets) and offsets[cut] < start_offset:
        cut += 1
    if cut > first:
        for column in columns:
            del column[first:cut]


def _decode_vectorised(buf: bytes | bytearray | memoryview, skip_control: bool,
                       start_offset: int | None) -> RecordColumns:
    sections: list[bytes | memoryview] = []
    positions: list[int] = []
    counts: list[int] = []
    base_offsets: list[int] = []
    base_timestamps: list[int] = []
    append_times: list[int | None] = []  # a LogAppendTime batch's time (None: CreateTime)
    section_ends: list[int] = []
    total = 0
    walk = _BatchWalk(buf, skip_control)
    for pos, header in walk:
        count = header.records_count
        if header.compression == Compression.NONE:  # no copy until the join below
            section = memoryview(buf)[pos + BATCH_HEADER_SIZE:pos + header.size]
        else:
            section = records_section(buf, pos, header)
        if count <= 0:
            if count < 0 or len(section):
                raise Unsupported  # the reference raises
            continue
        positions.append(total)
        sections.append(section)
        counts.append(count)
        base_offsets.append(header.base_offset)
        base_timestamps.append(header.base_timestamp)
        append_times.append(header.max_timestamp if header.attributes & TIMESTAMP_TYPE_BIT
                            else None)
        total += len(section)
        section_ends.append(total)
    sections.append(PADDING)
    buffer = b"".join(sections)
    native = native_walk()
    walks = [record_starts(buffer, count, position, native) for position, count in zip(positions, counts)]
    starts = np.concatenate(walks) if walks else np.empty(0, np.int64)
    decoded = DecodedSections(
        buffer, total, starts, np.repeat(np.array(base_offsets, np.int64), counts),
        np.repeat(np.array(base_timestamps, np.int64), counts),
        np.repeat(np.array(section_ends, np.int64), counts))
    if any(at is not None for at in append_times):
        # LogAppendTime: every record of such a batch has the time the broker appended it.
        stamped = np.repeat(np.array([at is not None for at in append_times]), counts)
        times = np.repeat(np.array([at or 0 for at in append_times], np.int64), counts)
        decoded.timestamps = np.where(stamped, times, decoded.timestamps)
    fields = [decoded.offsets, decoded.timestamps, decoded.key_starts, decoded.key_lengths,
              decoded.value_starts, decoded.value_lengths]
    headers = decoded.headers
    if start_offset is not None:
        keep = _kept(decoded.offsets, counts, base_offsets, start_offset)
        if keep is not None:
            fields = [column[keep] for column in fields]
            headers = list(compress(headers, keep.tolist()))
    offsets, timestamps, key_starts, key_lengths, value_starts, value_lengths = fields
    return RecordColumns(IntColumn(offsets), IntColumn(timestamps),
                         BinaryColumn(buffer, key_starts, key_lengths),
                         BinaryColumn(buffer, value_starts, value_lengths),
                         headers, walk.consumed, walk.next_offset, walk.batches)


def _kept(offsets: np.ndarray, counts: list[int], base_offsets: list[int],
          start_offset: int) -> np.ndarray | None:
    """Which records survive dropping, in each batch starting below ``start_offset``, its
    leading records below it (as the reference does); None when all do."""
    keep = None
    first = 0
    for count, base_offset in zip(counts, base_offsets):
        if base_offset < start_offset:
            at_or_above = offsets[first:first + count] >= start_offset
            cut = int(at_or_above.argmax()) if at_or_above.any() else count
            if cut:
                if keep is None:
                    keep = np.ones(len(offsets), np.bool_)
                keep[first:first + cut] = False
        first += count
    return keep
