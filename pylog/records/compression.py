"""Batch compression codecs (attributes bits 0-2), backed by cramjam.

The whole records section of a batch (everything after the 61-byte header) is
compressed as one stream:

    1 gzip    RFC 1952 gzip member(s)
    2 snappy  either raw snappy, or the xerial framing Java clients write:
                  offset  size  field
                  0       8     magic  82 53 4e 41 50 50 59 00  ("\\x82SNAPPY\\x00")
                  8       4     version (1)
                  12      4     minimum compatible version (1)
                  16      ...   blocks: int32 big-endian length, then a raw snappy block
    3 lz4     LZ4 frame format (magic 04 22 4d 18), independent blocks
    4 zstd    zstd frame

We write snappy in the xerial framing (what the Java client writes; every client reads
it) and read both forms.
"""

from __future__ import annotations

import struct
from enum import IntEnum

import cramjam

from pylog.errors import CompressionError, ConfigError

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_INT32 = struct.Struct(">i")


class CompressionNameError(ConfigError, ValueError):
    """An unknown compression codec name (both a ConfigError and a ValueError)."""


class Compression(IntEnum):
    """Codec ids as stored in the low three bits of a batch's attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def parse(cls, name: "str | Compression") -> "Compression":
        """Return the codec for a name such as ``"zstd"`` (case-insensitive).

        Raises CompressionNameError (a ConfigError and ValueError) for unknown names.
        """
        if isinstance(name, Compression):
            return name
        try:
            return cls[str(name).strip().upper()]
        except KeyError:
            raise CompressionNameError(
                "compression.type",
                f"unknown codec {name!r}; expected one of none, gzip, snappy, lz4, zstd") from None


# Kafka's levels (KIP-390): the range of each codec's ``compression.<codec>.level`` and
# the level used when none is set. gzip also takes -1, zlib's default (6).
GZIP_LEVELS, GZIP_DEFAULT_LEVEL = range(1, 10), -1
LZ4_LEVELS, LZ4_DEFAULT_LEVEL = range(1, 18), 9
ZSTD_LEVELS, ZSTD_DEFAULT_LEVEL = range(-131072, 23), 3


def compress(codec: int, payload: bytes, level: int | None = None) -> bytes:
    """Compress a records section with ``codec``; NONE returns the payload unchanged.

    ``level`` is the codec's compression level (gzip 1-9, lz4 1-17, zstd -131072-22;
    snappy has none); None or gzip's -1 take the codec's default."""
    if codec == Compression.NONE:
        return payload
    if codec == Compression.GZIP:
        return bytes(cramjam.gzip.compress(payload, level=None if level == -1 else level))
    if codec == Compression.SNAPPY:
        return _xerial_snappy_compress(payload)
    if codec == Compression.LZ4:
        compressor = cramjam.lz4.Compressor(level=level, content_checksum=False,
                                            block_linked=False)
        compressor.compress(payload)
        return bytes(compressor.finish())
    if codec == Compression.ZSTD:
        return bytes(cramjam.zstd.compress(
            payload, level=ZSTD_DEFAULT_LEVEL if level is None else level))
    raise CompressionError(f"unknown compression codec id {codec}")


def decompress(codec: int, payload: bytes | memoryview) -> bytes:
    """Decompress a records section; raises CompressionError on any failure."""
    if codec == Compression.NONE:
        return bytes(payload)
    try:
        if codec == Compression.GZIP:
            return bytes(cramjam.gzip.decompress(payload))
        if codec == Compression.SNAPPY:
            return _snappy_decompress(bytes(payload))
        if codec == Compression.LZ4:
            return bytes(cramjam.lz4.decompress(payload))
        if codec == Compression.ZSTD:
            return bytes(cramjam.zstd.decompress(payload))
    except CompressionError:
        raise
    except Exception as exc:  # cramjam raises its own DecompressionError and ValueError
        name = Compression(codec).name.lower()
        raise CompressionError(f"cannot decompress {name} records: {exc}") from None
    raise CompressionError(f"unknown compression codec id {codec}")


def _xerial_snappy_compress(payload: bytes) -> bytes:
    parts = [_XERIAL_HEADER]
    view = memoryview(payload)
    for start in range(0, len(payload), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start:start + _XERIAL_BLOCK]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(payload: bytes) -> bytes:
    if not payload.startswith(XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(payload))
    pos = len(_XERIAL_HEADER)
    if len(payload) < pos:
        raise CompressionError("snappy: truncated xerial header")
    out = []
    end = len(payload)
    view = memoryview(payload)
    while pos < end:
        if end - pos < 4:
            raise CompressionError("snappy: truncated xerial block length")
        (length,) = _INT32.unpack_from(payload, pos)
        pos += 4
        if length < 0 or pos + length > end:
            raise CompressionError(f"snappy: xerial block of {length} bytes overruns the payload")
        out.append(bytes(cramjam.snappy.decompress_raw(view[pos:pos + length])))
        pos += length
    return b"".join(out)
