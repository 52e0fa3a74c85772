"""Write decoded rows as Parquet (zstd) into the table's partition directories.

One file per (task range, table partition): rows are bucketed by event time into
``dt=/hr=`` directories (see :mod:`pylog.etl.layout`) and each bucket is written under
the range's deterministic name with temp + rename, replacing a previous attempt's file.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pylog.etl.fs import Storage
from pylog.etl.layout import bucket_ms, data_file, partition_parts
from pylog.etl.model import TaskRange


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


def write_partitioned(storage: Storage, root: str, rows: pa.Table, event_ms: pa.Array,
                      partitioning: tuple[str, ...], task_range: TaskRange) -> list[WrittenFile]:
    """Write ``rows`` under ``root``, one file per partition their ``event_ms`` falls in."""
    if rows.num_rows == 0:
        return []
    width = bucket_ms(partitioning)
    # Integer division truncates toward zero; event times before 1970 are not expected.
    buckets = pc.multiply(pc.divide(pc.cast(event_ms, pa.int64()), width), width)
    written = []
    for bucket in sorted(pc.unique(buckets).to_pylist()):
        mask = pc.equal(buckets, bucket)
        part = rows if pc.all(mask).as_py() else rows.filter(mask)
        parts = partition_parts(int(bucket), partitioning)
        path = data_file(storage, root, parts, task_range)
        data = parquet_bytes(part)
        storage.write_atomic(path, data)
        written.append(WrittenFile(path, parts, part.num_rows, len(data)))
    return written


def in_window(event_ms: pa.Array, window_ms: tuple[int, int]) -> pa.BooleanArray:
    """Boolean mask of event times inside ``[since, until)``."""
    values = pc.cast(event_ms, pa.int64())
    return pc.and_(pc.greater_equal(values, window_ms[0]), pc.less(values, window_ms[1]))
