"""The loader's state store: plans, task-done markers, committed offsets, audits, locks.

Everything is a small JSON file written with temp + rename (see :mod:`pylog.etl.fs`).
Layout under the state URI::

    tables/<table>/offsets.json                  OffsetsSnapshot: the scheduled load's
                                                 committed offsets (the commit point)
    tables/<table>/lock.json                     TableLock: the run working on the table
    tables/<table>/pending.json                  run id of a planned, uncommitted run
    tables/<table>/runs/<run>/plan.json          TablePlan, written before tasks start
    tables/<table>/runs/<run>/done/<range>.json  TaskDoneMarker per finished range
    tables/<table>/runs/<run>/swap.json          backfill: the partitions being replaced
    tables/<table>/runs/<run>/committed.json     the run is finished
    tables/<table>/audit/<committed_at_ms>-<run>.json   AuditEntry

``<run>`` is the run id with characters outside ``[A-Za-z0-9._-]`` replaced (plus a short
hash when anything was replaced), so Airflow's run ids are valid HDFS names.

Python API for schedulers and analysts::

    store = StateStore("file:///var/lib/pylog/state")
    store.committed_offsets("page_views")       # {partition: next offset} or {}
    store.latest_audit("page_views")            # AuditEntry | None
    store.list_audits("page_views")             # [AuditEntry], oldest first
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import time
from typing import Callable

from pylog.etl.errors import TableLockedError
from pylog.etl.fs import Storage
from pylog.etl.model import AuditEntry, OffsetsSnapshot, TableLock, TablePlan, TaskDoneMarker, TaskRange


_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def run_dir_name(run_id: str) -> str:
    """A filesystem-safe, collision-free directory name for a run id."""
    safe = _SAFE.sub("_", run_id)
    if safe != run_id or safe.startswith(("_", ".")):
        safe = f"{safe.lstrip('_.') or 'run'}-{hashlib.sha1(run_id.encode()).hexdigest()[:8]}"
    return safe


class StateStore:
    """Reads and writes the loader's state under a URI (file://, hdfs://, webhdfs://)."""

    def __init__(self, uri: str, clock: Callable[[], float] = time.time) -> None:
        self.storage = Storage.from_uri(uri)
        self.clock = clock

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
        return self._read(self._table(table, "offsets.json"), OffsetsSnapshot.from_json)

    def committed_offsets(self, table: str) -> dict[int, int]:
        """``{partition: next offset to load}`` committed by the scheduled load; {} if none.

        ``table`` may also be the name of the topic loaded into it.

        >>> StateStore("file:///tmp/state").committed_offsets("page_views")
        {0: 1200, 1: 1187}
        """
        snapshot = self.offsets_snapshot(self.resolve_table(table))
        return dict(snapshot.offsets) if snapshot else {}

    def write_offsets(self, snapshot: OffsetsSnapshot) -> None:
        self.storage.write_atomic(self._table(snapshot.table, "offsets.json"), snapshot.to_json())

    # -- plans and markers ---------------------------------------------------------------

    def read_plan(self, table: str, run_id: str) -> TablePlan | None:
        return self._read(self._run(table, run_id, "plan.json"), TablePlan.from_json)

    def write_plan(self, plan: TablePlan) -> None:
        self.storage.write_atomic(self._run(plan.table, plan.run_id, "plan.json"), plan.to_json())
        self.storage.write_atomic(self._table(plan.table, "pending.json"),
                                  json.dumps({"run_id": plan.run_id}).encode())

    def pending_run(self, table: str) -> str | None:
        """Run id of a planned run that has not committed yet (it must finish first)."""
        raw = self._read(self._table(table, "pending.json"), json.loads)
        return raw["run_id"] if raw else None

    def clear_pending(self, table: str, run_id: str) -> None:
        if self.pending_run(table) == run_id:
            self.storage.delete(self._table(table, "pending.json"))

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
        self.storage.write_atomic(self._run(table, run_id, "swap.json"),
                                  json.dumps({"partitions": partitions}).encode())

    def is_committed(self, table: str, run_id: str) -> bool:
        return self.storage.exists(self._run(table, run_id, "committed.json"))

    def mark_committed(self, table: str, run_id: str) -> None:
        self.storage.write_atomic(self._run(table, run_id, "committed.json"),
                                  json.dumps({"run_id": run_id, "at_ms": self.now_ms()}).encode())

    # -- audits --------------------------------------------------------------------------

    def write_audit(self, entry: AuditEntry) -> None:
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

    # -- locks ---------------------------------------------------------------------------

    def read_lock(self, table: str) -> TableLock | None:
        return self._read(self._table(table, "lock.json"), TableLock.from_json)

    def acquire_lock(self, table: str, run_id: str, kind: str, timeout_s: float) -> TableLock:
        """Take the table for ``run_id``; the same run id takes back its own lock.

        A lock whose heartbeat is older than ``timeout_s`` belongs to a dead run and is
        broken. Raises TableLockedError naming the holder when a live run holds it.
        """
        path = self._table(table, "lock.json")
        now = self.now_ms()
        mine = TableLock(run_id, kind, socket.gethostname(), os.getpid(), now, now)
        for _ in range(3):
            if self.storage.create_exclusive(path, mine.to_json()):
                return mine
            held = self.read_lock(table)
            if held is None:
                continue
            if held.run_id == run_id:
                self.storage.write_atomic(path, mine.to_json())
                return mine
            age_s = (now - held.heartbeat_at_ms) / 1000
            if age_s <= timeout_s:
                raise TableLockedError(
                    f"table {table} is locked by {held.kind} run {held.run_id!r} (host {held.host}, "
                    f"pid {held.pid}, last heartbeat {age_s:.0f}s ago); a {kind} load of the same "
                    f"table cannot run at the same time. Retry when it has finished "
                    f"(a dead run's lock expires after {timeout_s:.0f}s).")
            self._break_lock(path)
        raise TableLockedError(f"table {table}: could not take the lock at {path}")

    def _break_lock(self, path: str) -> None:
        stale = self.storage.child(self.storage.parent(path), f".lock.stale.{self.now_ms()}")
        try:
            self.storage.move(path, stale)  # only one breaker's rename succeeds
        except OSError:
            return
        self.storage.delete(stale)

    def heartbeat(self, lock: TableLock, table: str) -> TableLock:
        """Refresh our lock's heartbeat; raises TableLockedError if it was taken from us."""
        held = self.read_lock(table)
        if held is None or held.run_id != lock.run_id or held.pid != lock.pid:
            raise TableLockedError(f"table {table}: the lock of run {lock.run_id!r} was taken over")
        fresh = TableLock(lock.run_id, lock.kind, lock.host, lock.pid, lock.acquired_at_ms, self.now_ms())
        self.storage.write_atomic(self._table(table, "lock.json"), fresh.to_json())
        return fresh

    def release_lock(self, table: str, run_id: str) -> None:
        held = self.read_lock(table)
        if held is not None and held.run_id == run_id:
            self.storage.delete(self._table(table, "lock.json"))

    def _read(self, path: str, parse):
        try:
            return parse(self.storage.read_bytes(path))
        except FileNotFoundError:
            return None
