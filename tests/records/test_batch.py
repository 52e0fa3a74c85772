"""Batch encode/decode: expected bytes, round trips for every codec, fetch-buffer handling."""

import pytest

from pylog.errors import (
    BatchCrcError,
    BatchLengthError,
    CompressionError,
    ConfigError,
    RecordDecodeError,
    TruncatedBatchError,
    UnsupportedMagicError,
)
from pylog.records import (
    BatchBuilder,
    Compression,
    Record,
    RecordInput,
    build_batch,
    decode_batch,
    decode_columns,
    iter_records,
    read_batch_header,
)
from pylog.records.compression import XERIAL_MAGIC, compress, decompress

# One record (key b"k", value b"v", timestamp 1000 ms) at base offset 0, written out by hand
# from the v2 layout; the CRC is CRC-32C of bytes 21.. of exactly these bytes.
EXPECTED_SMALL_BATCH = bytes.fromhex(
    "0000000000000000"    # baseOffset 0
    "0000003a"            # batchLength 58 = 49 header bytes after it + 9 record bytes
    "ffffffff"            # partitionLeaderEpoch -1
    "02"                  # magic
    "716a6189"            # crc
    "0000"                # attributes: no compression, CreateTime
    "00000000"            # lastOffsetDelta
    "00000000000003e8"    # baseTimestamp 1000
    "00000000000003e8"    # maxTimestamp 1000
    "ffffffffffffffff"    # producerId -1
    "ffff"                # producerEpoch -1
    "ffffffff"            # baseSequence -1
    "00000001"            # recordsCount 1
    "10"                  # record length 8 (zigzag 16)
    "00"                  # attributes
    "00"                  # timestampDelta 0
    "00"                  # offsetDelta 0
    "02" "6b"             # key length 1, "k"
    "02" "76"             # value length 1, "v"
    "00"                  # no headers
)

RECORDS = [
    RecordInput(b"key-1", b"value-1" * 40, (("trace", b"abc"), ("empty", None)), 1_700_000_000_000),
    RecordInput(None, b"no key", (), 1_700_000_000_500),
    RecordInput(b"no value", None, (), 1_699_999_999_000),  # earlier than the first: negative delta
    RecordInput(b"", b"", (("h\u00e9", b""),), 1_700_000_100_000),
]


def test_small_batch_matches_hand_built_bytes():
    assert build_batch([(b"k", b"v", (), 1000)]) == EXPECTED_SMALL_BATCH
    decoded = decode_batch(EXPECTED_SMALL_BATCH)
    assert decoded.records == [Record(0, 1000, b"k", b"v", ())]
    assert decoded.header.crc == 0x716A6189


@pytest.mark.parametrize("codec", list(Compression))
def test_round_trip_every_codec(codec):
    batch = build_batch(RECORDS, base_offset=42, compression=codec, producer_id=7,
                        producer_epoch=1, base_sequence=3, partition_leader_epoch=5)
    decoded = decode_batch(batch)
    header = decoded.header
    assert header.compression == codec
    assert (header.base_offset, header.last_offset_delta, header.records_count) == (42, 3, 4)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 1, 3)
    assert header.partition_leader_epoch == 5
    assert header.base_timestamp == 1_700_000_000_000
    assert header.max_timestamp == 1_700_000_100_000
    expected = [Record(42 + i, r.timestamp, r.key, r.value, tuple(r.headers)) for i, r in enumerate(RECORDS)]
    assert decoded.records == expected
    columns = decode_columns(batch)
    assert columns.offsets == [42, 43, 44, 45]
    assert columns.values == [r.value for r in RECORDS]
    assert columns.next_offset == 46 and columns.bytes_consumed == len(batch)


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_compression_shrinks_repetitive_records(codec):
    records = [(b"k", b"x" * 200, (), 1000 + i) for i in range(100)]
    assert len(build_batch(records, compression=codec)) < len(build_batch(records)) // 4


def test_snappy_reads_raw_and_xerial_with_many_blocks():
    import cramjam
    payload = bytes(range(256)) * 1000  # spans several 32 KB xerial blocks
    framed = compress(Compression.SNAPPY, payload)
    assert framed.startswith(XERIAL_MAGIC)
    assert decompress(Compression.SNAPPY, framed) == payload
    assert decompress(Compression.SNAPPY, bytes(cramjam.snappy.compress_raw(payload))) == payload


def test_compression_parse():
    assert Compression.parse("zstd") is Compression.ZSTD
    assert Compression.parse("LZ4") is Compression.LZ4
    assert Compression.parse("none") is Compression.NONE
    with pytest.raises(ValueError, match="unknown codec 'brotli'"):
        Compression.parse("brotli")
    with pytest.raises(ConfigError):
        Compression.parse("")


def test_builder_size_accounting():
    builder = BatchBuilder()
    assert builder.size_in_bytes == 61 and builder.record_count == 0
    assert not builder.would_exceed(10, b"k", b"v" * 100)  # an empty batch always takes a record
    builder.append(b"k", b"v" * 100, timestamp=1)
    assert builder.size_in_bytes == len(builder.build())
    assert builder.would_exceed(builder.size_in_bytes + 50, None, b"v" * 100)
    assert not builder.would_exceed(builder.size_in_bytes + 200, None, b"v" * 100)


def test_long_varints_and_large_values():
    records = [(b"k" * 300, b"v" * 70000, (("h" * 200, b"x" * 5000),), 1), (None, b"a", (), 2**40)]
    assert [r.value for r in decode_batch(build_batch(records, base_offset=2**40)).records] == [b"v" * 70000, b"a"]


def test_iter_records_stops_at_partial_trailing_batch():
    first = build_batch([(None, b"a", (), 1), (None, b"b", (), 2)], base_offset=0)
    second = build_batch([(None, b"c", (), 3)], base_offset=2, compression=Compression.ZSTD)
    buf = first + second
    for cut in range(len(first), len(buf)):
        assert [r.value for r in iter_records(buf[:cut])] == [b"a", b"b"]
        columns = decode_columns(buf[:cut])
        assert (columns.bytes_consumed, columns.next_offset) == (len(first), 2)
    assert [r.offset for r in iter_records(buf)] == [0, 1, 2]
    assert decode_columns(first[:30]).next_offset is None


def test_start_offset_drops_records_before_the_requested_offset():
    buf = build_batch([(None, bytes([i]), (), i) for i in range(5)], base_offset=10)
    columns = decode_columns(buf, start_offset=13)
    assert columns.offsets == [13, 14] and columns.values == [b"\x03", b"\x04"]


def test_control_batches_are_skipped_unless_asked():
    control = bytearray(build_batch([(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", (), 5)], base_offset=1))
    control[21:23] = (0x30).to_bytes(2, "big")  # transactional + control
    from crc32c import crc32c
    control[17:21] = crc32c(bytes(control[21:])).to_bytes(4, "big")
    buf = build_batch([(None, b"data", (), 1)]) + bytes(control)
    assert [r.value for r in iter_records(buf)] == [b"data"]
    assert len(list(iter_records(buf, skip_control=False))) == 2
    assert decode_columns(buf).next_offset == 2


def test_specific_errors():
    batch = bytearray(build_batch(RECORDS, compression=Compression.GZIP))
    with pytest.raises(TruncatedBatchError):
        decode_batch(bytes(batch[:-1]))
    flipped = bytearray(batch)
    flipped[-3] ^= 0xFF
    with pytest.raises(BatchCrcError):
        decode_batch(bytes(flipped))
    with pytest.raises(BatchCrcError):
        list(iter_records(bytes(flipped)))  # a complete corrupt batch is not a partial one
    wrong_magic = bytearray(batch)
    wrong_magic[16] = 1
    with pytest.raises(UnsupportedMagicError):
        decode_batch(bytes(wrong_magic))
    short = bytearray(batch)
    short[8:12] = (10).to_bytes(4, "big")
    with pytest.raises(BatchLengthError):
        read_batch_header(bytes(short))


def _with_body(body: bytes, count: int, codec: int = 0) -> bytes:
    from crc32c import crc32c
    import struct
    tail = struct.pack(">hiqqqhii", codec, count - 1, 0, 0, -1, -1, -1, count) + body
    return struct.pack(">qiib", 0, 49 + len(body), -1, 2) + crc32c(tail).to_bytes(4, "big") + tail


def test_record_level_errors_inside_a_valid_crc():
    good = build_batch([(b"k", b"v", (), 1)])[61:]
    with pytest.raises(RecordDecodeError):
        decode_batch(_with_body(good, 2))  # count says two records, body has one
    with pytest.raises(RecordDecodeError):
        decode_batch(_with_body(good + b"\x00", 1))  # trailing garbage
    with pytest.raises(RecordDecodeError):
        decode_batch(_with_body(good[:-2], 1))  # record cut short
    with pytest.raises(RecordDecodeError):
        decode_batch(_with_body(b"\xff" * 12, 1))  # over-long varint
    with pytest.raises(CompressionError):
        decode_batch(_with_body(b"not gzip at all", 1, codec=Compression.GZIP))
    with pytest.raises(CompressionError):
        decode_batch(_with_body(good, 1, codec=6))  # no such codec
