"""The records section of a batch being built, encoded as each record is appended.

The producer appends every record it sends to the open batch of its partition, so this
is its hot path: the C extension's ``RecordsBuffer`` (``pylog/records/_speedups.c``)
encodes a record in one call into a growing buffer. :class:`PyRecordsBuffer` is its
pure-Python twin (same bytes, same answers), used without a C compiler or with
``PYLOG_RECORDS_SPEEDUPS=0``. The record layout is in :mod:`pylog.records.record`.

>>> records = RecordsBuffer()
>>> records.append(None, b"hello", 1_700_000_000_000)
12
>>> records.append(b"k", b"x" * 100, 1_700_000_000_001, (), 50)  # past 50 bytes: not taken
-1
>>> len(records), records.getvalue()
(1, b'\\x16\\x00\\x00\\x00\\x01\\nhello\\x00')

``append(key, value, timestamp, headers=(), limit=-1)`` (positional arguments) returns the size of the records
section so far, or -1 without appending when the buffer already holds a record and this
one would take it past ``limit`` bytes (a first record is always taken). Keys and values
are bytes (or another buffer) or None; headers are ``(str, bytes | None)`` tuples.
"""

from __future__ import annotations

import operator
import os
from typing import Sequence

from pylog.records.record import Header, encode_record

try:
    from pylog.records._speedups import RecordsBuffer as NativeRecordsBuffer
except ImportError:  # built without a C compiler
    NativeRecordsBuffer = None


class PyRecordsBuffer:
    """The pure-Python ``RecordsBuffer``: one :func:`encode_record` per append."""

    __slots__ = ("_parts", "size", "_timestamps", "base_timestamp", "max_timestamp")

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self._timestamps: list[int] = []
        self.size = 0
        self.base_timestamp = -1
        self.max_timestamp = -1

    @property
    def count(self) -> int:
        return len(self._parts)

    def __len__(self) -> int:
        return len(self._parts)

    def append(self, key: bytes | None, value: bytes | None, timestamp: int,
               headers: Sequence[Header] | None = (), limit: int = -1) -> int:
        timestamp = operator.index(timestamp)
        count = len(self._parts)
        base = self.base_timestamp if count else timestamp
        for name, field in (("key", key), ("value", value)):
            if field is not None and not isinstance(field, (bytes, bytearray, memoryview)):
                raise TypeError(f"{name} must be bytes or None, not {type(field).__name__}")
        for header in headers or ():
            if not (isinstance(header, tuple) and len(header) == 2 and isinstance(header[0], str)
                    and (header[1] is None or isinstance(header[1], (bytes, bytearray, memoryview)))):
                raise TypeError("a header must be a (str, bytes | None) tuple")
        encoded = encode_record(count, timestamp - base, key, value, headers or ())
        if count and limit >= 0 and self.size + len(encoded) > limit:
            return -1
        self._parts.append(encoded)
        self._timestamps.append(timestamp)
        self.size += len(encoded)
        self.base_timestamp = base
        if timestamp > self.max_timestamp:  # as Java: no timestamp below -1
            self.max_timestamp = timestamp
        return self.size

    def getvalue(self) -> bytes:
        return b"".join(self._parts)

    def timestamps(self) -> list[int]:
        return list(self._timestamps)


def native_encoder() -> bool:
    """Whether new buffers encode in C: the extension is built and
    ``$PYLOG_RECORDS_SPEEDUPS`` is not ``0``."""
    return NativeRecordsBuffer is not None and os.environ.get("PYLOG_RECORDS_SPEEDUPS", "1") != "0"


RecordsBuffer = NativeRecordsBuffer if native_encoder() else PyRecordsBuffer
