"""LogAppendTime batches (``message.timestamp.type=LogAppendTime``): the broker stamps a
batch by setting its timestampType bit and maxTimestamp, and every decoder then reports
that time for each of its records, as Kafka's clients do, whatever the records' deltas."""

from __future__ import annotations

import pytest

from pylog.errors import BatchCrcError
from pylog.records import build_batch, decode_batch
from pylog.records.columns import decode_columns
from pylog.records.compression import Compression
from pylog.records.filtering import scan_records
from pylog.records.header import check_crc, read_batch_header, set_log_append_time

APPEND_TIME = 1_700_000_000_123


def stamped(compression: int = Compression.NONE, base_offset: int = 0) -> bytearray:
    """Three records created at 1000, 1005 and 990, stamped with APPEND_TIME."""
    buf = bytearray(build_batch([(b"k%d" % i, b"v%d" % i, (), t)
                                 for i, t in enumerate((1000, 1005, 990))],
                                compression=compression, base_offset=base_offset))
    header = set_log_append_time(buf, 0, read_batch_header(buf), APPEND_TIME)
    assert header == read_batch_header(buf)  # the header it returns is the one written
    return buf


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.ZSTD])
def test_stamping_keeps_the_batch_valid_and_marks_it(codec):
    buf = stamped(codec)
    header = read_batch_header(buf)
    check_crc(buf, 0, header)  # the CRC was recomputed over the new attributes
    assert header.timestamp_type == 1 and header.compression == codec
    assert header.max_timestamp == APPEND_TIME and header.base_timestamp == 1000


@pytest.mark.parametrize("decoder", ["vectorised", "reference"])
@pytest.mark.parametrize("codec", [Compression.NONE, Compression.LZ4])
def test_every_decoder_gives_each_record_the_append_time(decoder, codec):
    created = build_batch([(None, b"c", (), 42)], base_offset=3)
    buf = bytes(stamped(codec)) + created  # a LogAppendTime batch, then a CreateTime one
    columns = decode_columns(buf, decoder=decoder)
    assert list(columns.offsets) == [0, 1, 2, 3]
    assert list(columns.timestamps) == [APPEND_TIME] * 3 + [42]
    assert [r.timestamp for r in decode_batch(stamped(codec)).records] == [APPEND_TIME] * 3
    assert scan_records(buf, 0, read_batch_header(buf)).timestamps == [APPEND_TIME] * 3


def test_a_batch_stamped_without_its_crc_is_refused():
    buf = stamped()
    buf[35] ^= 1  # maxTimestamp changed after the CRC was computed
    with pytest.raises(BatchCrcError):
        check_crc(buf, 0, read_batch_header(buf))
