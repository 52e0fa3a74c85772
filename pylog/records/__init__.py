"""Kafka record batch v2 codec: pure functions over bytes (no I/O, clocks or logging)."""

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

__all__ = [
    "BATCH_HEADER_SIZE", "LOG_OVERHEAD", "MAGIC", "BatchHeader", "check_crc", "compute_crc",
    "iter_batch_headers", "read_batch_header", "set_base_offset",
]
