"""The map task: load one offset range of one partition into the table.

Runs on an executor and imports only pylog and pyarrow. Steps: skip if the range's done
marker exists; for a scheduled load, refuse a stale plan (another run committed since
it was planned: the commit would refuse it anyway); fetch ``[start, end)`` by offset
through ``SimpleConsumer`` (which finds the partition's current leader from metadata),
the next fetch in flight while the last one is decoded; decode each fetch in bulk and
stream the rows into Parquet per table partition under the range's deterministic names
(:mod:`pylog.etl.writer`: row groups of ``row_group_mb``, files of ``target_file_mb``,
so memory stays bounded whatever the range), in the run's staging directory (the commit
publishes them, so readers never see an uncommitted run); write the done marker with
the counts. Records are counted as they are read: offsets have gaps.
"""

from __future__ import annotations

import bisect
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

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
from pylog.etl.source import resolve_source
from pylog.etl.state import StateStore
from pylog.etl.writer import MB, PartitionedWriter, WrittenFile, in_window, remove_range_files
from pylog.records import decode_columns
from pylog.records.batch import next_offset_after

EMPTY_FETCH_RETRIES = 20
FIRST_FETCH_BYTES = 256 << 10
MIN_FETCH_BYTES = 64 << 10


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
    # The spec holds the source's secret references only: this executor reads them itself.
    servers, settings = resolve_source(spec.source).client_arguments(spec.source)
    consumer = shared_consumer(servers, **settings, isolation_level="read_committed")
    output = _TaskOutput(spec)
    try:
        fetched = _fetch_range(spec, consumer, gaps, output.add)
        files = output.close()
    except BaseException:
        output.abort()
        raise
    finally:
        consumer.close()
    faults.fail_attempt(spec.fault, attempt, spec.index, spec.range.name)
    marker = TaskDoneMarker(
        range=spec.range, next_offset=fetched.next_offset, records_fetched=fetched.records,
        rows_written=output.rows.rows, quarantined=output.quarantine.rows, bytes_fetched=fetched.bytes,
        bytes_written=sum(f.bytes for f in files), files=tuple(f.path for f in files),
        gaps=tuple(gaps), seconds=round(time.monotonic() - started, 3), attempt=attempt)
    state.write_marker(table, spec.run_id, marker)
    return marker


class _TaskOutput:
    """The task's rows and quarantined rows, streamed into the run's staging directory (the
    commit publishes or swaps them in). Rows outside a backfill's window are dropped."""

    def __init__(self, spec: TaskSpec) -> None:
        self.window_ms = spec.window_ms
        warehouse = Storage.from_uri(spec.warehouse_uri)
        sizes = {"target_file_bytes": int(spec.topic.target_file_mb * MB),
                 "row_group_bytes": int(spec.topic.row_group_mb * MB)}
        outputs = []
        for name, schema in ((spec.topic.table, table_schema(spec.topic)),
                             (spec.topic.quarantine_table, QUARANTINE_SCHEMA)):
            root = staging_root(warehouse, spec.run_id, name)
            # An earlier attempt of this range may have split its rows differently.
            remove_range_files(warehouse, root, spec.range)
            outputs.append(PartitionedWriter(warehouse, root, schema, spec.topic.partitioning,
                                             spec.range, **sizes))
        self.rows, self.quarantine = outputs

    def add(self, decoded: DecodedRows) -> None:
        rows, event_ms, quarantine = decoded.rows, decoded.event_ms, decoded.quarantine
        q_ms = pc.cast(quarantine.column("_timestamp"), pa.int64()).combine_chunks()
        if self.window_ms is not None:
            keep = in_window(event_ms, self.window_ms)
            rows, event_ms = rows.filter(keep), event_ms.filter(keep)
            keep = in_window(q_ms, self.window_ms)
            quarantine, q_ms = quarantine.filter(keep), q_ms.filter(keep)
        self.rows.add(rows, event_ms)
        self.quarantine.add(quarantine, q_ms)

    def close(self) -> list[WrittenFile]:
        return self.rows.close() + self.quarantine.close()

    def abort(self) -> None:
        self.rows.abort()
        self.quarantine.abort()


def _fetch_range(spec: TaskSpec, consumer: SimpleConsumer, gaps: list[OffsetGap],
                 deliver: Callable[[DecodedRows], None]) -> _Fetched:
    """Fetch ``[start, end)`` and hand each fetch's decoded rows to ``deliver``.

    The next fetch is in flight while the previous response is decoded: its offset comes
    from the batch headers alone (:func:`next_offset_after`), before the records are.
    """
    r = spec.range
    fetched = _Fetched(next_offset=r.start)
    # Compressed batches can decode to many times their size: the fetch size adapts so that
    # one fetch decodes to about a row group, starting small.
    budget = int(spec.topic.row_group_mb * MB)
    max_bytes, empty = min(spec.source.fetch_max_bytes, FIRST_FETCH_BYTES), 0

    def fetch(at: int, size: int):
        return consumer.fetch_raw(r.topic, r.partition, at, max_bytes=size, max_wait_ms=500)

    with ThreadPoolExecutor(1, thread_name_prefix="pylog-prefetch") as prefetcher:
        offset = r.start
        pending = prefetcher.submit(fetch, offset, max_bytes) if offset < r.end else None
        while offset < r.end:
            try:
                result = pending.result()
            except OffsetOutOfRange as exc:
                offset = _skip_deleted(spec, offset, exc, gaps)
                if offset < r.end:
                    pending = prefetcher.submit(fetch, offset, max_bytes)
                continue
            ahead = next_offset_after(result.records)
            if ahead is not None and offset < ahead < r.end:
                pending = prefetcher.submit(fetch, ahead, max_bytes)
            columns = decode_columns(result.records, start_offset=offset)
            if columns.next_offset is None:
                empty += 1
                if empty > EMPTY_FETCH_RETRIES:
                    raise LoaderError(
                        f"topic {r.topic} partition {r.partition}: no records at offset {offset} "
                        f"(high watermark {result.high_watermark}) though the plan reads to {r.end}")
                max_bytes = min(max_bytes * 2, 256 << 20)  # a batch larger than max_bytes
                time.sleep(min(0.05 * empty, 1.0))
                pending = prefetcher.submit(fetch, offset, max_bytes)
                continue
            empty = 0
            if columns.next_offset <= offset:
                raise LoaderError(f"topic {r.topic} partition {r.partition}: fetch at offset {offset} "
                                  f"returned batches ending at {columns.next_offset}")
            if columns.next_offset != ahead and columns.next_offset < r.end:
                pending = prefetcher.submit(fetch, columns.next_offset, max_bytes)
            cut = bisect.bisect_left(columns.offsets, r.end)
            if cut:
                decoded = decode_records(
                    spec.topic, r.partition, columns.offsets[:cut], columns.timestamps[:cut],
                    columns.keys[:cut], columns.values[:cut])
                expansion = (decoded.rows.nbytes + decoded.quarantine.nbytes) / max(1, columns.bytes_consumed)
                max_bytes = int(min(spec.source.fetch_max_bytes,
                                    max(MIN_FETCH_BYTES, budget / max(expansion, 1.0))))
                deliver(decoded)
                del decoded
            fetched.records += cut
            fetched.bytes += columns.bytes_consumed
            offset = columns.next_offset
        _discard(pending)
    fetched.next_offset = offset
    return fetched


def _discard(pending) -> None:
    """Wait for a prefetch nobody needs and drop its result or error."""
    try:
        if pending is not None:
            pending.result()
    except Exception:  # noqa: BLE001 -- an unneeded read's failure does not matter
        pass


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
