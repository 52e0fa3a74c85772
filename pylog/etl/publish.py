"""A scheduled load's publish: move the run's staged files into its tables, under a journal.

The map tasks of a scheduled run write under ``<warehouse>/_staging/<run>/<table>/`` (and
the quarantine table's), which no reader looks at (see :mod:`pylog.etl.layout`). Once
the offsets snapshot is written -- the commit point -- the commit publishes them:

1. write the publish journal (``runs/<run>/publish.json``) once, one entry per staged
   file: ``[table, "dt=...", "hr=...", "<range>.parquet"]``;
2. per entry, move the staged file to the same place in the live table, replacing a
   file of that name (a name is the range's, so it can only be this run's own file).

A crash mid-publish leaves the run committed in the offsets but not marked committed,
so it stays pending: its rerun, or the next run of any id (which finishes a pending run
first), replays the journal; an entry whose staged file is gone was published.
Readers therefore see a scheduled run's rows only once it has committed.
"""

from __future__ import annotations

from pylog.etl import faults
from pylog.etl.config import TopicConfig
from pylog.etl.fs import Storage
from pylog.etl.layout import staging_root, table_root
from pylog.etl.model import TablePlan
from pylog.etl.state import StateStore


def publish_staged(state: StateStore, warehouse: Storage, plan: TablePlan, config: TopicConfig,
                   fault: str | None = None) -> int:
    """Move the run's staged files into its tables (idempotent); returns the journal's length."""
    journal = state.read_publish(plan.table, plan.run_id)
    if journal is None:
        journal = [[table, *relative] for table in (plan.table, config.quarantine_table)
                   for relative in _staged_files(warehouse, staging_root(warehouse, plan.run_id, table))]
        state.write_publish(plan.table, plan.run_id, journal)
    for table, *relative in journal:
        staged = warehouse.child(staging_root(warehouse, plan.run_id, table), *relative)
        if not warehouse.exists(staged):
            continue  # published before a crash
        live = warehouse.child(table_root(warehouse, table), *relative)
        warehouse.delete(live)  # HDFS renames never replace
        warehouse.move(staged, live)
        faults.kill_driver_at("mid_publish", fault)
    return len(journal)


def _staged_files(warehouse: Storage, root: str, relative: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Relative paths (``dt=..``, ``hr=..``, name) of the Parquet files under ``root``."""
    found = []
    for name in warehouse.list_dir(warehouse.child(root, *relative) if relative else root):
        if name.startswith((".", "_")):
            continue
        if name.endswith(".parquet"):
            found.append((*relative, name))
        elif "=" in name:
            found += _staged_files(warehouse, root, (*relative, name))
    return found
