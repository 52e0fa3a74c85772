"""A backfill's commit: replace by offset range, then swap partition directories.

The backfill re-read offsets ``[start, end)`` of each partition (its task ranges, minus
what retention deleted under them). For every table partition (hour or day) in the
window, of the table and of its quarantine table, the new content is

    old rows whose (_partition, _offset) lies outside the re-read ranges
    + the rows the backfill wrote for that partition.

So every record is either re-read -- and the backfill decides: in the window it is
written once; out of the window its old copy lives in a partition outside the window,
which is untouched -- or not re-read, and its old copy is kept where it is. This holds
whatever the timestamps look like (CreateTime is not monotonic, events arrive late, the
broker may already have deleted records the table holds).

Steps, each safe to repeat until the journal exists:

1. per window partition, write the kept old rows into the run's staging directory next
   to the backfill's files (the old file's name, or ``kept-<name>`` if the backfill
   wrote a file of that name); files wholly kept are copied byte for byte;
2. write the swap journal (``runs/<run>/swap.json``), one entry per partition:
   ``[table, "replace" | "remove", "dt=...", "hr=..."]``;
3. per entry move the live directory to the run's trash, then (``replace``) the staged
   one into place. A rerun replays the journal: a ``replace`` whose staged directory is
   gone was done; a ``remove`` whose live directory is gone was done.
"""

from __future__ import annotations

from collections import defaultdict

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pylog.etl import faults
from pylog.etl.config import TopicConfig
from pylog.etl.fs import Storage
from pylog.etl.layout import (
    bucket_ms, partition_dirs, partition_parts, range_of_file, staging_root, table_root, trash_root)
from pylog.etl.model import TablePlan, TaskDoneMarker
from pylog.etl.state import StateStore
from pylog.etl.writer import parquet_bytes

REPLACE = "replace"
REMOVE = "remove"


def reread_ranges(markers: list[TaskDoneMarker]) -> dict[int, list[tuple[int, int]]]:
    """Per partition, the sorted, merged offset ranges the backfill's tasks read."""
    pieces: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for marker in markers:
        r = marker.range
        low = r.start
        for gap in sorted((g for g in marker.gaps if g.partition == r.partition), key=lambda g: g.start):
            if gap.start > low:
                pieces[r.partition].append((low, min(gap.start, r.end)))
            low = max(low, gap.end)
        if low < r.end:
            pieces[r.partition].append((low, r.end))
    merged: dict[int, list[tuple[int, int]]] = {}
    for partition, ranges in pieces.items():
        out: list[tuple[int, int]] = []
        for low, high in sorted(ranges):
            if out and low <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], high))
            else:
                out.append((low, high))
        merged[partition] = out
    return merged


def outside_mask(rows: pa.Table, topic: str, ranges: dict[int, list[tuple[int, int]]]) -> pa.BooleanArray:
    """True for rows of ``rows`` whose (_topic, _partition, _offset) the backfill did not re-read."""
    inside = pa.repeat(pa.scalar(False), rows.num_rows)
    partition, offset = rows.column("_partition"), rows.column("_offset")
    for p, spans in ranges.items():
        for low, high in spans:
            hit = pc.and_(pc.equal(partition, p),
                          pc.and_(pc.greater_equal(offset, low), pc.less(offset, high)))
            inside = pc.or_(inside, hit)
    inside = pc.and_(inside, pc.equal(rows.column("_topic"), topic))
    return pc.invert(pc.fill_null(inside, False))


def replace_partitions(state: StateStore, warehouse: Storage, plan: TablePlan, config: TopicConfig,
                       markers: list[TaskDoneMarker], fault: str | None) -> list[str]:
    """Merge and swap the window's partitions (idempotent); returns them as audit strings."""
    journal = state.read_swap(plan.table, plan.run_id)
    if journal is None:
        ranges = reread_ranges(markers)
        journal = []
        for table in (plan.table, config.quarantine_table):
            for parts in _window_partitions(warehouse, plan, config, table):
                action = _stage_kept_rows(warehouse, plan, table, parts, ranges)
                if action is not None:
                    journal.append([table, action, *parts])
        faults.fail_at("before_swap_journal", fault)  # test-only: the merge is redone
        state.write_swap(plan.table, plan.run_id, journal)
    entries = [_entry(raw) for raw in journal]
    for table, action, parts in entries:
        _swap_one(warehouse, plan.run_id, table, action, parts)
        faults.fail_at("mid_swap", fault)
    # Hive partition specs for the audit, e.g. "page_views dt=2026-11-20/hr=07".
    return [f"{table} {'/'.join(parts)}" for table, _, parts in entries]


def _entry(raw: list[str]) -> tuple[str, str, tuple[str, ...]]:
    if raw[1] in (REPLACE, REMOVE):
        return raw[0], raw[1], tuple(raw[2:])
    return raw[0], REPLACE, tuple(raw[1:])  # journals written before entries named their action


def _window_partitions(warehouse: Storage, plan: TablePlan, config: TopicConfig,
                       table: str) -> list[tuple[str, ...]]:
    """Every partition of the window that is live or staged for ``table``."""
    width = bucket_ms(config.partitioning)
    found = []
    for bucket in range(plan.window_ms[0], plan.window_ms[1], width):
        parts = partition_parts(bucket, config.partitioning)
        for root in (table_root(warehouse, table), staging_root(warehouse, plan.run_id, table)):
            if _data_files(warehouse, warehouse.child(root, *parts)):
                found.append(parts)
                break
    staged = staging_root(warehouse, plan.run_id, table)
    for parts in partition_dirs(warehouse, staged):  # the tasks keep rows in the window only
        if parts not in found and _data_files(warehouse, warehouse.child(staged, *parts)):
            found.append(parts)
    return found


def _stage_kept_rows(warehouse: Storage, plan: TablePlan, table: str, parts: tuple[str, ...],
                     ranges: dict[int, list[tuple[int, int]]]) -> str | None:
    """Write the live partition's rows the backfill did not re-read next to its staged files.

    Returns the journal action for the partition, or None when there is nothing to do.
    """
    live = warehouse.child(table_root(warehouse, table), *parts)
    staged = warehouse.child(staging_root(warehouse, plan.run_id, table), *parts)
    # The backfill's own files are named after its ranges; other staged files are kept rows
    # written by an earlier attempt of this step, which this one rewrites the same way.
    ours = {r.name for r in plan.ranges}
    staged_names = {n for n in _data_files(warehouse, staged) if range_of_file(n) in ours}
    new_names = set(staged_names)
    live_names = _data_files(warehouse, live)
    for name in live_names:
        data = warehouse.read_bytes(warehouse.child(live, name))
        rows = pq.read_table(pa.BufferReader(data))
        keep = outside_mask(rows, plan.topic, ranges)
        kept = rows.filter(keep)
        if kept.num_rows == 0:
            continue
        target = name if name not in staged_names else f"kept-{name}"
        if kept.num_rows < rows.num_rows:
            data = parquet_bytes(kept)
        warehouse.write_atomic(warehouse.child(staged, target), data)
        new_names.add(target)
    if new_names:
        return REPLACE
    return REMOVE if live_names or warehouse.exists(live) else None


def _swap_one(warehouse: Storage, run_id: str, table: str, action: str, parts: tuple[str, ...]) -> None:
    staged = warehouse.child(staging_root(warehouse, run_id, table), *parts)
    live = warehouse.child(table_root(warehouse, table), *parts)
    trash = warehouse.child(trash_root(warehouse, run_id, table), *parts)
    if action == REPLACE and not warehouse.exists(staged):
        return  # swapped before a crash
    if warehouse.exists(live):
        warehouse.delete(trash)
        warehouse.move(live, trash)
    if action == REPLACE:
        warehouse.move(staged, live)
    elif len(parts) > 1:
        day = warehouse.parent(live)
        if warehouse.exists(day) and not warehouse.list_dir(day):
            warehouse.delete(day)


def _data_files(warehouse: Storage, directory: str) -> list[str]:
    return [n for n in warehouse.list_dir(directory)
            if n.endswith(".parquet") and not n.startswith((".", "_"))]
