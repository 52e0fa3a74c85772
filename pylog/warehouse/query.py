"""SQL over the warehouse with DuckDB: each table is a view named after it.

A local (file://) warehouse is read by DuckDB itself with
``read_parquet('<table>/**/*.parquet', hive_partitioning = true)``, so ``dt`` (DATE) and
``hr`` (text, "08") come from the directory names and filters on them prune partitions. An
hdfs:// warehouse is read through a pyarrow dataset on the same filesystem the loader
writes with, registered in DuckDB as the view's source.

Every configured table and its ``<table>_quarantine`` table is a view even before its
first file exists: an empty view with the table's columns (:func:`configured_schemas`), so
a routine health query such as ``SELECT count(*) FROM page_views_quarantine`` works on
healthy data.

Several statements separated by ``;`` run in order on one connection
(:func:`run_statements`), each with its own result. Errors keep DuckDB's whole message:
its hints ("Did you mean", "Candidate bindings") and the ``LINE 1: ... ^`` pointer.

Usage::

    storage = Storage.from_uri("file:///var/lib/pylog/warehouse")
    table = run_query(storage, "SELECT hr, count(*) FROM page_views GROUP BY hr")
"""

from __future__ import annotations

from dataclasses import dataclass

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


def configured_schemas(config) -> dict[str, pa.Schema]:
    """The columns of every table (and quarantine table) a loader config names, with its
    partition columns (``dt`` DATE, ``hr`` text such as ``"08"``, as DuckDB's hive
    partitioning reads them)."""
    from pylog.etl.decode import QUARANTINE_SCHEMA, table_schema

    schemas = {}
    for topic in config.topics:
        partition_fields = [pa.field(c, pa.date32() if c == "dt" else pa.string()) for c in topic.partitioning]
        schemas[topic.table] = pa.schema(list(table_schema(topic)) + partition_fields)
        schemas[topic.quarantine_table] = pa.schema(list(QUARANTINE_SCHEMA) + partition_fields)
    return schemas


def connect(storage: Storage, names: list[str] | None = None,
            empty: dict[str, pa.Schema] | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with a view per table. A table without files is
    left out, unless ``empty`` gives its columns: then it is an empty view."""
    connection = duckdb.connect(":memory:")
    for name in list_table_names(storage) if names is None else names:
        register_table(connection, storage, name)
    existing = {row[0] for row in connection.execute("SELECT view_name FROM duckdb_views()").fetchall()}
    for name, schema in (empty or {}).items():
        if name not in existing:
            source = f"_pylog_empty_{name}"
            connection.register(source, schema.empty_table())
            connection.execute(f"CREATE OR REPLACE VIEW {quote_identifier(name)} AS "
                               f"SELECT * FROM {quote_identifier(source)}")
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


_RETURNS_ROWS = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN, duckdb.StatementType.PRAGMA,
                 duckdb.StatementType.CALL}


@dataclass(frozen=True, slots=True)
class StatementResult:
    """One statement of a query and what it returned (None: a statement without rows)."""

    sql: str
    table: pa.Table | None


def run_statements(storage: Storage, sql: str,
                   empty: dict[str, pa.Schema] | None = None) -> list[StatementResult]:
    """Run the statements of ``sql`` in order on one connection; one result each.

    Raises QueryError when ``sql`` holds no statement, or with DuckDB's whole message
    (hints and the position pointer included) when a statement fails; statements after
    a failed one do not run.
    """
    connection = connect(storage, empty=empty)
    try:
        try:
            statements = connection.extract_statements(sql)
        except duckdb.Error as exc:
            raise QueryError(_message(exc)) from None
        if not statements:
            raise QueryError("no SQL statement given (the query is empty)")
        results = []
        for number, statement in enumerate(statements, 1):
            text = statement.query.strip()
            try:
                if statement.type in _RETURNS_ROWS:
                    table = _to_arrow(connection.sql(text))
                else:  # SET, CREATE ...: nothing to show
                    connection.execute(text)
                    table = None
            except duckdb.Error as exc:
                where = f"statement {number} of {len(statements)}: " if len(statements) > 1 else ""
                raise QueryError(where + _message(exc)) from None
            results.append(StatementResult(text, table))
        return results
    finally:
        connection.close()


def run_query(storage: Storage, sql: str, empty: dict[str, pa.Schema] | None = None) -> pa.Table:
    """Run SQL over the warehouse's tables; the last statement's result as an Arrow table
    (an empty table for a statement without rows, such as SET).

    Raises QueryError as :func:`run_statements` does.
    """
    table = run_statements(storage, sql, empty)[-1].table
    return pa.table({}) if table is None else table


def _to_arrow(relation) -> pa.Table:
    to_arrow = getattr(relation, "to_arrow_table", None) or relation.fetch_arrow_table
    return to_arrow()


def _message(exc: Exception) -> str:
    """DuckDB's message with its hint and pointer lines, without trailing blank lines."""
    return "\n".join(line.rstrip() for line in str(exc).strip().splitlines())
