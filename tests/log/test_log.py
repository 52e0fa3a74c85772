"""Log append and read: offsets, regions, validation, high watermark, timestamps."""

from __future__ import annotations

import os

import crc32c
import pytest

from pylog.errors import (
    BatchCrcError,
    CorruptRecordError,
    InvalidRecordError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
    TruncatedBatchError,
    UnsupportedMagicError,
)
from pylog.log import AppendInfo, Log, LogConfig
from pylog.records import Compression, build_batch
from pylog.records.header import iter_batch_headers, read_batch_header
from tests.log.batches import make_batch


def read_all(log: Log, offset: int = 0, max_bytes: int = 1 << 30) -> bytes:
    """Every byte readable from ``offset`` on, following the regions across segments."""
    out = b""
    while True:
        result = log.read(offset, max_bytes)
        if result.region is None:
            return out
        with result.region as region:
            chunk = region.read_bytes()
        out += chunk
        *_, (_, last) = iter_batch_headers(chunk, verify_crc=True)
        offset = last.next_offset


def test_append_assigns_contiguous_offsets_and_keeps_batches_intact(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig())
    batches = [make_batch(n, tag=i) for i, n in enumerate([1, 5, 2, 10])]
    infos = [log.append(b) for b in batches]
    assert [(i.first_offset, i.last_offset, i.record_count) for i in infos] == [
        (0, 0, 1), (1, 5, 5), (6, 7, 2), (8, 17, 10)]
    assert log.log_end_offset == 18 and log.high_watermark == 18
    stored = read_all(log)
    headers = list(iter_batch_headers(stored, verify_crc=True))
    assert [h.base_offset for _, h in headers] == [0, 1, 6, 8]
    # Only baseOffset differs from the producer's bytes.
    for (pos, h), original in zip(headers, batches):
        assert stored[pos + 8:pos + h.size] == original[8:]
    log.close()


def test_append_of_several_batches_at_once(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig())
    info = log.append(make_batch(3) + make_batch(4, tag=1) + make_batch(1, tag=2))
    assert info == AppendInfo(first_offset=0, last_offset=7, max_timestamp=1_700_000_000_000,
                              log_append_time_ms=-1, log_start_offset=0, record_count=8)
    assert [h.base_offset for _, h in iter_batch_headers(read_all(log))] == [0, 3, 7]
    log.close()


@pytest.mark.parametrize("damage, error", [
    (lambda b: b[:-1], TruncatedBatchError),
    (lambda b: b[:30], TruncatedBatchError),
    (lambda b: b[:16] + b"\x01" + b[17:], UnsupportedMagicError),
    (lambda b: b[:-1] + bytes([b[-1] ^ 1]), BatchCrcError),
    (lambda b: b[:8] + (10).to_bytes(4, "big") + b[12:], CorruptRecordError),
    (lambda b: b + b"\x00" * 5, TruncatedBatchError),
])
def test_a_bad_batch_is_refused_and_nothing_is_written(tmp_path, damage, error):
    log = Log.open(tmp_path / "t-0", LogConfig())
    log.append(make_batch(2))
    size = log.size_bytes
    good = make_batch(3, tag=1)
    with pytest.raises(error):
        log.append(good + damage(make_batch(2, tag=2)))
    assert log.size_bytes == size and log.log_end_offset == 2
    assert log.append(good).first_offset == 2
    log.close()


def with_fields(batch: bytes, *, records_count: int | None = None,
                last_offset_delta: int | None = None) -> bytes:
    """``batch`` with header fields replaced and its CRC recomputed (a consistent batch)."""
    data = bytearray(batch)
    if records_count is not None:
        data[57:61] = records_count.to_bytes(4, "big", signed=True)
    if last_offset_delta is not None:
        data[23:27] = last_offset_delta.to_bytes(4, "big", signed=True)
    data[17:21] = crc32c.crc32c(bytes(data[21:])).to_bytes(4, "big")
    return bytes(data)


@pytest.mark.parametrize("fields", [
    {"records_count": 2}, {"records_count": 4}, {"last_offset_delta": 1},
    {"last_offset_delta": 5},
])
def test_records_count_must_match_last_offset_delta(tmp_path, fields):
    log = Log.open(tmp_path / "t-0", LogConfig())
    log.append(make_batch(2))
    with pytest.raises(CorruptRecordError, match="recordsCount"):
        log.append(with_fields(make_batch(3, tag=1), **fields))
    assert log.log_end_offset == 2
    assert log.append(with_fields(make_batch(3, tag=1), records_count=3)).first_offset == 2
    log.close()


def test_size_limits_and_empty_records(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(max_batch_size=2000, segment_bytes=5000))
    with pytest.raises(MessageTooLargeError, match="2000"):
        log.append(make_batch(20, value_size=200))
    with pytest.raises(RecordListTooLargeError):
        log.append(b"".join(make_batch(8, value_size=100, tag=i) for i in range(6)))
    with pytest.raises(InvalidRecordError):
        log.append(b"")
    assert log.size_bytes == 0
    log.close()


def test_read_regions_respect_max_bytes_with_whole_batches(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(index_interval_bytes=300))
    sizes = []
    for i in range(40):
        batch = make_batch(2, value_size=50 + i * 3, tag=i)
        sizes.append(len(batch))
        log.append(batch)
    # The first batch comes whole even when it is larger than max_bytes.
    with log.read(0, 1).region as region:
        assert (region.position, region.length) == (0, sizes[0])
    # Offset 7 is inside the batch at offsets 6..7: that batch is the first one returned.
    for max_bytes in (sizes[3] + sizes[4] - 1, 1000, 2500):
        with log.read(7, max_bytes).region as region:
            assert region.position == sum(sizes[:3])
            expected, total = 0, 0
            for s in sizes[3:]:
                if expected and total + s > max_bytes:
                    break
                total += s
                expected += 1
            assert region.length == total
            read_batch_header(region.read_bytes())  # starts at a batch
    log.close()


def test_read_empty_at_end_and_out_of_range(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig())
    assert log.read(0, 100).region is None
    log.append(make_batch(3))
    result = log.read(3, 100)
    assert result.region is None and result.high_watermark == 3 and result.log_start_offset == 0
    for bad in (-1, 4, 100):
        with pytest.raises(OffsetOutOfRangeError, match="valid offsets are 0 to 3"):
            log.read(bad, 100)
    log.close()


def test_max_offset_caps_the_read(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig())
    for i in range(5):
        log.append(make_batch(2, tag=i))
    with log.read(0, 1 << 20, max_offset=4).region as region:
        assert [h.base_offset for _, h in iter_batch_headers(region.read_bytes())] == [0, 2]
    assert log.read(4, 1 << 20, max_offset=4).region is None
    log.close()


def test_expose_unflushed_false_reads_only_flushed_data(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(expose_unflushed=False))
    woken = []
    log.add_append_listener(lambda lg: woken.append(lg.high_watermark))
    log.append(make_batch(2))
    assert log.high_watermark == 0 and log.read(0, 100).region is None
    log.flush()
    assert log.high_watermark == 2 and woken == [0, 2]
    log.append(make_batch(3, tag=1))
    with log.read(0, 1 << 20).region as region:
        assert [h.base_offset for _, h in iter_batch_headers(region.read_bytes())] == [0]
    log.close()


def test_flush_messages_flushes_by_record_count(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(flush_messages=5, expose_unflushed=False))
    log.append(make_batch(3))
    assert log.recovery_point == 0
    log.append(make_batch(2, tag=1))
    assert log.recovery_point == 5 and log.high_watermark == 5
    log.close()


def test_offset_for_timestamp(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(index_interval_bytes=200, segment_bytes=2000))
    base = 1_700_000_000_000
    stamps = [base + 10 * i for i in range(60)]
    stamps[30] = base  # an out-of-order timestamp (CreateTime can go backwards)
    for i, ts in enumerate(stamps):
        log.append(make_batch(2, timestamp_ms=ts, tag=i))
    assert len(log.segments) > 3
    for target in [base - 5, base, base + 1, base + 155, base + 300, base + 590, base + 591]:
        expected = next(((2 * i, ts) for i, ts in enumerate(stamps) if ts >= target), None)
        assert log.offset_for_timestamp(target) == expected
    log.close()


def test_offset_for_timestamp_picks_the_record_inside_the_batch(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig())
    log.append(make_batch(3, timestamp_ms=50))
    log.append(build_batch([(b"k", b"a", (), 100), (b"k", b"b", (), 300), (b"k", b"c", (), 200)],
                           compression=Compression.ZSTD))
    assert log.offset_for_timestamp(60) == (3, 100)
    assert log.offset_for_timestamp(150) == (4, 300)
    assert log.offset_for_timestamp(300) == (4, 300)
    assert log.offset_for_timestamp(301) is None
    log.close()


def test_reopen_after_close_keeps_everything(tmp_path):
    cfg = LogConfig(segment_bytes=1000, index_interval_bytes=100)
    log = Log.open(tmp_path / "t-0", cfg)
    for i in range(50):
        log.append(make_batch(2, tag=i))
    before = read_all(log)
    log.close()
    for clean in (True, False):
        log = Log.open(tmp_path / "t-0", cfg, had_clean_shutdown=clean)
        assert log.bytes_truncated == 0
        assert (log.log_end_offset, read_all(log)) == (100, before)
        assert log.append(make_batch(1, tag=99)).first_offset == 100
        log.truncate_to(100)
        log.close()


def test_region_survives_closing_the_log(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig())
    log.append(make_batch(2))
    region = log.read(0, 100).region
    log.delete()
    assert not (tmp_path / "t-0").exists()
    assert read_batch_header(region.read_bytes()).base_offset == 0
    region.close()
    assert region.closed
    with pytest.raises(OSError):
        os.fstat(region.fd)


def test_truncate_to_cuts_at_a_batch_boundary(tmp_path, clock):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=600, index_interval_bytes=100), clock)
    for i in range(12):
        log.append(make_batch(3, tag=i))
    segments = len(log.segments)
    log.truncate_to(16)  # inside the batch 15..17: that batch goes too
    assert log.log_end_offset == 15 and len(log.segments) < segments
    assert log.append(make_batch(1, tag=99)).first_offset == 15
    with log.read(15, 1000).region as region:
        (_, header), = iter_batch_headers(region.read_bytes())
        assert (header.base_offset, header.records_count) == (15, 1)
    log.truncate_to(1000)  # past the end: nothing happens
    assert log.log_end_offset == 16


def test_truncate_below_the_log_start_restarts_the_log_there(tmp_path, clock):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=300, retention_bytes=300, retention_ms=None), clock)
    for i in range(10):
        log.append(make_batch(2, tag=i))
    log.delete_old_segments()
    start = log.log_start_offset
    assert start > 2
    log.truncate_to(2)
    assert (log.log_start_offset, log.log_end_offset, len(log.segments)) == (2, 2, 1)
    assert sorted(p.name for p in (tmp_path / "t-0").iterdir()) == [
        "00000000000000000002.index", "00000000000000000002.log", "00000000000000000002.timeindex",
        "leader-epoch-checkpoint"]
    assert log.append(make_batch(1)).first_offset == 2
    log.close()
    reopened = Log.open(tmp_path / "t-0", LogConfig())
    assert (reopened.log_start_offset, reopened.log_end_offset) == (2, 3)
    reopened.close()


def test_a_closed_log_refuses_work_with_a_kafka_error(tmp_path):
    from pylog.errors import UnknownTopicOrPartitionError
    from pylog.log import LogClosedError
    log = Log.open(tmp_path / "t-0", LogConfig())
    log.append(make_batch(1))
    log.close()
    log.close()  # idempotent
    for call in (lambda: log.append(make_batch(1)), lambda: log.read(0, 100), log.flush):
        with pytest.raises(LogClosedError) as caught:
            call()
        assert isinstance(caught.value, UnknownTopicOrPartitionError) and caught.value.errno == 3


@pytest.mark.parametrize("compression", [0, 1, 2, 3, 4])  # none, gzip, snappy, lz4, zstd
def test_compressed_client_batches_are_stored_as_sent(tmp_path, compression):
    from pylog.records import decode_batch
    log = Log.open(tmp_path / "t-0", LogConfig(index_interval_bytes=100))
    sent = [make_batch(30, value_size=80, compression=compression, tag=i) for i in range(5)]
    for batch in sent:
        log.append(batch)
    stored = read_all(log)
    offset = 0
    for (position, header), original in zip(iter_batch_headers(stored, verify_crc=True), sent):
        assert header.compression == compression and header.base_offset == offset
        assert stored[position + 8:position + header.size] == original[8:]
        records = decode_batch(stored, position).records
        assert [r.offset for r in records] == list(range(offset, offset + 30))
        assert records[7].value.startswith(b"%d:7:" % (offset // 30))
        offset += 30
    log.close()
