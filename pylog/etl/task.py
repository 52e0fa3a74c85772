"""The map task: load one offset range of one partition into the table.

Runs on an executor and imports only pylog and pyarrow. Steps: skip if the range's done
marker exists; for a scheduled load, refuse a stale plan (another run committed since
it was planned: the commit would refuse it anyway); fetch ``[start, end)`` by offset
through ``SimpleConsumer`` (which finds the partition's current leader from metadata);
decode each fetch in bulk; write Parquet per table partition under the range's
deterministic names, in the run's staging directory (the commit publishes them, so
readers never see an uncommitted run); write the done marker with the counts. Records
are counted as they are read: offsets have gaps.
"""

from __future__ import annotations

import bisect
import time
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from pylog.client import OffsetOutOfRange, SimpleConsumer
from pylog.client.cache import shared_consumer
from pylog.etl import faults
from pylog.etl.config import SourceConfig, TopicConfig
from pylog.etl.decode import QUARANTINE_SCHEMA, DecodedRows, decode_records, table_schema
from pylog.etl.errors import LoaderError, RetentionGapError
from pylog.etl.freshness import check_fresh
from pylog.etl.fs import Storage
from pylog.etl.layout import staging_root
from pylog.etl.model import BACKFILL, OffsetGap, TaskDoneMarker, TaskRange
from pylog.etl.state import StateStore
from pylog.etl.writer import in_window, write_partitioned
from pylog.records import decode_columns

EMPTY_FETCH_RETRIES = 20


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """Everything a map task needs; pickled to the executor."""

    run_id: str
    kind: str
    index: int
    range: TaskRange
    topic: TopicConfig
    source: SourceConfig
    warehouse_uri: str
    state_uri: str
    window_ms: tuple[int, int] | None = None
    fault: str | None = None


@dataclass
class _Fetched:
    parts: list[DecodedRows]
    records: int = 0
    bytes: int = 0
    next_offset: int = 0


def run_task(spec: TaskSpec, attempt: int = 0) -> TaskDoneMarker:
    """Load ``spec.range``; returns its done marker (the existing one if already done)."""
    state = StateStore(spec.state_uri)
    table = spec.topic.table
    existing = state.read_marker(table, spec.run_id, spec.range)
    if existing is not None:
        return existing
    if spec.kind != BACKFILL:  # a stale plan never commits: do not load it
        plan = state.read_plan(table, spec.run_id)
        if plan is not None:
            check_fresh(plan, state.offsets_snapshot(table))
    faults.stall_task(spec.fault, spec.index)
    started = time.monotonic()
    gaps: list[OffsetGap] = []
    # read_committed: records of aborted transactions never reach the table, and the
    # driver planned the range to the last stable offset.
    # One consumer per executor process, shared by its tasks (connections and metadata
    # outlive the task); close() on it is a no-op.
    consumer = shared_consumer(list(spec.source.bootstrap_servers),
                               client_id=spec.source.client_id,
                               request_timeout_ms=spec.source.request_timeout_ms,
                               isolation_level="read_committed")
    try:
        fetched = _fetch_range(spec, consumer, gaps)
    finally:
        consumer.close()
    rows, event_ms, quarantine = _combine(spec, fetched.parts)
    files = _write(spec, rows, event_ms, quarantine)
    faults.fail_attempt(spec.fault, attempt, spec.index, spec.range.name)
    marker = TaskDoneMarker(
        range=spec.range, next_offset=fetched.next_offset, records_fetched=fetched.records,
        rows_written=rows.num_rows, quarantined=quarantine.num_rows, bytes_fetched=fetched.bytes,
        bytes_written=sum(f.bytes for f in files), files=tuple(f.path for f in files),
        gaps=tuple(gaps), seconds=round(time.monotonic() - started, 3), attempt=attempt)
    state.write_marker(table, spec.run_id, marker)
    return marker


def _fetch_range(spec: TaskSpec, consumer: SimpleConsumer, gaps: list[OffsetGap]) -> _Fetched:
    r = spec.range
    fetched = _Fetched(parts=[], next_offset=r.start)
    offset, max_bytes, empty = r.start, spec.source.fetch_max_bytes, 0
    while offset < r.end:
        try:
            result = consumer.fetch_raw(r.topic, r.partition, offset, max_bytes=max_bytes, max_wait_ms=500)
        except OffsetOutOfRange as exc:
            offset = _skip_deleted(spec, offset, exc, gaps)
            continue
        columns = decode_columns(result.records, start_offset=offset)
        if columns.next_offset is None:
            empty += 1
            if empty > EMPTY_FETCH_RETRIES:
                raise LoaderError(
                    f"topic {r.topic} partition {r.partition}: no records at offset {offset} "
                    f"(high watermark {result.high_watermark}) though the plan reads to {r.end}")
            max_bytes = min(max_bytes * 2, 256 << 20)  # a batch larger than max_bytes
            time.sleep(min(0.05 * empty, 1.0))
            continue
        empty = 0
        if columns.next_offset <= offset:
            raise LoaderError(f"topic {r.topic} partition {r.partition}: fetch at offset {offset} "
                              f"returned batches ending at {columns.next_offset}")
        cut = bisect.bisect_left(columns.offsets, r.end)
        if cut:
            fetched.parts.append(decode_records(
                spec.topic, r.partition, columns.offsets[:cut], columns.timestamps[:cut],
                columns.keys[:cut], columns.values[:cut]))
        fetched.records += cut
        fetched.bytes += columns.bytes_consumed
        offset = columns.next_offset
    fetched.next_offset = offset
    return fetched


def _skip_deleted(spec: TaskSpec, offset: int, exc: OffsetOutOfRange, gaps: list[OffsetGap]) -> int:
    """Handle records retention deleted after planning: fail, or skip them and note the gap."""
    r = spec.range
    if exc.log_start_offset <= offset:
        raise LoaderError(f"topic {r.topic} partition {r.partition}: offset {offset} is out of range "
                          f"[{exc.log_start_offset}, {exc.high_watermark}); was the log truncated?")
    lost_end = min(exc.log_start_offset, r.end)
    if spec.topic.on_retention_gap == "fail":
        raise RetentionGapError(r.topic, r.partition, offset, exc.log_start_offset)
    gaps.append(OffsetGap(r.topic, r.partition, offset, lost_end, "deleted by retention"))
    return lost_end


def _combine(spec: TaskSpec, parts: list[DecodedRows]) -> tuple[pa.Table, pa.Array, pa.Table]:
    if parts:
        rows = pa.concat_tables([p.rows for p in parts])
        event_ms = pa.concat_arrays([p.event_ms for p in parts]) if rows.num_rows else pa.array([], pa.int64())
        quarantine = pa.concat_tables([p.quarantine for p in parts])
    else:
        rows = table_schema(spec.topic).empty_table()
        event_ms, quarantine = pa.array([], pa.int64()), QUARANTINE_SCHEMA.empty_table()
    if spec.window_ms is not None:
        keep = in_window(event_ms, spec.window_ms)
        rows, event_ms = rows.filter(keep), event_ms.filter(keep)
        q_ms = pc.cast(quarantine.column("_timestamp"), pa.int64()).combine_chunks()
        quarantine = quarantine.filter(in_window(q_ms, spec.window_ms))
    return rows, event_ms, quarantine


def _write(spec: TaskSpec, rows: pa.Table, event_ms: pa.Array, quarantine: pa.Table) -> list:
    """Write under the run's staging directory: the commit swaps (backfill) or publishes them."""
    warehouse = Storage.from_uri(spec.warehouse_uri)
    root = staging_root(warehouse, spec.run_id, spec.topic.table)
    q_root = staging_root(warehouse, spec.run_id, spec.topic.quarantine_table)
    files = write_partitioned(warehouse, root, rows, event_ms, spec.topic.partitioning, spec.range)
    q_ms = pc.cast(quarantine.column("_timestamp"), pa.int64()).combine_chunks()
    files += write_partitioned(warehouse, q_root, quarantine, q_ms, spec.topic.partitioning, spec.range)
    return files

