"""Where the loader's tables live in the warehouse, and how their files are named.

Hive-style layout, read by Spark (partition discovery), DuckDB (hive_partitioning),
Trino and pyarrow::

    <warehouse>/<table>/dt=YYYY-MM-DD/hr=HH/<topic>-<partition>-<first>-<last>.parquet
    <warehouse>/<table>_quarantine/dt=.../hr=.../<topic>-<partition>-<first>-<last>.parquet

``first``/``last`` are the first and last offsets of the task's planned range, so a retry
or a rerun writes the same names and replaces its own files instead of adding copies.
A range's rows in one partition larger than ``target_file_mb`` continue in
``<range>.1.parquet``, ``<range>.2.parquet``, ... (see :mod:`pylog.etl.writer`).
With ``partitioning: [dt]`` the ``hr=`` level is absent.

Every run's tasks write the same layout under ``<warehouse>/_staging/<run>/<table>/``.
A scheduled run's commit moves the files into the table (:mod:`pylog.etl.publish`); a
backfill's commit adds the live rows it did not re-read to each window partition there (see
:mod:`pylog.etl.swap`) and swaps the staged directory into the table, moving the old one
to ``<warehouse>/_trash/<run>/<table>/`` (deleted once the run is committed). Names starting
with ``_`` are outside every table, so readers never see staging or trash.
"""

from __future__ import annotations

from datetime import datetime, timezone

from pylog.etl.fs import Storage
from pylog.etl.model import TaskRange
from pylog.etl.state import run_dir_name

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS


def bucket_ms(partitioning: tuple[str, ...]) -> int:
    """Width of one table partition in milliseconds."""
    return HOUR_MS if "hr" in partitioning else DAY_MS


def partition_parts(bucket_start_ms: int, partitioning: tuple[str, ...]) -> tuple[str, ...]:
    """``("dt=2026-11-20", "hr=07")`` for the partition holding ``bucket_start_ms``."""
    moment = datetime.fromtimestamp(bucket_start_ms / 1000, tz=timezone.utc)
    parts = [f"dt={moment:%Y-%m-%d}"]
    if "hr" in partitioning:
        parts.append(f"hr={moment:%H}")
    return tuple(parts)


def table_root(warehouse: Storage, table: str) -> str:
    return warehouse.join(table)


def staging_root(warehouse: Storage, run_id: str, table: str) -> str:
    return warehouse.join("_staging", run_dir_name(run_id), table)


def trash_root(warehouse: Storage, run_id: str, table: str) -> str:
    return warehouse.join("_trash", run_dir_name(run_id), table)


def data_file(warehouse: Storage, root: str, parts: tuple[str, ...], task_range: TaskRange,
              number: int = 0) -> str:
    """The range's ``number``-th file in a partition: ``<range>.parquet``, ``<range>.1.parquet``, ..."""
    suffix = f".{number}" if number else ""
    return warehouse.child(root, *parts, f"{task_range.name}{suffix}.parquet")


def range_of_file(name: str) -> str | None:
    """The range name a data file of a load is named after, or None for other names.

    A range name ends in its last offset (digits), so ``.<n>`` after it is unambiguous.
    """
    if not name.endswith(".parquet") or name.startswith((".", "_")):
        return None
    stem = name[:-len(".parquet")]
    head, dot, number = stem.rpartition(".")
    if dot and number.isdigit() and head[-1:].isdigit():
        return head
    return stem if stem[-1:].isdigit() else None


def partition_dirs(warehouse: Storage, root: str) -> list[tuple[str, ...]]:
    """``(dt=..., hr=...)`` (or ``(dt=...,)``) of every leaf partition directory under ``root``."""
    found = []
    for dt in warehouse.list_dir(root):
        if not dt.startswith("dt="):
            continue
        hours = [h for h in warehouse.list_dir(warehouse.child(root, dt)) if h.startswith("hr=")]
        found += [(dt, hr) for hr in hours] if hours else [(dt,)]
    return found
