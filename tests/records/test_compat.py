"""Compatibility with batches written and read by kafka-python's own record code."""

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from pylog.records import Compression, build_batch, decode_batch, decode_columns, iter_records

RECORDS = [
    (b"user-1", b'{"event": "click"}' * 20, (("source", b"web"), ("nullable", None)), 1_700_000_000_000),
    (None, b"keyless", (), 1_700_000_000_010),
    (b"tombstone", None, (), 1_700_000_000_005),
    (b"k" * 200, bytes(range(256)) * 10, (), 1_700_000_000_020),
]


def _kafka_python_batch(codec: int, base_offset: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=int(codec), is_transactional=False,
        producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for offset, (key, value, headers, timestamp) in enumerate(RECORDS):
        builder.append(offset, timestamp=timestamp, key=key, value=value, headers=list(headers))
    batch = bytearray(builder.build())
    batch[0:8] = base_offset.to_bytes(8, "big")  # as a broker assigns it; not under the CRC
    return bytes(batch)


@pytest.mark.parametrize("codec", list(Compression))
def test_pylog_decodes_kafka_python_batches(codec):
    batch = _kafka_python_batch(codec, base_offset=100)
    decoded = decode_batch(batch)
    assert decoded.header.compression == codec
    assert [(r.offset, r.key, r.value, r.timestamp, r.headers) for r in decoded.records] == [
        (100 + i, k, v, ts, tuple(h)) for i, (k, v, h, ts) in enumerate(RECORDS)]


@pytest.mark.parametrize("codec", list(Compression))
def test_kafka_python_decodes_pylog_batches(codec):
    batch = build_batch(RECORDS, base_offset=7, compression=codec)
    kafka_batch = DefaultRecordBatch(bytearray(batch))
    assert kafka_batch.validate_crc()
    assert kafka_batch.compression_type == codec
    got = [(r.offset, r.key, r.value, r.timestamp, [tuple(h) for h in r.headers]) for r in kafka_batch]
    assert got == [(7 + i, k, v, ts, list(h)) for i, (k, v, h, ts) in enumerate(RECORDS)]


@pytest.mark.parametrize("codec", list(Compression))
def test_memory_records_buffers_of_several_batches(codec):
    # MemoryRecordsBuilder writes the buffer a broker would return to a fetch.
    buffers = []
    offset = 0
    for batch_no in range(3):
        builder = MemoryRecordsBuilder(magic=2, compression_type=int(codec), batch_size=1 << 20,
                                       offset=offset)
        for i in range(5):
            builder.append(timestamp=1000 + i, key=None, value=f"{batch_no}-{i}".encode(), headers=[])
            offset += 1
        builder.close()
        buffers.append(bytes(builder.buffer()))
    buf = b"".join(buffers)
    expected = [f"{b}-{i}".encode() for b in range(3) for i in range(5)]
    assert [r.value for r in iter_records(buf)] == expected
    assert decode_columns(buf).offsets == list(range(15))
    # and kafka-python reads the buffer pylog writes
    ours = b"".join(build_batch([(None, v, (), 1)], base_offset=n) for n, v in enumerate(expected))
    records = MemoryRecords(ours)
    read_back = []
    while records.has_next():
        read_back.extend(r.value for r in records.next_batch())
    assert read_back == expected
