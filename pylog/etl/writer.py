"""Stream decoded rows as Parquet (zstd) into the table's partition directories.

A map task hands :class:`PartitionedWriter` each fetch's rows as it decodes them. Rows
are bucketed by event time into ``dt=/hr=`` directories (see :mod:`pylog.etl.layout`)
and buffered per bucket; a bucket's buffer is written as one row group once it holds
``row_group_bytes`` of Arrow memory, and a bucket's file is finished once it holds
``target_file_bytes`` of Parquet, the next rows going to the range's next file there:
``<range>.parquet``, ``<range>.1.parquet``, ``<range>.2.parquet``, ...

So a task's memory is bounded whatever its range: the buffers together never exceed
``max_buffered_bytes`` (the largest is written out early when they would), at most
``max_open_files`` files are open at once (the least recently used is finished early),
and what has been written lives on disk, not in the task.

Columns with few distinct values (in a sample of the file's first rows) are dictionary
encoded, the others plainly (:func:`dictionary_columns`).

Each file is written to a temporary name and renamed into place when finished (see
:meth:`pylog.etl.fs.Storage.open_atomic`); :meth:`PartitionedWriter.abort` removes the
temporaries of a failed attempt. A retry of the range first removes the files an earlier
attempt finished (:func:`remove_range_files`), since it may split its rows differently.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pylog.etl.fs import Storage
from pylog.etl.layout import bucket_ms, data_file, partition_dirs, partition_parts, range_of_file
from pylog.etl.model import TaskRange

MB = 1 << 20
DEFAULT_TARGET_FILE_BYTES = 128 * MB
DEFAULT_ROW_GROUP_BYTES = 32 * MB


@dataclass(frozen=True, slots=True)
class WrittenFile:
    path: str
    partition: tuple[str, ...]
    rows: int
    bytes: int


def parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue().to_pybytes()


@dataclass
class _Bucket:
    key: int  # the partition's start in epoch ms
    parts: tuple[str, ...]
    buffered: list[pa.Table] = field(default_factory=list)
    buffered_bytes: int = 0
    next_file: int = 0
    file: object = None  # the open Storage.open_atomic context, while a file is open
    stream: object = None
    writer: pq.ParquetWriter | None = None
    path: str = ""
    rows_in_file: int = 0


class PartitionedWriter:
    """Rows of one task range -> Parquet files under ``root``, one or more per partition."""

    def __init__(self, storage: Storage, root: str, schema: pa.Schema, partitioning: tuple[str, ...],
                 task_range: TaskRange, *, target_file_bytes: int = DEFAULT_TARGET_FILE_BYTES,
                 row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES, max_buffered_bytes: int | None = None,
                 max_open_files: int = 32) -> None:
        self.storage = storage
        self.root = root
        self.schema = schema
        self.partitioning = partitioning
        self.task_range = task_range
        self.target_file_bytes = max(1, int(target_file_bytes))
        self.row_group_bytes = max(1, int(row_group_bytes))
        self.max_buffered_bytes = int(max_buffered_bytes or 2 * self.row_group_bytes)
        self.max_open_files = max(1, max_open_files)
        self.rows = 0
        self.written: list[WrittenFile] = []
        self._buckets: dict[int, _Bucket] = {}
        self._open: OrderedDict[int, None] = OrderedDict()  # buckets with an open file, LRU first
        self._buffered_bytes = 0
        self._width = bucket_ms(partitioning)

    def add(self, rows: pa.Table, event_ms: pa.Array) -> None:
        """Take ``rows`` (``event_ms`` aligned with them): buffer, and write what is due."""
        if rows.num_rows == 0:
            return
        self.rows += rows.num_rows
        # Integer division truncates toward zero; event times before 1970 are not expected.
        buckets = pc.multiply(pc.divide(pc.cast(event_ms, pa.int64()), self._width), self._width)
        low, high = pc.min_max(buckets).values()
        if low == high:
            self._buffer(low.as_py(), rows)
        else:
            for bucket in sorted(pc.unique(buckets).to_pylist()):
                self._buffer(bucket, rows.filter(pc.equal(buckets, bucket)))
        while self._buffered_bytes > self.max_buffered_bytes:
            self._write_row_group(max(self._buckets.values(), key=lambda b: b.buffered_bytes))

    def close(self) -> list[WrittenFile]:
        """Write what is buffered and finish every file; returns every file written."""
        for key in sorted(self._buckets):
            bucket = self._buckets[key]
            self._write_row_group(bucket)
            self._finish_file(bucket)
        self._buckets.clear()
        return self.written

    def abort(self) -> None:
        """Drop the buffers and the open files' temporaries (finished files stay)."""
        for key in list(self._open):
            bucket = self._buckets[key]
            try:
                bucket.writer.close()
            except Exception:  # noqa: BLE001 -- the attempt is failing anyway
                pass
            bucket.file.__exit__(RuntimeError, RuntimeError("aborted"), None)
        self._open.clear()
        self._buckets.clear()
        self._buffered_bytes = 0

    def _buffer(self, key: int, rows: pa.Table) -> None:
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(key, partition_parts(key, self.partitioning))
        size = rows.nbytes
        bucket.buffered.append(rows)
        bucket.buffered_bytes += size
        self._buffered_bytes += size
        if bucket.buffered_bytes >= self.row_group_bytes:
            self._write_row_group(bucket)

    def _write_row_group(self, bucket: _Bucket) -> None:
        if not bucket.buffered:
            return
        table = pa.concat_tables(bucket.buffered) if len(bucket.buffered) > 1 else bucket.buffered[0]
        self._buffered_bytes -= bucket.buffered_bytes
        bucket.buffered, bucket.buffered_bytes = [], 0
        if bucket.writer is None:
            self._open_file(bucket, table)
        self._open.move_to_end(bucket.key)
        bucket.writer.write_table(table, row_group_size=max(1, table.num_rows))
        bucket.rows_in_file += table.num_rows
        if bucket.stream.tell() >= self.target_file_bytes:
            self._finish_file(bucket)

    def _open_file(self, bucket: _Bucket, first: pa.Table) -> None:
        while len(self._open) >= self.max_open_files:
            self._finish_file(self._buckets[next(iter(self._open))])
        bucket.path = data_file(self.storage, self.root, bucket.parts, self.task_range, bucket.next_file)
        bucket.next_file += 1
        bucket.file = self.storage.open_atomic(bucket.path)
        bucket.stream = bucket.file.__enter__()
        bucket.writer = pq.ParquetWriter(bucket.stream, self.schema, compression="zstd",
                                         use_dictionary=dictionary_columns(first))
        self._open[bucket.key] = None

    def _finish_file(self, bucket: _Bucket) -> None:
        if bucket.writer is None:
            return
        bucket.writer.close()
        size = bucket.stream.tell()
        bucket.file.__exit__(None, None, None)
        self.written.append(WrittenFile(bucket.path, bucket.parts, bucket.rows_in_file, size))
        bucket.writer = bucket.file = bucket.stream = None
        bucket.rows_in_file = 0
        self._open.pop(bucket.key, None)


def dictionary_columns(table: pa.Table, sample_rows: int = 10_000) -> list[str]:
    """The columns worth dictionary encoding: at most half their values distinct in a sample.

    Parquet's writer otherwise starts a dictionary for every column and falls back to
    plain encoding once it grows too big, which costs time and makes high-cardinality
    columns (ids, offsets, URLs) larger than plain encoding would.
    """
    head = table.slice(0, sample_rows)
    limit = max(1, head.num_rows // 2)
    return [name for name, column in zip(head.column_names, head.columns)
            if pc.count_distinct(column).as_py() <= limit]


def write_partitioned(storage: Storage, root: str, rows: pa.Table, event_ms: pa.Array,
                      partitioning: tuple[str, ...], task_range: TaskRange, **sizes) -> list[WrittenFile]:
    """Write ``rows`` under ``root`` in one go (see :class:`PartitionedWriter`)."""
    writer = PartitionedWriter(storage, root, rows.schema, partitioning, task_range, **sizes)
    try:
        writer.add(rows, event_ms)
        return writer.close()
    except BaseException:
        writer.abort()
        raise


def remove_range_files(storage: Storage, root: str, task_range: TaskRange) -> int:
    """Delete the files of ``task_range`` under ``root`` (every partition); returns how many."""
    removed = 0
    for parts in partition_dirs(storage, root):
        directory = storage.child(root, *parts)
        for name in storage.list_dir(directory):
            if range_of_file(name) == task_range.name:
                storage.delete(storage.child(directory, name))
                removed += 1
    return removed


def in_window(event_ms: pa.Array, window_ms: tuple[int, int]) -> pa.BooleanArray:
    """Boolean mask of event times inside ``[since, until)``."""
    values = pc.cast(event_ms, pa.int64())
    return pc.and_(pc.greater_equal(values, window_ms[0]), pc.less(values, window_ms[1]))
