"""Compaction: a table partition's small files rewritten as files of about ``target_file_mb``.

Every row stays exactly once: compaction only ever swaps a whole partition directory for a
staged copy holding the same rows, with the same journalled swap as a backfill's
replace-by-offset-range (:mod:`pylog.etl.swap`), under the same table lock as the loads.

Files::

    <warehouse>/<table>/dt=../hr=../compacted-<stamp>-<n>.parquet   what compaction writes
                   (loads write <topic>-<partition>-<first>-<last>.parquet: never the same name)
    <warehouse>/_staging/<id>/<table>/dt=../hr=../   the partition as it will be
    <warehouse>/_trash/<id>/<table>/dt=../hr=../     the partition as it was (deleted at the end)
    <state>/compactions/<table>/<id>.json            the journal, CompactionJournal: per
                   partition the file names (and sizes) it replaces, carries and writes

``<id>`` is ``compact-<stamp>``, ``<stamp>`` the UTC time and a random suffix: one id per
compaction of one table (the table and its quarantine table).

Steps for a table, under its lock (run id ``compaction``; a compaction waits up to
``compaction.lock_wait_seconds`` for a load holding it):

0. finish the table's journals left by a crashed compaction (replayed) and delete the
   staging of compactions that crashed before writing their journal (they are redone);
   a table with a pending (planned, uncommitted) load is left alone: the load finishes first;
1. per partition (older than ``--older-than``) holding two or more small files: stream them,
   a row group at a time, into new files in staging (rows sorted by (_partition, _offset)
   within each row group of about ``row_group_mb``; a new file past ``target_file_mb``),
   and link (or copy) the partition's other files next to them. Files of about the target
   size already, and the files of the table's latest committed run (the audit counts the
   rows of its files by name), are carried over unchanged;
2. write the journal;
3. per partition, swap the staged directory into place and the live one into trash;
4. delete trash and staging, then the journal.

A crash before 2 leaves staging only: the next compaction deletes it and redoes the work.
After 2 the next compaction replays the journal before anything else.

The swap, its journal, the replay after a crash, and what a reader listing a partition
directory can see meanwhile (on file://, the old files or the new ones, never neither;
on HDFS, for the moment between two renames, neither) are in :mod:`pylog.etl.compact_swap`.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pylog.errors import ConfigError
from pylog.etl import faults
from pylog.etl.compact_swap import (CompactionJournal, CompactionJournals, PartitionCompaction, cleanup,
                                    data_names, drop_orphans, replay)
from pylog.etl.config import LoaderConfig, TopicConfig
from pylog.etl.fs import Storage
from pylog.etl.job import TableLockHolder  # the loads' lock holder: heartbeats, check(), release
from pylog.etl.layout import DAY_MS, HOUR_MS, partition_dirs, range_of_file, staging_root, table_root
from pylog.etl.state import StateStore
from pylog.etl.writer import MB
from pylog.warehouse.tables import read_footer

log = logging.getLogger(__name__)

LOCK_RUN_ID = "compaction"
"""The run id compactions hold the table lock under: one at a time per table, and a rerun
takes the lock of a killed compaction over at once (same host, its process gone)."""
KIND = "compaction"
PREFIX = "compacted-"
LARGE_SHARE = 0.75
"""A file holding at least this share of ``target_file_mb`` is compacted already."""
SORT_KEYS = [("_partition", "ascending"), ("_offset", "ascending")]


@dataclass(frozen=True, slots=True)
class TableCompaction:
    """What one ``compact_table`` did."""

    table: str
    partitions: tuple[PartitionCompaction, ...]
    """Swapped by this call, including journals of a crashed compaction it finished."""
    notes: tuple[str, ...]
    """Why partitions or the table were left alone, and what was abandoned."""
    seconds: float
    lock_wait_seconds: float = 0.0
    """How long it waited for another run (a load) to release the table lock."""


def compact_tables(config: LoaderConfig, tables: list[str] | None = None,
                   older_than_s: float | None = None, fault: str | None = None,
                   clock: Callable[[], float] = time.time) -> list[TableCompaction]:
    """Compact every configured table (or those named in ``tables``, by table or topic).

    ``older_than_s``: only partitions whose hour (or day) ended at least this long ago;
    None compacts every partition, the current hour's too.

    >>> compact_tables(load_config("conf/loader.yaml"), ["page_views"], older_than_s=7200)

    Raises ConfigError (unknown table), TableLockedError (a run kept the table locked
    longer than ``compaction.lock_wait_seconds``). A crash is finished by the next call.
    """
    selected = [_topic_of(config, name) for name in tables] if tables else list(config.topics)
    state = StateStore(config.state, clock=clock)
    warehouse = Storage.from_uri(config.warehouse)
    return [compact_table(config, topic, state, warehouse, older_than_s, fault) for topic in selected]


def _topic_of(config: LoaderConfig, name: str) -> TopicConfig:
    for topic in config.topics:
        if name in (topic.table, topic.topic):
            return topic
    known = ", ".join(t.table for t in config.topics)
    raise ConfigError("--table", f"no table {name!r} in the configuration (tables: {known})")


def compact_table(config: LoaderConfig, topic: TopicConfig, state: StateStore, warehouse: Storage,
                  older_than_s: float | None, fault: str | None = None) -> TableCompaction:
    """Finish the table's crashed compactions, then compact its partitions (see the module)."""
    started = time.monotonic()
    journals = CompactionJournals(state.storage, topic.table)
    with TableLockHolder(state, topic.table, LOCK_RUN_ID, KIND, config.lock_timeout_seconds,
                         wait_s=config.compaction.lock_wait_seconds,
                         wait_key="compaction.lock_wait_seconds") as lock:
        done, notes = [], []
        for journal in journals.pending():
            log.warning("table %s: finishing compaction %s", topic.table, journal.compaction_id)
            done += replay(warehouse, journal, journals, lock.check, fault, notes)
        drop_orphans(warehouse, (topic.table, topic.quarantine_table), journals)
        pending = state.pending_run(topic.table)
        if pending is not None and not state.is_committed(topic.table, pending):
            notes.append(f"table {topic.table}: load run {pending!r} is pending (not committed); "
                         f"the table is compacted once a load has finished it")
            return TableCompaction(topic.table, tuple(done), tuple(notes), time.monotonic() - started,
                                   lock.waited_s)
        journal = _stage(config, topic, state, warehouse, older_than_s, notes)
        faults.kill_driver_at("compact_before_journal", fault)
        if journal.partitions:
            lock.check()
            journals.write(journal)
            done += replay(warehouse, journal, journals, lock.check, fault, notes)
        else:
            cleanup(warehouse, journal, journals)
    return TableCompaction(topic.table, tuple(done), tuple(notes), time.monotonic() - started, lock.waited_s)


def new_compaction_id(now_s: float) -> str:
    moment = datetime.fromtimestamp(now_s, tz=timezone.utc)
    return f"compact-{moment:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"


def format_compactions(results: list[TableCompaction]) -> str:
    """The report of ``pylog compact`` and the DAG's task: a line per compacted partition,
    the notes, then a line per table."""
    lines = []
    for result in results:
        for entry in result.partitions:
            lines.append(f"{entry.spec}: {len(entry.old) + len(entry.carried)} files -> "
                         f"{len(entry.new) + len(entry.carried)}, {entry.rows} rows rewritten, "
                         f"{entry.bytes_before / MB:.2f} MB -> {entry.bytes_after / MB:.2f} MB")
        lines += [f"  {note}" for note in result.notes]
        if result.lock_wait_seconds >= 0.1:
            lines.append(f"  waited {result.lock_wait_seconds:.1f}s for the table lock")
        if not result.partitions:
            lines.append(f"{result.table}: nothing to compact ({result.seconds:.1f}s)")
            continue
        entries, count = result.partitions, len(result.partitions)
        before, after = sum(len(e.old) for e in entries), sum(len(e.new) for e in entries)
        read, written = sum(e.bytes_before for e in entries), sum(e.bytes_after for e in entries)
        lines.append(f"{result.table}: {count} partition{'s' if count != 1 else ''} compacted, "
                     f"{before} files -> {after} (+{sum(len(e.carried) for e in entries)} kept as they "
                     f"are), {read / MB:.2f} MB -> {written / MB:.2f} MB in {result.seconds:.1f}s")
    return "\n".join(lines)


# -- staging ------------------------------------------------------------------------------

def _stage(config: LoaderConfig, topic: TopicConfig, state: StateStore, warehouse: Storage,
           older_than_s: float | None, notes: list[str]) -> CompactionJournal:
    """Write the compacted partitions into staging; the journal that would swap them in."""
    compaction_id = new_compaction_id(state.clock())
    protected = _latest_run_ranges(state, topic.table)
    horizon_ms = None if older_than_s is None else state.now_ms() - int(older_than_s * 1000)
    width = HOUR_MS if "hr" in topic.partitioning else DAY_MS
    entries = []
    for table in (topic.table, topic.quarantine_table):
        for parts in partition_dirs(warehouse, table_root(warehouse, table)):
            start_ms = _partition_start_ms(parts)
            if start_ms is None or (horizon_ms is not None and start_ms + width > horizon_ms):
                continue
            entry = _stage_partition(warehouse, topic, compaction_id, table, parts, protected, notes)
            if entry is not None:
                entries.append(entry)
    return CompactionJournal(compaction_id, topic.table, state.now_ms(), tuple(entries))


def _latest_run_ranges(state: StateStore, table: str) -> set[str]:
    """Range names of the latest committed run: the audit counts the rows of their files."""
    latest = state.latest_audit(table)
    return {r.name for r in latest.ranges} if latest else set()


def _stage_partition(warehouse: Storage, topic: TopicConfig, compaction_id: str, table: str,
                     parts: tuple[str, ...], protected: set[str],
                     notes: list[str]) -> PartitionCompaction | None:
    live = warehouse.child(table_root(warehouse, table), *parts)
    names = data_names(warehouse, live)
    if len(names) < 2:
        return None
    files = [(name, warehouse.size(warehouse.child(live, name))) for name in names]
    target = int(topic.target_file_mb * 1024 * 1024)
    small = [(n, s) for n, s in files if range_of_file(n) not in protected and s < LARGE_SHARE * target]
    if len(small) < 2:
        return None
    footers = {name: read_footer(warehouse, warehouse.child(live, name)) for name, _ in small}
    schema = footers[small[0][0]].schema.to_arrow_schema()
    if any(not f.schema.to_arrow_schema().equals(schema, check_metadata=False) for f in footers.values()):
        notes.append(f"{table} {'/'.join(parts)}: files with different schemas; left alone")
        return None
    staged = warehouse.child(staging_root(warehouse, compaction_id, table), *parts)
    writer = _RollingWriter(warehouse, staged, compaction_id.removeprefix("compact-"), schema, target,
                            int(topic.row_group_mb * 1024 * 1024))
    for name in sorted(footers, key=lambda n: _first_key(footers[n])):  # one input open at a time
        with _open_parquet(warehouse, warehouse.child(live, name), footers[name]) as source:
            for group in range(source.num_row_groups):
                writer.add(source.read_row_group(group))
    new, rows, size = writer.close()
    carried = [(n, s) for n, s in files if (n, s) not in small]
    for name, _ in carried:
        _carry(warehouse, warehouse.child(live, name), warehouse.child(staged, name))
    return PartitionCompaction(table, parts, tuple(sorted(small)), tuple(carried), tuple(new), rows, size)


class _RollingWriter:
    """Row groups of about ``row_group_bytes`` (Arrow memory) into ``compacted-<stamp>-<n>.parquet``
    files, starting a new file once the current one holds ``target_bytes``.

    Each file is streamed to a temporary name and renamed when complete
    (:meth:`Storage.open_atomic`), so the journal only ever names whole files.
    """

    def __init__(self, warehouse: Storage, directory: str, stamp: str, schema: pa.Schema,
                 target_bytes: int, row_group_bytes: int) -> None:
        self.warehouse, self.directory, self.stamp, self.schema = warehouse, directory, stamp, schema
        self.target_bytes, self.row_group_bytes = target_bytes, row_group_bytes
        self.sortable = all(k in schema.names for k, _ in SORT_KEYS)
        self.buffer: list[pa.Table] = []
        self.buffered = 0
        self.files: list[str] = []
        self.rows = self.bytes = 0
        self._files = contextlib.ExitStack()
        self._sink = self._writer = None

    def add(self, rows: pa.Table) -> None:
        self.buffer.append(rows)
        self.buffered += rows.nbytes
        if self.buffered >= self.row_group_bytes:
            self._flush()

    def close(self) -> tuple[list[str], int, int]:
        self._flush()
        if self._writer is None and not self.files:
            self._open()  # no rows at all: still one (empty) file, so the swap has new names
        self._finish_file()
        return self.files, self.rows, self.bytes

    def _flush(self) -> None:
        if not self.buffer:
            return
        rows = pa.concat_tables(self.buffer)
        self.buffer, self.buffered = [], 0
        if self.sortable and not _is_sorted(rows):
            rows = rows.sort_by(SORT_KEYS)
        if self._writer is None:
            self._open()
        self._writer.write_table(rows, row_group_size=max(rows.num_rows, 1))
        self.rows += rows.num_rows
        if self._sink.tell() >= self.target_bytes:
            self._finish_file()

    def _open(self) -> None:
        name = f"{PREFIX}{self.stamp}-{len(self.files) + 1:04d}.parquet"
        self.files.append(name)
        self._path = self.warehouse.child(self.directory, name)
        self._sink = self._files.enter_context(self.warehouse.open_atomic(self._path))
        self._writer = pq.ParquetWriter(self._sink, self.schema, compression="zstd")

    def _finish_file(self) -> None:
        if self._writer is None:
            return
        self._writer.close()
        self._files.close()  # the temporary file becomes self._path
        self.bytes += self.warehouse.size(self._path)
        self._sink = self._writer = None


def _is_sorted(rows: pa.Table) -> bool:
    """Whether rows are in (_partition, _offset) order already (load files in file order are):
    two vectorised comparisons instead of a sort and a gather of every column."""
    if rows.num_rows < 2:
        return True
    partition, offset = rows.column("_partition"), rows.column("_offset")
    p0, p1 = partition.slice(0, rows.num_rows - 1), partition.slice(1)
    o0, o1 = offset.slice(0, rows.num_rows - 1), offset.slice(1)
    backwards = pc.or_(pc.greater(p0, p1), pc.and_(pc.equal(p0, p1), pc.greater(o0, o1)))
    return not pc.any(backwards).as_py()


@contextlib.contextmanager
def _open_parquet(warehouse: Storage, path: str,
                  footer: pq.FileMetaData | None = None) -> Iterator[pq.ParquetFile]:
    fs = getattr(warehouse, "fs", None)
    if fs is None:
        yield pq.ParquetFile(pa.BufferReader(warehouse.read_bytes(path)), metadata=footer)
        return
    with fs.open_input_file(path) as handle:
        yield pq.ParquetFile(handle, metadata=footer)


def _first_key(footer: pq.FileMetaData) -> tuple:
    """The smallest (_partition, _offset) from the footer's statistics, for the file order."""
    key = []
    names = footer.schema.names
    for column, _ in SORT_KEYS:
        stats = [footer.row_group(g).column(names.index(column)).statistics
                 for g in range(footer.num_row_groups)] if column in names else []
        lows = [s.min for s in stats if s is not None and s.has_min_max]
        key.append(min(lows) if lows else 0)
    return tuple(key)


def _carry(warehouse: Storage, src: str, dst: str) -> None:
    """Put a file that stays as it is into the staged directory (a hard link on a local
    disk: files are never rewritten in place, so a link is a copy)."""
    warehouse.copy(src, dst)


def _partition_start_ms(parts: tuple[str, ...]) -> int | None:
    """Start of the partition's hour (or day); None for a directory the loader did not name."""
    text = parts[0].removeprefix("dt=") + (f"T{parts[1].removeprefix('hr=')}" if len(parts) > 1 else "T00")
    try:
        moment = datetime.strptime(text, "%Y-%m-%dT%H").replace(tzinfo=timezone.utc)
    except ValueError:
        return None
    return int(moment.timestamp() * 1000)


