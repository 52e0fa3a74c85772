"""Recovery after an unclean shutdown, and rebuilding missing or corrupt indexes."""

from __future__ import annotations

import os
import random

import pytest

from pylog.log import Log, LogConfig
from pylog.log import layout
from pylog.records.header import iter_batch_headers
from tests.log.batches import make_batch
from tests.log.test_log import read_all

CFG = LogConfig(segment_bytes=3000, index_interval_bytes=200)


def build_log(directory, batches=60):
    log = Log.open(directory, CFG)
    for i in range(batches):
        log.append(make_batch(1 + i % 4, value_size=30 + i % 50, timestamp_ms=1_700_000_000_000 + i, tag=i))
    return log


def snapshot_files(directory):
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_random_garbage_tail_is_truncated(tmp_path):
    log = build_log(tmp_path / "t-0")
    expected, end = read_all(log), log.log_end_offset
    active = log.active_segment.records.path
    log.close()
    rng = random.Random(7)
    garbage = bytes(rng.getrandbits(8) for _ in range(777))
    with open(active, "ab") as f:
        f.write(garbage)
    log = Log.open(tmp_path / "t-0", CFG, recovery_point=end, had_clean_shutdown=False)
    assert log.bytes_truncated == 777
    assert log.log_end_offset == end and read_all(log) == expected
    assert log.append(make_batch(2, tag=1000)).first_offset == end
    log.close()


@pytest.mark.parametrize("keep", [1, 12, 60, -1])
def test_torn_final_batch_is_dropped(tmp_path, keep):
    log = build_log(tmp_path / "t-0")
    expected, end = read_all(log), log.log_end_offset
    last = make_batch(5, value_size=100, tag=999)
    log.close()
    with open(log.active_segment.records.path, "ab") as f:
        f.write(last[:keep])  # a batch written only in part (its base offset is still 0)
    log = Log.open(tmp_path / "t-0", CFG)
    assert log.bytes_truncated == len(last[:keep])
    assert (log.log_end_offset, read_all(log)) == (end, expected)
    log.close()


def test_recovery_with_no_recovery_point_keeps_a_valid_log_whole(tmp_path):
    log = build_log(tmp_path / "t-0")
    log.close()
    before = snapshot_files(tmp_path / "t-0")
    log = Log.open(tmp_path / "t-0", CFG, recovery_point=0, had_clean_shutdown=False)
    assert log.bytes_truncated == 0
    log.close()
    # Rebuilt indexes are byte-for-byte the ones written by appends.
    assert snapshot_files(tmp_path / "t-0") == before


def test_corruption_in_an_old_segment_cuts_the_log_there(tmp_path):
    log = build_log(tmp_path / "t-0")
    segments = log.segments
    assert len(segments) >= 4
    victim = segments[1]
    headers = list(iter_batch_headers(victim.records.read(0, victim.size)))
    pos, header = headers[len(headers) // 2]
    log.close()
    with open(victim.records.path, "r+b") as f:
        f.seek(pos + 70)
        f.write(b"\xff")
    later = sum(s.size for s in segments[2:])
    log = Log.open(tmp_path / "t-0", CFG, recovery_point=0)
    assert log.log_end_offset == header.base_offset
    assert log.bytes_truncated == victim.size - pos + later
    assert [s.base_offset for s in log.segments] == [s.base_offset for s in segments[:2]]
    assert sorted(p.name for p in (tmp_path / "t-0").iterdir()) == sorted(
        [layout.segment_file_name(s.base_offset, suffix) for s in segments[:2]
         for suffix in (".log", ".index", ".timeindex")] + [layout.LEADER_EPOCH_CHECKPOINT]
        # the producer state snapshot of the roll at segment 1; the later ones are gone
        + [layout.segment_file_name(segments[1].base_offset, layout.SNAPSHOT_SUFFIX)])
    log.close()


@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
def test_deleted_index_is_rebuilt_even_after_a_clean_shutdown(tmp_path, suffix):
    log = build_log(tmp_path / "t-0")
    log.close()
    before = snapshot_files(tmp_path / "t-0")
    base = log.segments[1].base_offset
    (tmp_path / "t-0" / layout.segment_file_name(base, suffix)).unlink()
    log = Log.open(tmp_path / "t-0", CFG, had_clean_shutdown=True)
    assert log.bytes_truncated == 0
    for offset in range(0, log.log_end_offset, 7):
        with log.read(offset, 1).region as region:
            (_, h), = iter_batch_headers(region.read_bytes())
            assert h.base_offset <= offset <= h.last_offset
    log.close()
    assert snapshot_files(tmp_path / "t-0") == before


@pytest.mark.parametrize("damage", ["garbage", "zeros", "short", "shifted"])
def test_corrupt_index_is_rebuilt(tmp_path, damage):
    log = build_log(tmp_path / "t-0")
    log.close()
    before = snapshot_files(tmp_path / "t-0")
    path = tmp_path / "t-0" / layout.segment_file_name(log.segments[1].base_offset, ".index")
    content = path.read_bytes()
    assert len(content) >= 16
    if damage == "garbage":
        path.write_bytes(random.Random(3).randbytes(len(content)))
    elif damage == "zeros":
        path.write_bytes(content + b"\x00" * 800)  # as if left preallocated by a crash
    elif damage == "short":
        path.write_bytes(content[:-3])
    else:  # the last entry points one batch too early
        path.write_bytes(content[:-8] + content[-16:-8][:4] + content[-4:])
    log = Log.open(tmp_path / "t-0", CFG, had_clean_shutdown=True)
    assert log.bytes_truncated == 0 and log.log_end_offset == 60 + 60 // 4 * 6
    log.close()
    assert snapshot_files(tmp_path / "t-0") == before


def test_orphan_and_temp_files_are_removed(tmp_path):
    log = build_log(tmp_path / "t-0", batches=3)
    log.close()
    orphan = tmp_path / "t-0" / layout.segment_file_name(12345, ".index")
    orphan.write_bytes(b"\x00" * 8)
    temp = tmp_path / "t-0" / "leftover.tmp"
    temp.write_bytes(b"x")
    log = Log.open(tmp_path / "t-0", CFG, had_clean_shutdown=True)
    assert not orphan.exists() and not temp.exists()
    log.close()


def test_preallocated_index_after_kill_is_rebuilt(tmp_path):
    """An active segment left open (no close) keeps its preallocated index files."""
    log = build_log(tmp_path / "t-0")
    expected, end = read_all(log), log.log_end_offset
    index_path = layout.index_file(tmp_path / "t-0", log.active_segment.base_offset)
    assert index_path.stat().st_size == CFG.segment_index_bytes
    # Simulate the process dying: nothing is closed, the files stay as they are.
    reopened = Log.open(tmp_path / "t-0", CFG, recovery_point=log.recovery_point)
    assert reopened.bytes_truncated == 0
    assert (reopened.log_end_offset, read_all(reopened)) == (end, expected)
    reopened.close()
    assert os.path.getsize(index_path) % 8 == 0 and os.path.getsize(index_path) < CFG.segment_index_bytes


def test_batches_over_a_lowered_max_batch_size_survive_recovery(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig())
    big = make_batch(20, value_size=500)
    log.append(big)
    log.close()
    log = Log.open(tmp_path / "t-0", LogConfig(max_batch_size=1000))
    assert log.bytes_truncated == 0 and log.log_end_offset == 20
    log.close()
