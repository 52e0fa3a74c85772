"""Vectorised decode of records sections: numpy over the varints, no per-field Python loop.

The record layout is the one in :mod:`pylog.records.record`. The records sections of all
the batches of a fetch are decompressed and put end to end in one buffer, then:

1. The record starts are found by walking the length prefixes only (each start depends
   on the length before it, so this walk is the one sequential part): in a small C
   extension (``pylog/records/_speedups.c``, built by ``pip install``), or, without it
   or with ``PYLOG_RECORDS_SPEEDUPS=0``, one short Python step per record.
2. Every other field is decoded for all records at once -- by the C extension's
   ``record_fields`` when it is there (one pass, the same checks), else with numpy: a varint at known positions is
   a gather of a few bytes per record, its size is the first byte with the high bit
   clear, and its value is the zigzag of the 7-bit groups. Each field's position is the
   previous one plus its size (and the key/value length), computed column-wise.
3. Keys and values stay as ``(start, length)`` pairs into the buffer: a
   :class:`BinaryColumn` turns them into an Arrow binary array (one gather, no Python
   object per record) or into newline-delimited JSON input, and only makes ``bytes``
   objects when it is indexed or iterated like the list the reference decoder returns.

Record headers are rare; records that have them are decoded by the reference code,
one record at a time. Anything unusual (a malformed record, a varint of 10 bytes, an
offset that overflows int64) raises :class:`Unsupported`, and the caller decodes the
buffer again with the reference decoder, which has the final word on errors.
"""

from __future__ import annotations

import os
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa

from pylog.errors import RecordDecodeError
from pylog.records.record import _MIN_RECORD_BODY, Headers, _decode_headers, read_varint

try:
    from pylog.records import _speedups
except ImportError:  # built without a C compiler: the pure-Python walk
    _speedups = None

SPEEDUPS_ENV = "PYLOG_RECORDS_SPEEDUPS"

PADDING = bytes(16)  # after the sections: a varint window of 10 bytes stays in the buffer
_SHIFTS = (np.arange(10, dtype=np.uint64) * np.uint64(7))
_ARANGE = np.arange(10, dtype=np.int64)
_SPACE = 0x20
_NEWLINE = 0x0A


class Unsupported(Exception):
    """The buffer needs the reference decoder (malformed, or outside the fast path)."""


def native_walk() -> bool:
    """Whether :func:`record_starts` walks in C: the extension is built and
    ``$PYLOG_RECORDS_SPEEDUPS`` is not ``0`` (the tests run both walks)."""
    return _speedups is not None and os.environ.get(SPEEDUPS_ENV, "1") != "0"


def record_starts(buffer: bytes, count: int, pos: int, native: bool | None = None) -> np.ndarray:
    """The positions (int64) of ``count`` records in ``buffer``, the first one at ``pos``.

    Only the length prefixes are read; the lengths are checked afterwards, column-wise
    (a walk that runs past its section or the buffer shows up there, or as Unsupported).
    Each start depends on the length before it, so this is a walk: in C when the
    extension is there (``native``), else one short Python step per record.
    """
    if native if native is not None else native_walk():
        try:
            return np.frombuffer(_speedups.record_starts(buffer, count, pos), np.int64)
        except ValueError:
            raise Unsupported from None
    starts: list[int] = []
    append = starts.append
    section = buffer
    try:
        for _ in range(count):
            append(pos)
            b = section[pos]
            if b < 128:
                pos += 1 + (b >> 1)
            else:
                b2 = section[pos + 1]
                if b2 < 128:
                    pos += 2 + (((b & 0x7F) | (b2 << 7)) >> 1)
                else:
                    length, pos = read_varint(section, pos)
                    if length < 0:
                        raise Unsupported
                    pos += length
    except (IndexError, RecordDecodeError):
        raise Unsupported from None
    return np.array(starts, np.int64)


def _varints(padded: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zigzag varints starting at ``positions``: ``(int64 values, sizes in bytes)``.

    One- and two-byte varints (values -8192..8191: lengths, deltas) take two gathers;
    the rest go through a window of up to 10 bytes each.
    """
    first = padded[positions].astype(np.uint64)
    raw = first.copy()
    size = np.ones(len(positions), np.int64)
    longer = np.flatnonzero(first >= 0x80)
    if len(longer):
        second = padded[positions[longer] + 1].astype(np.uint64)
        raw[longer] = (first[longer] & np.uint64(0x7F)) | (second << np.uint64(7))
        size[longer] = 2
        longest = longer[second >= 0x80]
        if len(longest):
            raw[longest], size[longest] = _long_varints(padded, positions[longest])
    values = (raw >> np.uint64(1)) ^ (np.uint64(0) - (raw & np.uint64(1)))
    return values.view(np.int64), size


def _long_varints(padded: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    window = padded[positions[:, None] + _ARANGE]
    last = window < 0x80
    if not last.any(axis=1).all():
        raise Unsupported  # longer than 10 bytes: the reference raises
    size = last.argmax(axis=1)
    if (window[size == 9, 9] > 1).any():
        raise Unsupported  # beyond 64 bits: the reference makes a big int
    groups = (window & 0x7F).astype(np.uint64)
    groups[_ARANGE > size[:, None]] = 0
    return (groups << _SHIFTS).sum(axis=1, dtype=np.uint64), size + 1


def _inside(pos: np.ndarray, record_end: np.ndarray) -> np.ndarray:
    if (pos >= record_end).any():
        raise Unsupported  # the record is malformed: the reference finds out how
    return pos


def _add_checked(base: np.ndarray, delta: np.ndarray) -> np.ndarray:
    total = base + delta
    if (((base ^ total) & (delta ^ total)) < 0).any():
        raise Unsupported  # int64 overflow: the reference makes a big int
    return total


class DecodedSections:
    """The fields of every record of a run of records sections, as numpy arrays."""

    def __init__(self, buffer: bytes, sections_size: int, starts: np.ndarray, record_base_offsets: np.ndarray,
                 record_base_timestamps: np.ndarray, section_ends: np.ndarray) -> None:
        """``buffer`` is the sections end to end (``sections_size`` bytes), then :data:`PADDING`."""
        self.buffer = buffer
        padded = np.frombuffer(buffer, np.uint8)
        start = np.ascontiguousarray(starts, np.int64)
        if native_walk():
            try:
                columns = np.frombuffer(_speedups.record_fields(
                    buffer, start, np.ascontiguousarray(section_ends, np.int64), sections_size),
                    np.int64).reshape(8, len(start))
            except ValueError:
                raise Unsupported from None
            ts_delta, offset_delta, self.key_starts, self.key_lengths, \
                self.value_starts, self.value_lengths, pos, record_end = columns
            self.timestamps = _add_checked(record_base_timestamps, ts_delta)
            self.offsets = _add_checked(record_base_offsets, offset_delta)
            self.headers = self._headers(padded, pos, record_end)
            return
        length, size = _varints(padded, start)
        body = start + size
        record_end = body + length
        next_start = np.empty_like(start)
        next_start[:-1] = start[1:]
        if len(start):
            next_start[-1] = sections_size
        # A section's last record ends where the next section starts.
        if (length < _MIN_RECORD_BODY).any() or (record_end != next_start).any() \
                or (record_end > section_ends).any():
            raise Unsupported
        # Every field must start inside its record (the reference reads no further either),
        # which also keeps each varint window inside the padded buffer.
        ts_delta, size = _varints(padded, body + 1)
        pos = _inside(body + 1 + size, record_end)
        offset_delta, size = _varints(padded, pos)
        pos = _inside(pos + size, record_end)
        self.timestamps = _add_checked(record_base_timestamps, ts_delta)
        self.offsets = _add_checked(record_base_offsets, offset_delta)
        self.key_starts, self.key_lengths, pos = self._bytes_field(padded, pos, record_end)
        self.value_starts, self.value_lengths, pos = self._bytes_field(padded, pos, record_end)
        self.headers = self._headers(padded, pos, record_end)

    @staticmethod
    def _bytes_field(padded: np.ndarray, pos: np.ndarray,
                     record_end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        length, size = _varints(padded, pos)
        if (length < -1).any():
            raise Unsupported
        start = _inside(pos + size, record_end)
        return start, length, _inside(start + np.maximum(length, 0), record_end)

    def _headers(self, padded: np.ndarray, pos: np.ndarray, record_end: np.ndarray) -> list[Headers]:
        headers: list[Headers] = [()] * len(pos)
        if not len(pos):
            return headers
        if ((pos >= record_end)).any():
            raise Unsupported
        with_headers = np.flatnonzero(padded[pos] != 0)
        if ((pos + 1 != record_end) & (padded[pos] == 0)).any():
            raise Unsupported
        for i in with_headers.tolist():
            try:
                count, at = read_varint(self.buffer, int(pos[i]))
                end = int(record_end[i])
                headers[i], at = _decode_headers(self.buffer, at, count, end)
            except (IndexError, RecordDecodeError):
                raise Unsupported from None
            if at != end:
                raise Unsupported
        return headers


class IntColumn(Sequence[int]):
    """An int64 column that reads like a list of ints (``to_numpy()`` for the array)."""

    __slots__ = ("_array",)

    def __init__(self, array: np.ndarray) -> None:
        self._array = array

    def to_numpy(self) -> np.ndarray:
        return self._array

    def __len__(self) -> int:
        return len(self._array)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return IntColumn(self._array[index])
        return int(self._array[index])

    def __iter__(self) -> Iterator[int]:
        return iter(self._array.tolist())

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    def __repr__(self) -> str:
        return f"IntColumn({self._array.tolist()!r})"


class BinaryColumn(Sequence["bytes | None"]):
    """Keys or values as ``(start, length)`` into a buffer; length -1 is null.

    Reads like a list of ``bytes | None``; :meth:`to_arrow` and :meth:`json_lines` build
    bulk inputs without a Python object per record.
    """

    __slots__ = ("_buffer", "_starts", "_lengths")

    def __init__(self, buffer: bytes, starts: np.ndarray, lengths: np.ndarray) -> None:
        self._buffer = buffer
        self._starts = starts
        self._lengths = lengths

    def __len__(self) -> int:
        return len(self._starts)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return BinaryColumn(self._buffer, self._starts[index], self._lengths[index])
        start, length = int(self._starts[index]), int(self._lengths[index])
        return None if length < 0 else self._buffer[start:start + length]

    def __iter__(self) -> Iterator["bytes | None"]:
        buf = self._buffer
        return iter([None if n < 0 else buf[s:s + n]
                     for s, n in zip(self._starts.tolist(), self._lengths.tolist())])

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    def __repr__(self) -> str:
        return f"BinaryColumn({list(self)!r})"

    @property
    def null_count(self) -> int:
        return int(np.count_nonzero(self._lengths < 0))

    def all_non_empty(self) -> bool:
        """True when no entry is null or empty (``all(column)`` without the objects)."""
        return not len(self._lengths) or int(self._lengths.min()) > 0

    def to_arrow(self) -> pa.Array:
        """A ``pa.binary()`` array: one gather of the bytes, nulls as validity bits."""
        count = len(self._starts)
        lengths = np.maximum(self._lengths, 0)
        offsets = np.zeros(count + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if offsets[-1] >= 2**31:
            return pa.array(list(self), pa.binary())
        data = _gather(np.frombuffer(self._buffer, np.uint8), self._starts, lengths, offsets)
        validity = None
        nulls = self.null_count
        if nulls:
            validity = pa.py_buffer(np.packbits(self._lengths >= 0, bitorder="little"))
        return pa.Array.from_buffers(pa.binary(), count, [
            validity, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)], null_count=nulls)

    def json_lines(self) -> tuple[np.ndarray, int] | None:
        """The entries as newline-delimited input (uint8 array), and the longest line.

        Each entry ends with a newline and the bytes between entries become spaces (JSON
        whitespace), so this is one copy and a fill of the small gaps, not a join. None
        when an entry is null, or holds a newline or carriage return (the caller joins).
        """
        if not len(self._starts) or self.null_count:
            return None
        starts, ends = self._starts, self._starts + self._lengths
        if (starts[1:] <= ends[:-1]).any():
            return None
        first, last = int(starts[0]), int(ends[-1])
        copied = bytearray(memoryview(self._buffer)[first:last + 1])  # the one copy
        region = np.frombuffer(copied, np.uint8)
        local_starts, local_ends = starts - first, ends - first
        gap_starts = local_ends[:-1] + 1
        _fill(region, gap_starts, local_starts[1:] - gap_starts, _SPACE)
        if copied.find(b"\n") >= 0 or copied.find(b"\r") >= 0:  # memchr, not a numpy pass
            return None
        region[local_ends] = _NEWLINE
        line_lengths = np.diff(local_ends, prepend=-1)
        return region, int(line_lengths.max())


def _ranges(starts: np.ndarray, lengths: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The indexes of the concatenated ranges ``[start, start + length)``."""
    keep = lengths > 0
    starts, lengths, begin = starts[keep], lengths[keep], offsets[:-1][keep]
    return np.repeat(starts - begin, lengths) + np.arange(int(offsets[-1]), dtype=np.int64)


def _gather(source: np.ndarray, starts: np.ndarray, lengths: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    if not int(offsets[-1]):
        return np.zeros(0, np.uint8)
    return source[_ranges(starts, lengths, offsets)]


def _fill(target: np.ndarray, starts: np.ndarray, lengths: np.ndarray, byte: int) -> None:
    lengths = np.maximum(lengths, 0)
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if int(offsets[-1]):
        target[_ranges(starts, lengths, offsets)] = byte
