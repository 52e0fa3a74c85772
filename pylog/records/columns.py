"""Decode back-to-back batches into parallel columns (the loader's hot path).

Instead of one object per record, :func:`decode_columns` appends each field to a list:
``offsets[i]``, ``timestamps[i]``, ``keys[i]``, ``values[i]`` and ``headers[i]`` describe
record ``i``. Each batch is CRC-checked and decompressed once, then its records are
decoded in one tight loop (see :mod:`pylog.records.record`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pylog.records.batch import decode_section_into, iter_batches
from pylog.records.record import Headers


@dataclass(frozen=True, slots=True)
class RecordColumns:
    """Records of a buffer of batches as parallel lists.

    ``bytes_consumed`` is the length of the complete batches read (a partial trailing
    batch is left out); ``next_offset`` is the offset after the last complete batch
    (control batches included), or None when no batch was complete.
    """

    offsets: list[int] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    headers: list[Headers] = field(default_factory=list)
    bytes_consumed: int = 0
    next_offset: int | None = None
    batch_count: int = 0

    def __len__(self) -> int:
        return len(self.offsets)


def decode_columns(buf: bytes | bytearray | memoryview, *, skip_control: bool = True,
                   start_offset: int | None = None) -> RecordColumns:
    """Decode every complete batch in ``buf`` into columns.

    Records below ``start_offset`` (a fetch may return a batch that starts before the
    requested offset) are dropped. A partial trailing batch is ignored; a corrupt
    complete batch raises a CorruptRecordError subclass.
    """
    offsets: list[int] = []
    timestamps: list[int] = []
    keys: list = []
    values: list = []
    headers: list = []
    consumed = 0
    next_offset = None
    batches = 0
    for pos, header in iter_batches(buf, skip_control=False):
        consumed = pos + header.size
        next_offset = header.next_offset
        if skip_control and header.is_control:
            continue
        batches += 1
        first = len(offsets)
        decode_section_into(buf, pos, header, offsets, timestamps, keys, values, headers)
        if start_offset is not None and header.base_offset < start_offset:
            _drop_below(start_offset, first, offsets, timestamps, keys, values, headers)
    return RecordColumns(offsets, timestamps, keys, values, headers, consumed, next_offset, batches)


def _drop_below(start_offset: int, first: int, *columns: list) -> None:
    offsets = columns[0]
    cut = first
    while cut < len(offsets) and offsets[cut] < start_offset:
        cut += 1
    if cut > first:
        for column in columns:
            del column[first:cut]
