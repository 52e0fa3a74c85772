"""Rolling and retention driven by an injected clock; reads racing retention."""

from __future__ import annotations

import threading

from pylog.log import Log, LogConfig
from pylog.records.header import iter_batch_headers
from tests.log.batches import make_batch

HOUR_MS = 3600 * 1000


def test_roll_by_size(tmp_path, clock):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=1000), clock)
    sizes = []
    for i in range(30):
        sizes.append(len(make_batch(2, tag=i)))
        log.append(make_batch(2, tag=i))
    assert all(s.size <= 1000 for s in log.segments)
    assert all(s.size + sizes[0] > 1000 for s in log.segments[:-1])  # each was full
    assert [s.base_offset for s in log.segments[1:]] == [s.next_offset for s in log.segments[:-1]]


def test_roll_by_time_follows_the_batch_timestamps(tmp_path, clock):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_ms=HOUR_MS), clock)
    log.append(make_batch(1, timestamp_ms=clock.ms))
    clock.advance(ms=HOUR_MS)
    log.append(make_batch(1, timestamp_ms=clock.ms, tag=1))
    assert len(log.segments) == 1  # exactly segment.ms is not past it
    clock.advance(ms=1)
    log.append(make_batch(1, timestamp_ms=clock.ms, tag=2))
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_roll_by_time_uses_the_clock_when_batches_have_no_timestamps(tmp_path, clock):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_ms=HOUR_MS), clock)
    log.append(make_batch(1, timestamp_ms=-1))
    clock.advance(ms=HOUR_MS + 1)
    log.append(make_batch(1, timestamp_ms=-1, tag=1))
    assert [s.base_offset for s in log.segments] == [0, 1]


def test_explicit_roll_of_an_empty_segment_is_a_no_op(tmp_path, clock):
    log = Log.open(tmp_path / "t-0", LogConfig(), clock)
    assert log.roll() is log.active_segment
    log.append(make_batch(1))
    assert log.roll().base_offset == 1 and len(log.segments) == 2
    assert log.recovery_point == 1  # rolling flushes the old segment


def test_a_roll_during_append_flushes_the_old_segment_in_the_background(tmp_path, clock):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=1000, expose_unflushed=False), clock)
    woken = threading.Event()
    log.add_append_listener(lambda lg: lg.high_watermark > 0 and woken.set())
    while len(log.segments) < 2:
        log.append(make_batch(2, tag=log.log_end_offset))
    rolled_at = log.active_segment.base_offset
    assert woken.wait(timeout=30)
    assert log.recovery_point == rolled_at == log.high_watermark
    result = log.read(0, 1 << 20)
    with result.region as region:
        *_, (_, last) = iter_batch_headers(region.read_bytes())
    assert last.next_offset == rolled_at  # nothing unflushed is visible


def test_time_retention_deletes_old_segments_but_never_the_active_one(tmp_path, clock):
    cfg = LogConfig(retention_ms=10 * HOUR_MS, segment_ms=HOUR_MS)
    log = Log.open(tmp_path / "t-0", cfg, clock)
    for i in range(5):  # five segments, one per hour
        log.append(make_batch(2, timestamp_ms=clock.ms, tag=i))
        clock.advance(ms=HOUR_MS + 10)
    assert len(log.segments) == 5
    assert log.delete_old_segments() == 0
    clock.advance(ms=11 * HOUR_MS // 2)  # the first segment's record is 10.5 h old, the next 9.5 h
    assert log.delete_old_segments() == 1
    assert log.log_start_offset == 2 and log.segments[0].base_offset == 2
    clock.advance(ms=100 * HOUR_MS)
    assert log.delete_old_segments() == 3
    assert len(log.segments) == 1 and log.log_start_offset == 8 and log.log_end_offset == 10
    assert sorted(p.name for p in (tmp_path / "t-0").iterdir()) == [
        "00000000000000000008.index", "00000000000000000008.log",
        "00000000000000000008.snapshot",  # producer state at the roll; older ones went too
        "00000000000000000008.timeindex", "leader-epoch-checkpoint"]
    result = log.read(8, 100)
    assert result.log_start_offset == 8
    result.region.close()


def test_size_retention_deletes_oldest_first(tmp_path, clock):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=500, retention_ms=None,
                                               retention_bytes=1200), clock)
    for i in range(20):
        log.append(make_batch(1, value_size=100, tag=i))
    sizes = [s.size for s in log.segments]
    total = sum(sizes)
    expected = 0
    while expected < len(sizes) - 1 and total - sizes[expected] >= 1200:
        total -= sizes[expected]
        expected += 1
    assert expected > 0
    assert log.delete_old_segments() == expected
    assert log.size_bytes == total and log.size_bytes >= 1200
    assert log.log_start_offset == log.segments[0].base_offset


def test_retention_none_keeps_everything(tmp_path, clock):
    log = Log.open(tmp_path / "t-0", LogConfig(retention_ms=None, segment_bytes=300), clock)
    for i in range(10):
        log.append(make_batch(1, timestamp_ms=1, tag=i))
    assert log.delete_old_segments(now=1e12) == 0


def test_read_in_progress_survives_retention_deleting_its_segment(tmp_path, clock):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=2000, retention_ms=1), clock)
    for i in range(40):
        log.append(make_batch(3, timestamp_ms=1000, tag=i))
    region = log.read(0, 1 << 20).region
    segments = len(log.segments)
    assert log.delete_old_segments() == segments - 1
    assert log.log_start_offset == log.active_segment.base_offset > 0
    # The segment file is gone; the duplicated descriptor still reads every byte.
    assert not (tmp_path / "t-0" / "00000000000000000000.log").exists()
    data = region.read_bytes()
    assert [h.base_offset for _, h in iter_batch_headers(data)][0] == 0
    region.close()


def test_concurrent_readers_and_retention_never_crash(tmp_path, clock):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=1500, retention_bytes=3000,
                                               retention_ms=None), clock)
    stop = threading.Event()
    failures: list[BaseException] = []
    batches_read = [0]

    def reader():
        from pylog.errors import OffsetOutOfRangeError
        while not stop.is_set():
            offset = log.log_start_offset
            try:
                result = log.read(offset, 4000)
            except OffsetOutOfRangeError:
                continue  # retention moved the start between the two calls
            except BaseException as exc:  # anything else is a bug
                failures.append(exc)
                return
            if result.region is not None:
                with result.region as region:
                    batches_read[0] += len(list(iter_batch_headers(region.read_bytes())))

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for i in range(400):
        log.append(make_batch(2, tag=i))
        if i % 10 == 0:
            log.delete_old_segments()
    stop.set()
    for t in threads:
        t.join()
    assert failures == [] and batches_read[0] > 0
    assert log.log_start_offset > 0


def test_segment_jitter_spreads_the_rolls_of_logs_written_together(tmp_path, clock):
    """segment.jitter.ms: each segment rolls at segment.ms less its own random share of the
    jitter, so logs written at the same time do not all roll at the same time."""
    config = LogConfig(segment_ms=HOUR_MS, segment_jitter_ms=HOUR_MS // 2)
    logs = [Log.open(tmp_path / f"t-{i}", config, clock) for i in range(40)]
    start = clock.ms

    def rolled_after(waited_ms: int, tag: int) -> int:
        for log in logs:
            log.append(make_batch(1, timestamp_ms=start + waited_ms, tag=tag))
        return sum(len(log.segments) > 1 for log in logs)

    assert rolled_after(0, 0) == 0
    assert rolled_after(HOUR_MS // 2, 1) == 0  # the jitter is at most half of segment.ms
    assert 0 < rolled_after(HOUR_MS * 3 // 4, 2) < len(logs)  # each with chance 1/2
    assert rolled_after(HOUR_MS + 1, 3) == len(logs)
    for log in logs:
        log.close()
