"""Find the loader's tables under a warehouse URI and describe them without reading rows.

Layout written by the loader (Hive style)::

    <warehouse>/<table>/dt=YYYY-MM-DD/hr=HH/<topic>-<partition>-<first>-<last>.parquet

A table is a directory under the warehouse whose name does not start with ``.`` or ``_``.
Partition directories are ``column=value``. Files whose names start with ``.`` or ``_``
are temporary or bookkeeping files and are ignored, as Spark and Hive ignore them.

Row counts and the newest ``_timestamp`` come from each file's Parquet footer (row-group
statistics), so describing a table reads a few kilobytes per file, never its rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.parquet as pq

from pylog.etl.fs import Storage

TIMESTAMP_COLUMN = "_timestamp"


@dataclass(frozen=True, slots=True)
class DataFile:
    """One Parquet file of a table, described from its footer."""

    path: str
    partition: tuple[tuple[str, str], ...]
    """(column, value) pairs from the directory names, outermost first."""
    rows: int
    size: int
    newest_timestamp: datetime | None
    """Largest ``_timestamp`` in the file (UTC), from row-group statistics."""


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One Hive partition (for example dt=2026-11-20/hr=05) of a table."""

    values: tuple[tuple[str, str], ...]
    files: int
    rows: int
    size: int
    newest_timestamp: datetime | None

    @property
    def name(self) -> str:
        return "/".join(f"{column}={value}" for column, value in self.values)


@dataclass(frozen=True, slots=True)
class TableInfo:
    """A table under the warehouse: where it is, its partitions and their sizes."""

    name: str
    path: str
    """Path of the table directory in the warehouse's filesystem."""
    partition_columns: tuple[str, ...]
    partitions: tuple[PartitionInfo, ...]
    """Sorted oldest first (partition values are zero-padded, so names sort in time order)."""

    @property
    def rows(self) -> int:
        return sum(p.rows for p in self.partitions)

    @property
    def files(self) -> int:
        return sum(p.files for p in self.partitions)

    @property
    def size(self) -> int:
        return sum(p.size for p in self.partitions)

    @property
    def newest_partition(self) -> PartitionInfo | None:
        return self.partitions[-1] if self.partitions else None

    @property
    def newest_timestamp(self) -> datetime | None:
        stamps = [p.newest_timestamp for p in self.partitions if p.newest_timestamp is not None]
        return max(stamps) if stamps else None


def list_table_names(storage: Storage) -> list[str]:
    """Names of the table directories under the warehouse root, sorted.

    A file, or an empty directory, is not a table (the loader creates a table's directory
    with its first file).
    """
    return [name for name in storage.list_dir(storage.root)
            if not _hidden(name) and storage.list_dir(storage.join(name))]


def describe_table(storage: Storage, name: str) -> TableInfo:
    """Partitions, row counts and freshness of one table, from its files' footers."""
    path = storage.join(name)
    files = [_describe_file(storage, file_path, partition)
             for file_path, partition in _data_files(storage, path, ())]
    groups: dict[tuple[tuple[str, str], ...], list[DataFile]] = {}
    for data_file in files:
        groups.setdefault(data_file.partition, []).append(data_file)
    partitions = tuple(_summarise(values, members) for values, members in sorted(groups.items()))
    columns = tuple(column for column, _ in partitions[0].values) if partitions else ()
    return TableInfo(name=name, path=path, partition_columns=columns, partitions=partitions)


def discover_tables(storage: Storage, names: list[str] | None = None) -> list[TableInfo]:
    """Describe the named tables (every table under the warehouse when None)."""
    wanted = list_table_names(storage) if names is None else names
    return [describe_table(storage, name) for name in wanted]


def data_file_paths(storage: Storage, table_path: str) -> list[str]:
    """Every visible Parquet file of the table at ``table_path``."""
    return [path for path, _ in _data_files(storage, table_path, ())]


def _data_files(storage: Storage, directory: str, partition: tuple[tuple[str, str], ...]):
    """Yield (file path, partition values) under a table or partition directory."""
    for name in storage.list_dir(directory):
        if _hidden(name):
            continue
        child = storage.child(directory, name)
        if name.endswith(".parquet"):
            yield child, partition
        elif "=" in name:
            column, _, value = name.partition("=")
            yield from _data_files(storage, child, partition + ((column, value),))


def _describe_file(storage: Storage, path: str, partition) -> DataFile:
    metadata = read_footer(storage, path)
    return DataFile(path=path, partition=partition, rows=metadata.num_rows,
                    size=storage.size(path), newest_timestamp=_max_timestamp(metadata))


def read_footer(storage: Storage, path: str) -> pq.FileMetaData:
    """The Parquet footer of one file (only its tail is read where the filesystem allows)."""
    arrow_fs = getattr(storage, "fs", None)
    if arrow_fs is not None:
        with arrow_fs.open_input_file(path) as handle:
            return pq.read_metadata(handle)
    return pq.read_metadata(pa.BufferReader(storage.read_bytes(path)))


def _max_timestamp(metadata: pq.FileMetaData) -> datetime | None:
    names = metadata.schema.names
    if TIMESTAMP_COLUMN not in names:
        return None
    index = names.index(TIMESTAMP_COLUMN)
    newest = None
    for i in range(metadata.num_row_groups):
        stats = metadata.row_group(i).column(index).statistics
        if stats is None or not stats.has_min_max:
            continue
        value = stats.max
        if isinstance(value, datetime):
            value = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
            newest = value if newest is None else max(newest, value)
    return newest


def _summarise(values, members: list[DataFile]) -> PartitionInfo:
    stamps = [f.newest_timestamp for f in members if f.newest_timestamp is not None]
    return PartitionInfo(values=values, files=len(members), rows=sum(f.rows for f in members),
                         size=sum(f.size for f in members),
                         newest_timestamp=max(stamps) if stamps else None)


def _hidden(name: str) -> bool:
    return name.startswith((".", "_"))
