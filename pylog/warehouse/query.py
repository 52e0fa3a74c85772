"""SQL over the warehouse with DuckDB: each table is a view named after it.

A local (file://) warehouse is read by DuckDB itself with
``read_parquet('<table>/**/*.parquet', hive_partitioning = true)``, so ``dt`` (DATE) and
``hr`` (BIGINT) come from the directory names and filters on them prune partitions. An
hdfs:// warehouse is read through a pyarrow dataset on the same filesystem the loader
writes with, registered in DuckDB as the view's source.

Usage::

    storage = Storage.from_uri("file:///var/lib/pylog/warehouse")
    table = run_query(storage, "SELECT hr, count(*) FROM page_views GROUP BY hr")
"""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds

from pylog.errors import PylogError
from pylog.etl.fs import Storage
from pylog.warehouse.tables import data_file_paths, list_table_names


class QueryError(PylogError):
    """The SQL could not be run (syntax, unknown table or column, type error)."""


def quote_identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _quote_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def connect(storage: Storage, names: list[str] | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with a view per table (tables without files are left out)."""
    connection = duckdb.connect(":memory:")
    for name in list_table_names(storage) if names is None else names:
        register_table(connection, storage, name)
    return connection


def register_table(connection: duckdb.DuckDBPyConnection, storage: Storage, name: str) -> bool:
    """Create the view ``name`` over the table's Parquet files. False when it has none yet."""
    table_path = storage.join(name)
    files = data_file_paths(storage, table_path)
    if not files:
        return False
    if getattr(storage, "local", False):
        pattern = storage.child(table_path, "**", "*.parquet")
        connection.execute(
            f"CREATE OR REPLACE VIEW {quote_identifier(name)} AS SELECT * FROM read_parquet("
            f"{_quote_literal(pattern)}, hive_partitioning = true, union_by_name = true)")
        return True
    arrow_fs = getattr(storage, "fs", None)
    if arrow_fs is None:
        raise QueryError(f"queries need a file:// or hdfs:// warehouse, not {storage.uri}")
    dataset = ds.dataset(files, filesystem=arrow_fs, format="parquet",
                         partitioning=ds.partitioning(flavor="hive"), partition_base_dir=table_path)
    source = f"_pylog_source_{name}"
    connection.register(source, dataset)
    connection.execute(f"CREATE OR REPLACE VIEW {quote_identifier(name)} AS "
                       f"SELECT * FROM {quote_identifier(source)}")
    return True


def run_query(storage: Storage, sql: str) -> pa.Table:
    """Run one SQL statement over the warehouse's tables; the result as an Arrow table.

    Raises QueryError with DuckDB's message when the statement fails.
    """
    connection = connect(storage)
    try:
        relation = connection.sql(sql)
        if relation is None:  # a statement without a result (SET, CREATE VIEW ...)
            return pa.table({})
        to_arrow = getattr(relation, "to_arrow_table", None) or relation.fetch_arrow_table
        return to_arrow()
    except duckdb.Error as exc:
        raise QueryError(str(exc).splitlines()[0]) from None
    finally:
        connection.close()
