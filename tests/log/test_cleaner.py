"""Log compaction against a model: after cleaning, the log reads as the last record of each key.

The model is the list of everything written. For the cleaned part of the log (below the
active segment) a read from the start must give, for every key, exactly its last record
in that part -- unless it is a tombstone older than ``delete.retention.ms`` -- at the offset
it was written at; the active segment must read exactly as written. Every batch must be a
valid v2 batch (CRC checked by pylog's decoder and by kafka-python's), and the batches'
offsets contiguous by their headers.

Crash safety: the swap is cut short at each of its steps (as a SIGKILL would), the log is
reopened, and it must read either as before the pass or as after it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch

from pylog.errors import ConfigError, InvalidRecordError
from pylog.log import Log, LogConfig, LogManager, layout, swap
from pylog.log.cleaner import Cleaner
from pylog.log.cleaner_manager import CleanerConfig
from pylog.records.batch import build_batch, decode_batch
from pylog.records.compression import Compression
from pylog.records.header import read_batch_header
from pylog.types import TopicPartition

from tests.examples import examples
from tests.log.conftest import ManualClock

RETENTION_MS = 60_000
KEYS = [f"key-{i}".encode() for i in range(12)]


@dataclass(frozen=True)
class Written:
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int


def compact_config(**changes) -> LogConfig:
    base = dict(segment_bytes=600, cleanup_policy="compact", delete_retention_ms=RETENTION_MS,
                index_interval_bytes=100, retention_ms=None)
    base.update(changes)
    return LogConfig(**base)


def write(log: Log, records: list[tuple[bytes, bytes | None]], clock: ManualClock,
          compression: int = Compression.NONE) -> list[Written]:
    batch = build_batch([(k, v, (), clock.ms) for k, v in records], compression=compression)
    info = log.append(batch)
    written_at(log, clock)
    return [Written(info.first_offset + i, k, v, clock.ms) for i, (k, v) in enumerate(records)]


def written_at(log: Log, clock: ManualClock) -> None:
    """Date the active segment's last write by ``clock``, as the system's clock dates it in
    a broker (the cleaner keeps a tombstone for delete.retention.ms after its segment's
    last write)."""
    path = layout.log_file(log.directory, log.active_segment.base_offset)
    os.utime(path, (clock(), clock()))


def read_all(log: Log) -> tuple[list[Written], list]:
    """Every record from the log start, and every batch header; checks CRCs (two
    decoders) and that batches follow each other without gaps or overlaps."""
    records, headers = [], []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        with log.read(offset, 1 << 20).region as region:
            data = region.read_bytes()
        position = 0
        while position < len(data):
            header = read_batch_header(data, position)
            batch = data[position:position + header.size]
            assert DefaultRecordBatch(bytearray(batch)).validate_crc()
            decoded = decode_batch(batch)
            assert header.base_offset == (headers[-1].next_offset if headers else log.log_start_offset)
            headers.append(header)
            records += [Written(r.offset, r.key, r.value, r.timestamp) for r in decoded.records]
            position += header.size
            offset = header.next_offset
    offsets = [r.offset for r in records]
    assert offsets == sorted(set(offsets)), "offsets must increase"
    return records, headers


def expected_after_cleaning(written: list[Written], cleaned_below: int, now_ms: int) -> list[Written]:
    """The model: the last record of each key below ``cleaned_below`` (minus expired
    tombstones), then everything at or above it as written."""
    last: dict[bytes, Written] = {}
    for record in written:
        if record.offset < cleaned_below and record.key is not None:
            last[record.key] = record
    kept = [r for r in last.values()
            if r.value is not None or r.timestamp >= now_ms - RETENTION_MS]
    return sorted(kept, key=lambda r: r.offset) + [r for r in written if r.offset >= cleaned_below]


def clean_fully(log: Log, now_ms: int, first_dirty: int = 0) -> int:
    return Cleaner(dedupe_buffer_bytes=16 << 20).clean(log, first_dirty, now_ms).end


# -- the model test ---------------------------------------------------------------------------

update = st.tuples(st.sampled_from(KEYS),
                   st.one_of(st.none(), st.binary(min_size=1, max_size=40)))
round_of_writes = st.lists(st.lists(update, min_size=1, max_size=6), min_size=1, max_size=25)


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rounds=st.lists(st.tuples(round_of_writes, st.booleans(), st.sampled_from([0, 1, 4])),
                       min_size=1, max_size=3))
def test_compacted_log_reads_as_the_model(tmp_path_factory, rounds):
    directory = tmp_path_factory.mktemp("cleaner") / "t-0"
    clock = ManualClock()
    log = Log.open(directory, compact_config(), clock)
    written: list[Written] = []
    first_dirty = 0
    for batches, let_tombstones_expire, compression in rounds:
        for records in batches:
            written += write(log, records, clock, compression)
            clock.advance(ms=10)
        log.roll()
        written += write(log, [(KEYS[0], b"in the active segment")], clock)
        if let_tombstones_expire:
            clock.advance(ms=RETENTION_MS + 1000)
        active = log.active_segment
        active_files = {p: p.read_bytes() for p in (layout.log_file(directory, active.base_offset),)}
        before_end = log.log_end_offset
        first_dirty = clean_fully(log, clock.ms, first_dirty)
        assert first_dirty == active.base_offset
        records, _ = read_all(log)
        expected = expected_after_cleaning(written, active.base_offset, clock.ms)
        assert records == expected
        assert log.log_end_offset == before_end
        assert log.active_segment is active
        assert {p: p.read_bytes() for p in active_files} == active_files
        # The model now is what the log holds.
        written = records
    log.close()
    reopened = Log.open(directory, compact_config(), clock)
    assert read_all(reopened)[0] == written
    reopened.close()


def test_a_tombstone_stays_for_the_retention_after_it_was_written_whatever_its_timestamp(
        tmp_path, clock):
    """A delete replayed or mirrored with a CreateTime days old is still there for a reader
    that is behind: delete.retention.ms counts from when the log took it."""
    log = Log.open(tmp_path / "t-0", compact_config(), clock)
    days_ago = clock.ms - 3 * 86_400_000
    log.append(build_batch([(KEYS[0], b"set", (), days_ago)]))
    log.append(build_batch([(KEYS[0], None, (), days_ago)]))
    written_at(log, clock)
    log.roll()
    write(log, [(KEYS[1], b"in the active segment")], clock)
    clean_fully(log, clock.ms)
    assert [(r.key, r.value) for r in read_all(log)[0]] == [
        (KEYS[0], None), (KEYS[1], b"in the active segment")]
    clock.advance(ms=RETENTION_MS + 1000)
    clean_fully(log, clock.ms)  # the cleaned segment kept its time of writing
    assert [(r.key, r.value) for r in read_all(log)[0]] == [(KEYS[1], b"in the active segment")]
    log.close()


def test_cleaning_groups_small_segments_and_keeps_offsets(tmp_path, clock):
    log = Log.open(tmp_path / "t-0", compact_config(segment_bytes=400), clock)
    written = []
    for i in range(60):
        written += write(log, [(KEYS[i % 3], f"v{i}".encode())], clock)
    log.roll()
    before = len(log.segments)
    clean_fully(log, clock.ms)  # one pass: segments join while the cleaned output fits
    records, headers = read_all(log)
    assert [(r.key, r.value) for r in records] == [(KEYS[0], b"v57"), (KEYS[1], b"v58"), (KEYS[2], b"v59")]
    assert [r.offset for r in records] == [57, 58, 59]
    assert before > 5 and len(log.segments) == 2  # one cleaned segment, the active one
    assert log.segments[0].base_offset == 0 and headers[0].base_offset == 0
    log.close()


def test_a_small_offset_map_cleans_in_several_passes(tmp_path, clock):
    log = Log.open(tmp_path / "t-0", compact_config(segment_bytes=2000), clock)
    written = []
    for i in range(200):
        written += write(log, [(f"k{i % 50}".encode(), f"v{i}".encode())], clock)
    log.roll()
    cleaner = Cleaner(dedupe_buffer_bytes=20 * 110)  # about 20 keys per pass
    first_dirty, passes = 0, 0
    while first_dirty < log.active_segment.base_offset:
        first_dirty = cleaner.clean(log, first_dirty, clock.ms).end
        passes += 1
        records, _ = read_all(log)
        by_offset = {w.offset: w for w in written}
        assert all(by_offset[r.offset] == r for r in records)
    assert passes > 1
    assert read_all(log)[0] == expected_after_cleaning(written, log.active_segment.base_offset, clock.ms)
    log.close()


def test_min_compaction_lag_keeps_recent_segments_dirty(tmp_path, clock):
    log = Log.open(tmp_path / "t-0", compact_config(min_compaction_lag_ms=5000), clock)
    written = []
    for i in range(40):
        written += write(log, [(KEYS[0], f"v{i}".encode())], clock)
    log.roll()
    end = clean_fully(log, clock.ms)
    assert end == 0 and read_all(log)[0] == written
    clock.advance(ms=6000)
    end = clean_fully(log, clock.ms)
    assert end == log.active_segment.base_offset
    assert [r.value for r in read_all(log)[0]] == [b"v39"]
    log.close()


def test_control_batches_are_kept(tmp_path, clock):
    log = Log.open(tmp_path / "t-0", compact_config(), clock)
    write(log, [(KEYS[0], b"a")], clock)
    log.append_marker(producer_id=7, producer_epoch=0, commit=True, coordinator_epoch=0)
    write(log, [(KEYS[0], b"b")], clock)
    log.roll()
    clean_fully(log, clock.ms)
    _, headers = read_all(log)
    assert any(h.is_control for h in headers)
    log.close()


def test_cleaned_segments_stay_within_segment_bytes(tmp_path, clock):
    log = Log.open(tmp_path / "t-0", compact_config(segment_bytes=400), clock)
    written = []
    for i in range(60):  # every key once: nothing to drop
        written += write(log, [(f"k{i}".encode(), b"v")], clock)
    log.roll()
    before = [s.size for s in log.segments]
    clean_fully(log, clock.ms)
    assert [s.size for s in log.segments] == before
    assert read_all(log)[0] == written
    log.close()


def test_keyless_records_are_refused_by_a_compacted_log(tmp_path, clock):
    log = Log.open(tmp_path / "t-0", compact_config(), clock)
    with pytest.raises(InvalidRecordError):
        log.append(build_batch([(b"k", b"v", (), 0), (None, b"v", (), 0)]))
    assert log.log_end_offset == 0
    plain = Log.open(tmp_path / "u-0", LogConfig(), clock)
    plain.append(build_batch([(None, b"v", (), 0)]))
    log.close()
    plain.close()


def test_a_follower_accepts_compacted_batches(tmp_path, clock):
    leader = Log.open(tmp_path / "t-0", compact_config(), clock)
    for i in range(30):
        write(leader, [(KEYS[i % 2], f"v{i}".encode()), (KEYS[2], b"x")], clock)
    leader.roll()
    clean_fully(leader, clock.ms)
    follower = Log.open(tmp_path / "f-0", compact_config(), clock)
    offset = 0
    while offset < leader.log_end_offset:
        with leader.read(offset, 1 << 20).region as region:
            follower.append_as_follower(region.read_bytes())
        offset = follower.log_end_offset
    assert read_all(follower)[0] == read_all(leader)[0]
    leader.close()
    follower.close()


def test_retention_does_not_delete_compacted_segments_by_time(tmp_path, clock):
    log = Log.open(tmp_path / "t-0", compact_config(retention_ms=1000), clock)
    for i in range(40):
        write(log, [(KEYS[i % 4], b"v")], clock)
    log.roll()
    clock.advance(ms=10_000)
    assert log.delete_old_segments() == 0
    log.update_config(compact_config(retention_ms=1000, cleanup_policy="compact,delete"))
    assert log.delete_old_segments() > 0
    log.close()


# -- crash safety -----------------------------------------------------------------------------

class Crash(Exception):
    """Stands for a SIGKILL at this point."""


def _filled_log(directory: Path, clock: ManualClock) -> tuple[Log, list[Written]]:
    log = Log.open(directory, compact_config(), clock)
    written = []
    for i in range(80):
        written += write(log, [(KEYS[i % 5], f"v{i}".encode()), (KEYS[5 + i % 3], None)], clock)
    log.roll()
    return log, written


def _partial_cleaned_to_swap(directory, base):
    index, time_index, _ = swap.segment_paths(directory, base, layout.CLEANED_SUFFIX)
    os.replace(index, str(index)[:-len(layout.CLEANED_SUFFIX)] + layout.SWAP_SUFFIX)
    raise Crash


def _partial_swap_to_final(directory, base):
    index = swap.segment_paths(directory, base, layout.SWAP_SUFFIX)[0]
    os.replace(index, swap.segment_paths(directory, base)[0])
    raise Crash


def _raise(*_args, **_kwargs):
    raise Crash


CRASH_POINTS = {
    # point: (what to patch, replacement, whether the first group's swap completes)
    "while writing": ("pylog.records.filtering.retain_records", _raise, False),
    "before the swap rename": ("pylog.log.swap.cleaned_to_swap", _raise, False),
    "during the swap rename": ("pylog.log.swap.cleaned_to_swap", _partial_cleaned_to_swap, False),
    "after the originals went": ("pylog.log.swap.swap_to_final", _raise, True),
    "during the final rename": ("pylog.log.swap.swap_to_final", _partial_swap_to_final, True),
}


@pytest.mark.parametrize("point", list(CRASH_POINTS))
def test_a_crash_during_the_swap_loses_nothing(tmp_path, clock, monkeypatch, point):
    directory = tmp_path / "t-0"
    log, written = _filled_log(directory, clock)
    target, replacement, completes = CRASH_POINTS[point]
    monkeypatch.setattr("pylog.log.swap.discard_cleaned", lambda *a: None)  # a crash cleans nothing
    if target.startswith("pylog.records"):
        monkeypatch.setattr("pylog.log.cleaner.retain_records", replacement)
    else:
        monkeypatch.setattr(target, replacement)
    with pytest.raises(Crash):
        clean_fully(log, clock.ms)
    monkeypatch.undo()
    leftovers = [p.name for p in directory.iterdir()
                 if p.name.endswith((layout.CLEANED_SUFFIX, layout.SWAP_SUFFIX))]
    assert leftovers
    reopened = Log.open(directory, compact_config(), clock)  # unclean: recovery runs
    assert not [p for p in directory.iterdir()
                if p.name.endswith((layout.CLEANED_SUFFIX, layout.SWAP_SUFFIX))]
    records, _ = read_all(reopened)
    by_offset = {w.offset: w for w in written}
    assert all(by_offset[r.offset] == r for r in records)
    # Every key's newest record survives, whatever was swapped in.
    newest = {w.key: w for w in written}
    assert set(newest.values()) <= set(records)
    if not completes:
        assert records == written
    else:
        assert len(records) < len(written)
    # And the log can be cleaned to the model afterwards.
    clean_fully(reopened, clock.ms)
    assert read_all(reopened)[0] == expected_after_cleaning(
        written, reopened.active_segment.base_offset, clock.ms)
    reopened.close()


# -- the cleaner thread and its checkpoint ----------------------------------------------------

def test_log_manager_cleans_compacted_logs_and_checkpoints(tmp_path, clock):
    manager = LogManager([tmp_path], LogConfig(), clock,
                         cleaner_config=CleanerConfig(threads=1, backoff_ms=10, dedupe_buffer_size=1 << 20))
    manager.load()
    log = manager.get_or_create("compacted", 0, compact_config(min_cleanable_dirty_ratio=0.1))
    plain = manager.get_or_create("plain", 0, LogConfig(segment_bytes=600))
    written = []
    for i in range(50):
        written += write(log, [(KEYS[i % 4], f"v{i}".encode())], clock)
        write(plain, [(KEYS[i % 4], b"v")], clock)
    log.roll()
    plain.roll()
    plain_size = plain.size_bytes
    result = manager.cleaner.clean_once()
    assert result is not None and result.end == log.active_segment.base_offset
    assert manager.cleaner.clean_once() is None  # nothing dirty any more; the plain log is never cleaned
    assert plain.size_bytes == plain_size
    checkpoint = (tmp_path / layout.CLEANER_OFFSET_CHECKPOINT).read_text().split("\n")
    assert checkpoint[:3] == ["0", "1", f"compacted 0 {result.end}"]
    manager.close()
    again = LogManager([tmp_path], LogConfig(), clock)
    again.load()
    assert again.cleaner.first_dirty(TopicPartition("compacted", 0), tmp_path) == result.end
    again.close()


def test_max_compaction_lag_rolls_and_cleans_a_log_below_its_dirty_ratio(tmp_path, clock):
    manager = LogManager([tmp_path], LogConfig(), clock,
                         cleaner_config=CleanerConfig(threads=1, backoff_ms=10, dedupe_buffer_size=1 << 20))
    manager.load()
    log = manager.get_or_create("lagged", 0, compact_config(
        segment_bytes=1 << 20, min_cleanable_dirty_ratio=0.9, max_compaction_lag_ms=60_000))
    written = []
    for i in range(40):
        written += write(log, [(KEYS[i % 4], f"v{i}".encode())], clock)
    log.roll()
    assert manager.cleaner.clean_once() is not None  # nothing clean yet: the ratio is 1
    # A little more, rolled: a dirty ratio far below 0.9, so it waits...
    for i in range(40, 44):
        written += write(log, [(KEYS[i % 4], f"v{i}".encode())], clock)
    log.roll()
    clock.advance(ms=30_000)
    assert manager.cleaner.clean_once() is None
    # ...until max.compaction.lag.ms has passed since its first record.
    clock.advance(ms=30_010)
    assert manager.cleaner.clean_once() is not None
    assert read_all(log)[0] == expected_after_cleaning(written, log.active_segment.base_offset,
                                                       clock.ms)
    # The active segment rolls once its first record is max.compaction.lag.ms old, even
    # though segment.ms (7 days) is far off: its records must become cleanable.
    active = log.active_segment.base_offset
    written += write(log, [(KEYS[0], b"young")], clock)
    assert log.active_segment.base_offset == active
    clock.advance(ms=60_010)
    written += write(log, [(KEYS[0], b"next")], clock)
    assert log.active_segment.base_offset == written[-1].offset
    manager.close()


def test_max_compaction_lag_below_the_min_is_refused():
    with pytest.raises(ConfigError, match="max.compaction.lag.ms"):
        LogConfig().with_overrides({"min.compaction.lag.ms": "5000",
                                    "max.compaction.lag.ms": "1000"})
