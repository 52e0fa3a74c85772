"""Offset and time indexes checked against bisect over a plain list."""

from __future__ import annotations

import bisect
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pylog.log.index import CorruptIndexError, IndexInvariantError, OffsetPosition, TimestampOffset
from pylog.log.offset_index import OffsetIndex
from pylog.log.time_index import TimeIndex

BASE = 1000


def strictly_increasing(min_size=0, max_size=200):
    return st.lists(st.integers(1, 1 << 20), min_size=min_size, max_size=max_size, unique=True).map(sorted)


@settings(max_examples=60, deadline=None)
@given(offsets=strictly_increasing(), probes=st.lists(st.integers(0, (1 << 20) + 10), max_size=30),
       cut=st.integers(0, (1 << 20) + 10))
def test_offset_index_lookup_matches_bisect(tmp_path_factory, offsets, probes, cut):
    path = tmp_path_factory.mktemp("idx") / "00000000000000001000.index"
    index = OffsetIndex(path, BASE, 8 * 256, writable=True)
    positions = [o * 3 for o in offsets]
    for o, p in zip(offsets, positions):
        index.append(BASE + o, p)
    for probe in probes:
        i = bisect.bisect_right(offsets, probe) - 1
        expected = OffsetPosition(BASE, 0) if i < 0 else OffsetPosition(BASE + offsets[i], positions[i])
        assert index.lookup(BASE + probe) == expected
        j = bisect.bisect_right(positions, probe) - 1
        expected = OffsetPosition(BASE, 0) if j < 0 else OffsetPosition(BASE + offsets[j], positions[j])
        assert index.lookup_by_position(probe) == expected
    index.truncate_to(BASE + cut)
    assert index.entries == bisect.bisect_left(offsets, cut)
    index.close()
    # Closing trims the preallocated file to its entries; reopening reads them back.
    assert path.stat().st_size == 8 * index.entries
    reopened = OffsetIndex(path, BASE, 8 * 256, writable=False)
    assert [e for e in reopened.iter_raw()] == list(zip(offsets, positions))[:index.entries]
    reopened.sanity_check(log_size=(1 << 22))
    reopened.close()


@settings(max_examples=60, deadline=None)
@given(stamps=st.lists(st.integers(0, 10_000), max_size=150),
       probes=st.lists(st.integers(-5, 10_005), max_size=30))
def test_time_index_keeps_increasing_timestamps_and_matches_bisect(tmp_path_factory, stamps, probes):
    path = tmp_path_factory.mktemp("tidx") / "00000000000000001000.timeindex"
    index = TimeIndex(path, BASE, 12 * 200, writable=True)
    kept: list[tuple[int, int]] = []
    for rel, ts in enumerate(stamps):
        index.maybe_append(ts, BASE + rel)
        if not kept or ts > kept[-1][0]:
            kept.append((ts, rel))
    assert list(index.iter_raw()) == kept
    keys = [ts for ts, _ in kept]
    for probe in probes:
        i = bisect.bisect_right(keys, probe) - 1
        expected = TimestampOffset(-1, BASE) if i < 0 else TimestampOffset(kept[i][0], BASE + kept[i][1])
        assert index.lookup(probe) == expected
    index.sanity_check(next_offset=BASE + len(stamps))
    index.close()


def test_invariants_throw(tmp_path):
    index = OffsetIndex(tmp_path / "a.index", 0, 8 * 2, writable=True)
    index.append(5, 100)
    with pytest.raises(IndexInvariantError):
        index.append(5, 200)
    with pytest.raises(IndexInvariantError):
        index.append(6, 100)
    index.append(6, 200)
    assert index.is_full
    with pytest.raises(IndexInvariantError, match="full"):
        index.append(7, 300)
    times = TimeIndex(tmp_path / "a.timeindex", 0, 12 * 4, writable=True)
    times.maybe_append(10, 5)
    with pytest.raises(IndexInvariantError):
        times.maybe_append(20, 4)


def test_resize_keeps_entries_that_fit(tmp_path):
    index = OffsetIndex(tmp_path / "a.index", 0, 8 * 10, writable=True)
    for i in range(1, 8):
        index.append(i, i * 10)
    index.resize(8 * 3 + 5)
    assert index.max_entries == 3 and index.entries == 3 and index.lookup(99) == OffsetPosition(3, 30)
    index.resize(8 * 100)
    assert index.max_entries == 100 and not index.is_full
    index.close()


@pytest.mark.parametrize("content", [
    b"\x00" * 7,  # not whole entries
    b"\x00" * 16,  # preallocated zeros left by a crash
    (5).to_bytes(4, "big") + (100).to_bytes(4, "big") + (4).to_bytes(4, "big") + (200).to_bytes(4, "big"),
    (5).to_bytes(4, "big") + (5000).to_bytes(4, "big"),  # points past the log
])
def test_sanity_check_finds_corrupt_offset_index(tmp_path, content):
    path = tmp_path / "a.index"
    path.write_bytes(content)
    index = OffsetIndex(path, 0, 1024, writable=False)
    with pytest.raises(CorruptIndexError):
        index.sanity_check(log_size=1000)
    index.close()


def test_sanity_check_finds_corrupt_time_index(tmp_path):
    path = tmp_path / "a.timeindex"
    path.write_bytes((50).to_bytes(8, "big") + (1).to_bytes(4, "big")
                     + (40).to_bytes(8, "big") + (2).to_bytes(4, "big"))
    index = TimeIndex(path, 0, 1024, writable=False)
    with pytest.raises(CorruptIndexError):
        index.sanity_check(next_offset=10)
    index.close()


def test_entries_across_write_ahead_chunks_survive_truncation_and_reopen(tmp_path):
    """Appends give the file its blocks with a plain write of zeros a chunk ahead; entries
    past several chunks, a truncation back and appends over the old ones, then a reopen,
    read back exactly; the file holds no hole where an entry is."""
    path = tmp_path / "00000000000000001000.index"
    index = OffsetIndex(path, BASE, 8 * 10_000, writable=True)
    for i in range(3000):  # 24 KB of entries: three 8 KB chunks
        index.append(BASE + 2 * i, 10 * i)
    index.truncate_to(BASE + 2 * 1500)
    for i in range(1500, 2500):
        index.append(BASE + 2 * i + 1, 10 * i + 5)
    index.flush()
    index.close()  # trims the file to its entries
    reopened = OffsetIndex(path, BASE, 8 * 10_000, writable=False)
    expected = [(2 * i, 10 * i) for i in range(1500)] + [(2 * i + 1, 10 * i + 5)
                                                         for i in range(1500, 2500)]
    assert list(reopened.iter_raw()) == expected
    reopened.close()
    with open(path, "rb") as f:
        assert os.lseek(f.fileno(), 0, os.SEEK_HOLE) == os.path.getsize(path)


def test_time_entries_across_write_ahead_chunks(tmp_path):
    path = tmp_path / "00000000000000001000.timeindex"
    index = TimeIndex(path, BASE, 12 * 5000, writable=True)
    for i in range(2000):  # 12-byte entries: some straddle a chunk's end
        index.maybe_append(1_700_000_000_000 + i, BASE + i)
    index.close()
    reopened = TimeIndex(path, BASE, 12 * 5000, writable=False)
    assert list(reopened.iter_raw()) == [(1_700_000_000_000 + i, i) for i in range(2000)]
    reopened.close()
