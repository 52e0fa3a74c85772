"""Kafka record batch v2 codec: pure functions over bytes (no I/O, clocks or logging).

* :mod:`header` -- the 61-byte batch header, CRC, iterating batches without decoding.
* :mod:`record` -- one record's varint layout; the column-wise decode loop.
* :mod:`batch` -- build and decode whole batches.
* :mod:`columns` -- decode back-to-back batches into parallel lists.
* :mod:`compression` -- gzip, snappy, lz4 and zstd via cramjam.
"""

from pylog.records.batch import (
    BatchBuilder,
    DecodedBatch,
    build_batch,
    decode_batch,
    iter_batches,
    iter_records,
)
from pylog.records.columns import RecordColumns, decode_columns
from pylog.records.compression import Compression, CompressionNameError
from pylog.records.header import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    BatchHeader,
    check_crc,
    compute_crc,
    iter_batch_headers,
    read_batch_header,
    set_base_offset,
)
from pylog.records.record import Record, RecordInput

__all__ = [
    "BATCH_HEADER_SIZE", "LOG_OVERHEAD", "MAGIC", "BatchHeader", "check_crc", "compute_crc",
    "iter_batch_headers", "read_batch_header", "set_base_offset",
    "BatchBuilder", "DecodedBatch", "build_batch", "decode_batch", "iter_batches", "iter_records",
    "RecordColumns", "decode_columns", "Compression", "CompressionNameError",
    "Record", "RecordInput",
]
