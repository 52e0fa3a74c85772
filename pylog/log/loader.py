"""Opening a partition directory: find the segments, load or recover them.

After a clean shutdown each segment is loaded quickly (indexes checked against the log).
After an unclean one, every segment from the one holding the recovery point onwards is
re-validated batch by batch (length, CRC, contiguous offsets) and its indexes rebuilt;
the log is cut at the first invalid batch and any later segments are deleted. A segment
whose index is missing or corrupt is recovered the same way whatever the shutdown was.

A crash in the middle of swapping cleaned segments in (compacted topics) is completed or
undone first, as :mod:`pylog.log.swap` describes.

The leader epoch cache is read from ``leader-epoch-checkpoint``; when that file is missing
or unreadable it is rebuilt from the batch headers (:func:`load_leader_epochs`).

The producer state comes from the newest snapshot at or below the log end plus the batch
headers after it (:func:`load_producer_state`); snapshots above the log end are deleted.
Transaction markers are read as they are replayed (only control batches are decoded), and
the aborted-transaction index of every re-validated segment is rebuilt from them: the
replay then starts from a snapshot at or below the first such segment.
"""

from __future__ import annotations

import bisect
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from pylog.errors import CorruptRecordError
from pylog.log import layout
from pylog.log.config import MAX_SEGMENT_BYTES, LogConfig
from pylog.log.index import CorruptIndexError
from pylog.log.leader_epoch import LeaderEpochCache, epochs_from_headers, read_epoch_checkpoint
from pylog.log.producer_snapshot import delete_snapshots, load_latest_snapshot
from pylog.log.producer_state import CompletedTxn, ProducerStateManager
from pylog.log.segment import LogSegment
from pylog.log.swap import recover_swaps
from pylog.log.transaction_index import AbortedTxn
from pylog.records.control import read_marker
from pylog.records.header import BatchHeader

log = logging.getLogger(__name__)

# Recovery accepts any batch that fits a segment: batches accepted under an older, larger
# max_batch_size must survive a restart with a smaller one.
RECOVERY_MAX_BATCH = MAX_SEGMENT_BYTES


@dataclass(frozen=True, slots=True)
class LoadedSegments:
    segments: list[LogSegment]
    bytes_truncated: int
    recovered: list[LogSegment]  # segments re-validated (their data needs an fsync)


def _segment_bases(directory: Path) -> list[int]:
    """Base offsets of the ``.log`` files; leftovers (temp files, orphan indexes) removed."""
    logs, others = set(), []
    for path in directory.iterdir():
        if path.name.endswith(layout.TEMP_SUFFIX):
            path.unlink()
            continue
        parsed = layout.parse_segment_file(path.name)
        if parsed is None:
            continue
        if parsed[1] == layout.LOG_SUFFIX:
            logs.add(parsed[0])
        else:
            others.append((parsed[0], path))
    for base, path in others:
        if base not in logs:
            log.warning("%s: removing index without a log file", path)
            path.unlink()
    return sorted(logs)


def load_segments(directory: Path, config: LogConfig, now_ms: int, *, recovery_point: int,
                  had_clean_shutdown: bool, log_start_offset: int) -> LoadedSegments:
    """Open every segment in ``directory`` (creating the first if there is none)."""
    directory.mkdir(parents=True, exist_ok=True)
    recover_swaps(directory)
    bases = _segment_bases(directory)
    recover_from = len(bases) if had_clean_shutdown else max(0, bisect.bisect_right(bases, recovery_point) - 1)
    segments: list[LogSegment] = []
    recovered: list[LogSegment] = []
    truncated = 0
    for i, base in enumerate(bases):
        indexes_present = (layout.index_file(directory, base).exists()
                           and layout.time_index_file(directory, base).exists())
        segment = LogSegment.open(directory, base, config, created_ms=now_ms, active=False)
        if segments and base != segments[-1].next_offset:
            log.warning("%s: segment %d does not follow offset %d; deleting it and later segments",
                        directory, base, segments[-1].next_offset)
            truncated += _delete_all([segment] + _open_rest(directory, bases[i + 1:], config, now_ms))
            break
        cut = 0
        if i >= recover_from or not indexes_present:
            cut = _recover(segment)
            recovered.append(segment)
        else:
            try:
                segment.load()
            except (CorruptIndexError, CorruptRecordError) as exc:
                log.warning("%s: rebuilding indexes (%s)", directory, exc)
                cut = _recover(segment)
                recovered.append(segment)
        truncated += cut
        segments.append(segment)
        if cut and i + 1 < len(bases):
            log.warning("%s: segment %d was truncated; deleting the %d later segments",
                        directory, base, len(bases) - i - 1)
            truncated += _delete_all(_open_rest(directory, bases[i + 1:], config, now_ms))
            break
    if not segments:
        segments.append(LogSegment.open(directory, log_start_offset, config, created_ms=now_ms,
                                        active=True, fresh=True))
    for segment in segments[:-1]:
        segment.seal()
    segments[-1].make_active()
    return LoadedSegments(segments, truncated, recovered)


def _recover(segment: LogSegment) -> int:
    """Re-validate a segment; its transaction index is emptied, for
    :func:`load_producer_state` to rebuild from the markers."""
    segment.txn_index.reset()
    return segment.recover(RECOVERY_MAX_BATCH)


def _open_rest(directory: Path, bases: list[int], config: LogConfig, now_ms: int) -> list[LogSegment]:
    return [LogSegment.open(directory, b, config, created_ms=now_ms, active=False) for b in bases]


def _delete_all(segments: list[LogSegment]) -> int:
    size = 0
    for segment in segments:
        size += segment.size
        segment.delete()
    return size


def load_leader_epochs(directory: Path, segments: list[LogSegment]) -> LeaderEpochCache:
    """The partition's leader epoch cache, rebuilt from the ``partitionLeaderEpoch`` of
    every batch header (headers only, no records) and written out if its file is missing
    or unreadable. The caller trims it to the log's offsets."""
    path = directory / layout.LEADER_EPOCH_CHECKPOINT
    cache = read_epoch_checkpoint(path)
    if cache is None:
        cache = LeaderEpochCache(path, epochs_from_headers(_all_headers(directory, segments)))
        cache.flush()
        if cache.entries:
            log.info("%s: rebuilt the leader epoch cache from batch headers: %s", directory, cache)
    return cache


def _all_headers(directory: Path, segments: list[LogSegment]) -> Iterator[BatchHeader]:
    """Every batch header in offset order; stops (with a warning) at one that cannot be read."""
    try:
        for segment in segments:
            for _, header in segment.records.headers():
                yield header
    except CorruptRecordError as exc:
        log.warning("%s: leader epochs rebuilt only up to a bad batch: %s", directory, exc)


def load_producer_state(directory: Path, segments: list[LogSegment],
                        rebuild_txn_index: frozenset[int] = frozenset()) -> ProducerStateManager:
    """The producer state of the whole log: the newest snapshot at or below the log end,
    then every batch header after it (headers only; markers are decoded). Snapshots above
    the end, left by a truncation or a crash, are deleted first.

    ``rebuild_txn_index`` holds the base offsets of the re-validated segments, whose
    transaction indexes were emptied: the replay then starts at or below the first of
    them and adds an entry to their indexes for each ABORT marker in them."""
    end = segments[-1].next_offset
    delete_snapshots(directory, above=end)
    up_to = min(end, min(rebuild_txn_index, default=end))
    loaded = load_latest_snapshot(directory, up_to)
    start, state = loaded if loaded is not None else (segments[0].base_offset, ProducerStateManager())
    if start >= end:
        return state
    first = max(0, bisect.bisect_right([s.base_offset for s in segments], start) - 1)
    try:
        for segment in segments[first:]:
            rebuild = segment.base_offset in rebuild_txn_index
            for position, header in segment.records.headers():
                if header.base_offset < start or header.producer_id < 0:
                    continue
                if not header.is_control:
                    state.apply(header, header.base_offset)
                    continue
                completed = replay_marker(state, segment.records.read(position, header.size), 0, header)
                if rebuild and completed is not None and completed.aborted:
                    segment.txn_index.append(aborted_entry(completed))
    except CorruptRecordError as exc:
        log.warning("%s: producer state rebuilt only up to a bad batch: %s", directory, exc)
    return state


def replay_marker(state: ProducerStateManager, buf: bytes | bytearray | memoryview, pos: int,
                  header: BatchHeader) -> CompletedTxn | None:
    """Apply the written control batch at ``buf[pos:]`` (unchecked, as a follower does);
    None if it is not a transaction marker."""
    try:
        marker = read_marker(buf, pos, header)
    except CorruptRecordError as exc:
        log.debug("control batch at offset %d is not a transaction marker: %s", header.base_offset, exc)
        return None
    return state.complete_txn(header.producer_id, header.producer_epoch, marker,
                              header.base_offset, header.max_timestamp)


def aborted_entry(completed: CompletedTxn) -> AbortedTxn:
    return AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset,
                      completed.last_stable_offset)
