"""The loader's state store: plans, task-done markers, committed offsets, audits, locks.

Everything is a small JSON file written with temp + rename (see :mod:`pylog.etl.fs`).
The files whose absence would change what a run does are never replaced (on HDFS a
replace is delete + rename, and a crash between the two would lose the file): committed
offsets and the pending run are *versioned* -- each write creates the next
``<seq>.json`` exclusively and readers take the highest -- and the lock file is created
exclusively and only ever deleted by whoever ends its generation. Layout under the
state URI::

    tables/<table>/offsets/<seq>.json            OffsetsSnapshot: the scheduled load's
                                                 committed offsets (the commit point);
                                                 the highest <seq> is current
    tables/<table>/pending/<seq>.json            {"run_id": id or null}: a planned,
                                                 uncommitted run (written before its plan)
    tables/<table>/lock.json                     TableLock: the run working on the table,
                                                 with a token unique to the holder
    tables/<table>/lock-beats/<token>.<ms>.beat  the holder's heartbeats (newest counts)
    tables/<table>/lock-ends/<token>             created exclusively by the one process
                                                 that ends a lock generation (release or
                                                 breaking a stale lock) before it deletes
                                                 lock.json
    tables/<table>/runs/<run>/plan.json          TablePlan, written before tasks start
    tables/<table>/runs/<run>/done/<range>.json  TaskDoneMarker per finished range
    tables/<table>/runs/<run>/swap.json          backfill: the partitions being replaced
    tables/<table>/runs/<run>/committed.json     the run is finished
    tables/<table>/audit/<committed_at_ms>-<run>.json   AuditEntry

``offsets.json`` and ``pending.json`` of earlier versions are still read when no
versioned file exists yet.

``<run>`` is the run id with characters outside ``[A-Za-z0-9._-]`` replaced (plus a short
hash when anything was replaced), so Airflow's run ids are valid HDFS names.

Python API for schedulers and analysts::

    store = StateStore("file:///var/lib/pylog/state")
    store.committed_offsets("page_views")       # {partition: next offset} or {}
    store.latest_audit("page_views")            # AuditEntry | None
    store.list_audits("page_views")             # [AuditEntry], oldest first
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import time
from typing import Callable

from pylog.etl.errors import LoaderError
from pylog.etl.fs import Storage
from pylog.etl.locks import TableLocks
from pylog.etl.model import AuditEntry, OffsetsSnapshot, TableLock, TablePlan, TaskDoneMarker, TaskRange


_SAFE = re.compile(r"[^A-Za-z0-9._-]")
_VERSION = re.compile(r"^\d{12}\.json$")
KEEP_VERSIONS = 10


def run_dir_name(run_id: str) -> str:
    """A filesystem-safe, collision-free directory name for a run id."""
    safe = _SAFE.sub("_", run_id)
    if safe != run_id or safe.startswith(("_", ".")):
        safe = f"{safe.lstrip('_.') or 'run'}-{hashlib.sha1(run_id.encode()).hexdigest()[:8]}"
    return safe


class StateStore:
    """Reads and writes the loader's state under a URI (file://, hdfs://, webhdfs://)."""

    def __init__(self, uri: str, clock: Callable[[], float] = time.time,
                 storage: Storage | None = None) -> None:
        self.storage = storage or Storage.from_uri(uri)
        self.clock = clock
        self.locks = TableLocks(self.storage, self._table, self.now_ms)
        self._guard: Callable[[], None] | None = None

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    # -- paths ---------------------------------------------------------------------------

    def _table(self, table: str, *parts: str) -> str:
        return self.storage.join("tables", table, *parts)

    def _run(self, table: str, run_id: str, *parts: str) -> str:
        return self._table(table, "runs", run_dir_name(run_id), *parts)

    # -- committed offsets ---------------------------------------------------------------

    def offsets_snapshot(self, table: str) -> OffsetsSnapshot | None:
        """The last committed offsets snapshot of a table, or None before its first load."""
        return self._read_latest(table, "offsets", OffsetsSnapshot.from_json)

    def committed_offsets(self, table: str) -> dict[int, int]:
        """``{partition: next offset to load}`` committed by the scheduled load; {} if none.

        ``table`` may also be the name of the topic loaded into it.

        >>> StateStore("file:///tmp/state").committed_offsets("page_views")
        {0: 1200, 1: 1187}
        """
        snapshot = self.offsets_snapshot(self.resolve_table(table))
        return dict(snapshot.offsets) if snapshot else {}

    def write_offsets(self, snapshot: OffsetsSnapshot) -> None:
        """Commit ``snapshot`` as the next version (the previous ones stay readable)."""
        self._check_guard()
        self._write_next(snapshot.table, "offsets", snapshot.to_json())

    # -- plans and markers ---------------------------------------------------------------

    def read_plan(self, table: str, run_id: str) -> TablePlan | None:
        return self._read(self._run(table, run_id, "plan.json"), TablePlan.from_json)

    def write_plan(self, plan: TablePlan) -> None:
        """Record the run as pending, then write its plan.

        In this order a plan never exists without being pending: a crash in between
        leaves a pending run id without a plan, which the next run ignores.
        """
        self._check_guard()
        if self.pending_run(plan.table) != plan.run_id:
            self._write_next(plan.table, "pending", json.dumps({"run_id": plan.run_id}).encode())
        self.storage.write_atomic(self._run(plan.table, plan.run_id, "plan.json"), plan.to_json())

    def pending_run(self, table: str) -> str | None:
        """Run id of a planned run that has not committed yet (it must finish first)."""
        raw = self._read_latest(table, "pending", json.loads)
        return raw["run_id"] if raw else None

    def clear_pending(self, table: str, run_id: str) -> None:
        self._check_guard()
        if self.pending_run(table) == run_id:
            self._write_next(table, "pending", json.dumps({"run_id": None}).encode())

    def marker_path(self, table: str, run_id: str, task_range: TaskRange) -> str:
        return self._run(table, run_id, "done", f"{task_range.name}.json")

    def read_marker(self, table: str, run_id: str, task_range: TaskRange) -> TaskDoneMarker | None:
        return self._read(self.marker_path(table, run_id, task_range), TaskDoneMarker.from_json)

    def write_marker(self, table: str, run_id: str, marker: TaskDoneMarker) -> None:
        self.storage.write_atomic(self.marker_path(table, run_id, marker.range), marker.to_json())

    def count_markers(self, table: str, run_id: str) -> int:
        return sum(1 for name in self.storage.list_dir(self._run(table, run_id, "done"))
                   if name.endswith(".json") and not name.startswith("."))

    def read_swap(self, table: str, run_id: str) -> list[list[str]] | None:
        raw = self._read(self._run(table, run_id, "swap.json"), json.loads)
        return raw["partitions"] if raw else None

    def write_swap(self, table: str, run_id: str, partitions: list[list[str]]) -> None:
        self._check_guard()
        self.storage.write_atomic(self._run(table, run_id, "swap.json"),
                                  json.dumps({"partitions": partitions}).encode())

    def is_committed(self, table: str, run_id: str) -> bool:
        return self.storage.exists(self._run(table, run_id, "committed.json"))

    def mark_committed(self, table: str, run_id: str) -> None:
        self._check_guard()
        self.storage.write_atomic(self._run(table, run_id, "committed.json"),
                                  json.dumps({"run_id": run_id, "at_ms": self.now_ms()}).encode())

    # -- audits --------------------------------------------------------------------------

    def write_audit(self, entry: AuditEntry) -> None:
        self._check_guard()
        name = f"{entry.committed_at_ms:013d}-{run_dir_name(entry.run_id)}.json"
        for existing in self.storage.list_dir(self._table(entry.table, "audit")):
            if existing.endswith(f"-{run_dir_name(entry.run_id)}.json"):
                return  # a rerun of a finished commit keeps the first entry
        self.storage.write_atomic(self._table(entry.table, "audit", name), entry.to_json())

    def list_audits(self, table: str) -> list[AuditEntry]:
        """Every audit entry of a table (or of the table a topic is loaded into), oldest first."""
        directory = self._table(self.resolve_table(table), "audit")
        return [AuditEntry.from_json(self.storage.read_bytes(self.storage.child(directory, name)))
                for name in self.storage.list_dir(directory)
                if name.endswith(".json") and not name.startswith(".")]

    def latest_audit(self, table: str, kind: str | None = None) -> AuditEntry | None:
        """The newest audit entry of a table (of ``kind`` scheduled/backfill if given)."""
        audits = [a for a in self.list_audits(table) if kind is None or a.kind == kind]
        return audits[-1] if audits else None

    def audit_for_run(self, table: str, run_id: str) -> AuditEntry | None:
        for audit in self.list_audits(table):
            if audit.run_id == run_id:
                return audit
        return None

    def tables(self) -> list[str]:
        """Names of the tables this state store has state for."""
        return self.storage.list_dir(self.storage.join("tables"))

    def resolve_table(self, table_or_topic: str) -> str:
        """The table itself if it has state; else the table whose offsets name this topic."""
        if self.storage.exists(self._table(table_or_topic)):
            return table_or_topic
        for table in self.tables():
            snapshot = self.offsets_snapshot(table)
            if snapshot is not None and snapshot.topic == table_or_topic:
                return table
        return table_or_topic

    # -- locks: see pylog.etl.locks --------------------------------------------------------

    def read_lock(self, table: str) -> TableLock | None:
        """The table's lock with its newest heartbeat, or None when the table is free."""
        return self.locks.read(table)

    def acquire_lock(self, table: str, run_id: str, kind: str, timeout_s: float) -> TableLock:
        """Take the table for ``run_id``; raises TableLockedError naming a live holder."""
        return self.locks.acquire(table, run_id, kind, timeout_s)

    def heartbeat(self, lock: TableLock, table: str) -> TableLock:
        """Refresh our lock's heartbeat; raises TableLockedError if it was taken from us."""
        return self.locks.heartbeat(table, lock)

    def verify_lock(self, table: str, lock: TableLock) -> None:
        """Raise TableLockedError unless ``lock`` (its token) still holds the table."""
        self.locks.verify(table, lock)

    def release_lock(self, table: str, lock: TableLock) -> None:
        """Give the table up if ``lock`` still holds it (else nothing)."""
        self.locks.release(table, lock)

    def guarded(self, check: Callable[[], None]) -> "StateStore":
        """This store, calling ``check`` (e.g. verify our lock) before every driver write."""
        view = copy.copy(self)
        view._guard = check
        return view

    def _check_guard(self) -> None:
        if self._guard is not None:
            self._guard()

    # -- versioned files -----------------------------------------------------------------

    def _read_latest(self, table: str, kind: str, parse):
        """Parse the highest ``<kind>/<seq>.json`` (or the older ``<kind>.json``); None if none."""
        directory = self._table(table, kind)
        versions = [n for n in self.storage.list_dir(directory) if _VERSION.match(n)]
        if versions:
            return parse(self.storage.read_bytes(self.storage.child(directory, versions[-1])))
        return self._read(self._table(table, f"{kind}.json"), parse)

    def _write_next(self, table: str, kind: str, data: bytes) -> None:
        """Create the next version exclusively and prune old ones (the newest few stay)."""
        directory = self._table(table, kind)
        versions = [n for n in self.storage.list_dir(directory) if _VERSION.match(n)]
        seq = int(versions[-1].split(".")[0]) + 1 if versions else 1
        if not self.storage.create_exclusive(self.storage.child(directory, f"{seq:012d}.json"), data):
            raise LoaderError(f"table {table}: {kind} version {seq} was written by another run at the "
                              f"same time; two runs are working on the table (check its lock)")
        for name in versions[:-(KEEP_VERSIONS - 1) or None]:
            self.storage.delete(self.storage.child(directory, name))

    def _read(self, path: str, parse):
        try:
            return parse(self.storage.read_bytes(path))
        except FileNotFoundError:
            return None
