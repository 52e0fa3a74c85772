"""Record batches for the log tests, built by kafka-python's record builder (a client
library we did not write), so the log is exercised with real producer bytes."""

from __future__ import annotations

from kafka.record.default_records import DefaultRecordBatchBuilder

from pylog.records.header import read_batch_header


def make_batch(count: int = 1, *, value_size: int = 20, timestamp_ms: int = 1_700_000_000_000,
               compression: int = 0, tag: int = 0) -> bytes:
    """A v2 batch of ``count`` records with ``value_size``-byte values, all at ``timestamp_ms``.

    ``tag`` goes into every value so batches with the same shape still differ.
    """
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=compression, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 30)
    for i in range(count):
        value = f"{tag}:{i}:".encode().ljust(value_size, b"x")
        builder.append(i, timestamp=timestamp_ms, key=f"k{i}".encode(), value=value, headers=[])
    return bytes(builder.build())


def batch_count(batch: bytes) -> int:
    return read_batch_header(batch).last_offset_delta + 1
