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
    tables/<table>/runs/<run>/done.json          the run's markers folded into one file
                                                 once it committed (``done/`` is removed)
    tables/<table>/runs/<run>/swap.json          backfill: the partitions being replaced
    tables/<table>/runs/<run>/publish.json       scheduled: the staged files being published
    tables/<table>/runs/<run>/committed.json     the run is finished
    tables/<table>/runs/<run>/failed.json        {"run_id", "at_ms", "error"}: the last
                                                 attempt of a pending run failed (what
                                                 ``pylog status`` reports; a rerun that
                                                 commits makes it moot)
    tables/<table>/audit/<committed_at_ms>-<run>.json   AuditEntry (the full history)
    tables/<table>/audit-index/<seq>.json        versioned: the newest RECENT_AUDITS entries
                                                 and the newest entry of each kind, so a
                                                 commit, ``pylog status`` and ``pylog tables``
                                                 read one file however many runs there were

Retention (:meth:`StateStore.prune`, after each commit) deletes the run directory and
the audit entry of committed runs older than ``state_retention_days``; the pending
run's directory is never touched, and the index keeps the newest entries readable.

``offsets.json`` and ``pending.json`` of earlier versions are still read when no
versioned file exists yet.

``<run>`` is the run id with characters outside ``[A-Za-z0-9._-]`` replaced (plus a short
hash when anything was replaced), so Airflow's run ids are valid HDFS names.

Python API for schedulers and analysts::

    store = StateStore("file:///var/lib/pylog/state")
    store.committed_offsets("page_views")       # {partition: next offset} or {}
    store.latest_audit("page_views")            # AuditEntry | None (one file read)
    store.recent_audits("page_views")           # the newest entries, oldest first
    store.list_audits("page_views")             # [AuditEntry], the full history
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import time
from typing import Callable

from pylog.etl.audit_index import RECENT_AUDITS, AuditIndex
from pylog.etl.errors import LoaderError
from pylog.etl.fs import Storage
from pylog.etl.locks import TableLocks
from pylog.etl.model import AuditEntry, OffsetsSnapshot, TableLock, TablePlan, TaskDoneMarker, TaskRange


_SAFE = re.compile(r"[^A-Za-z0-9._-]")
_VERSION = re.compile(r"^\d{12}\.json$")
_AUDIT_NAME = re.compile(r"^(?P<ms>\d{13})-(?P<run>.+)\.json$")
KEEP_VERSIONS = 10
DAY_MS = 24 * 3600 * 1000
"""Audit entries the index keeps (newest first out); older ones stay in ``audit/``."""


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
        marker = self._read(self.marker_path(table, run_id, task_range), TaskDoneMarker.from_json)
        if marker is None:
            marker = self.folded_markers(table, run_id).get(task_range.name)
        return marker

    def write_marker(self, table: str, run_id: str, marker: TaskDoneMarker) -> None:
        self.storage.write_atomic(self.marker_path(table, run_id, marker.range), marker.to_json())

    def marker_names(self, table: str, run_id: str) -> set[str]:
        """Names (``TaskRange.name``) of the run's tasks with a done marker."""
        names = {name[:-len(".json")] for name in self.storage.list_dir(self._run(table, run_id, "done"))
                 if name.endswith(".json") and not name.startswith(".")}
        return names or set(self.folded_markers(table, run_id))

    def count_markers(self, table: str, run_id: str) -> int:
        files = sum(1 for name in self.storage.list_dir(self._run(table, run_id, "done"))
                    if name.endswith(".json") and not name.startswith("."))
        return files or len(self.folded_markers(table, run_id))

    def fold_markers(self, table: str, run_id: str, markers: list[TaskDoneMarker]) -> None:
        """Replace a committed run's marker files by one ``done.json`` (one file per run)."""
        self._check_guard()
        body = json.dumps({"markers": [json.loads(m.to_json()) for m in markers]}, sort_keys=True)
        self.storage.write_atomic(self._run(table, run_id, "done.json"), body.encode())
        self.storage.delete(self._run(table, run_id, "done"))

    def folded_markers(self, table: str, run_id: str) -> dict[str, TaskDoneMarker]:
        raw = self._read(self._run(table, run_id, "done.json"), json.loads)
        markers = [TaskDoneMarker.from_json(json.dumps(m).encode()) for m in (raw or {}).get("markers", ())]
        return {m.range.name: m for m in markers}

    def read_publish(self, table: str, run_id: str) -> list[list[str]] | None:
        raw = self._read(self._run(table, run_id, "publish.json"), json.loads)
        return raw["files"] if raw else None

    def write_publish(self, table: str, run_id: str, files: list[list[str]]) -> None:
        self._check_guard()
        self.storage.write_atomic(self._run(table, run_id, "publish.json"),
                                  json.dumps({"files": files}).encode())

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

    def record_failure(self, table: str, run_id: str, error: str) -> None:
        """Note that an attempt of ``run_id`` failed with ``error`` (replaces an older note)."""
        body = {"run_id": run_id, "at_ms": self.now_ms(), "error": error}
        self.storage.write_atomic(self._run(table, run_id, "failed.json"), json.dumps(body).encode())

    def read_failure(self, table: str, run_id: str) -> dict | None:
        """``{"run_id", "at_ms", "error"}`` of the last failed attempt of ``run_id``, or None."""
        return self._read(self._run(table, run_id, "failed.json"), json.loads)

    # -- audits --------------------------------------------------------------------------

    def write_audit(self, entry: AuditEntry) -> AuditEntry:
        """Record a committed run's entry in the index and in ``audit/``; returns the entry kept.

        A rerun of a finished commit keeps the first entry: commits are serialised by the
        table lock and a pending run is finished before any other, so an entry of this run
        is the index's newest.
        """
        self._check_guard()
        index = self._audit_index(entry.table)
        newest = index.newest
        kept = newest if newest is not None and newest.run_id == entry.run_id else None
        if kept is None:
            kept = entry
            self._write_next(entry.table, "audit-index", index.add(entry).to_json())
        path = self._audit_path(kept)
        if not self.storage.exists(path):
            self.storage.write_atomic(path, kept.to_json())
        return kept

    def list_audits(self, table: str) -> list[AuditEntry]:
        """Every audit entry of a table (or of the table a topic is loaded into), oldest first.

        Reads one file per run still within ``state_retention_days``: the full history,
        for ``pylog status --history``. :meth:`recent_audits` reads one file.
        """
        directory = self._table(self.resolve_table(table), "audit")
        return [AuditEntry.from_json(self.storage.read_bytes(self.storage.child(directory, name)))
                for name in self.storage.list_dir(directory)
                if name.endswith(".json") and not name.startswith(".")]

    def recent_audits(self, table: str) -> list[AuditEntry]:
        """The newest (up to RECENT_AUDITS) audit entries of a table, oldest first."""
        return list(self._audit_index(self.resolve_table(table)).recent)

    def latest_audit(self, table: str, kind: str | None = None) -> AuditEntry | None:
        """The newest audit entry of a table (of ``kind`` scheduled/backfill if given)."""
        index = self._audit_index(self.resolve_table(table))
        if kind is None:
            return index.newest
        found = index.latest(kind)
        if found is not None or index.complete:
            return found
        audits = [a for a in self.list_audits(table) if a.kind == kind]
        return audits[-1] if audits else None

    def audit_for_run(self, table: str, run_id: str) -> AuditEntry | None:
        """The audit entry of ``run_id`` from its file in ``audit/`` (the record; the index
        names it, else the directory is searched), or the index's copy once retention
        removed the file."""
        table = self.resolve_table(table)
        for audit in reversed(self._audit_index(table).recent):
            if audit.run_id == run_id:
                return self._read(self._audit_path(audit), AuditEntry.from_json) or audit
        directory = self._table(table, "audit")
        suffix = f"-{run_dir_name(run_id)}.json"
        for name in self.storage.list_dir(directory):
            if name.endswith(suffix) and _AUDIT_NAME.match(name):
                audit = self._read(self.storage.child(directory, name), AuditEntry.from_json)
                if audit is not None and audit.run_id == run_id:
                    return audit
        return None

    def _audit_path(self, entry: AuditEntry) -> str:
        name = f"{entry.committed_at_ms:013d}-{run_dir_name(entry.run_id)}.json"
        return self._table(entry.table, "audit", name)

    def _audit_index(self, table: str) -> AuditIndex:
        """The table's audit index; built from ``audit/`` for state written before it existed."""
        index = self._read_latest(table, "audit-index", AuditIndex.from_json, legacy=False)
        if index is not None:
            return index
        directory = self._table(table, "audit")
        names = [n for n in self.storage.list_dir(directory) if _AUDIT_NAME.match(n)]
        oldest = int(_AUDIT_NAME.match(names[0])["ms"]) if names else None
        index = AuditIndex([], {}, complete=len(names) <= RECENT_AUDITS, oldest_ms=oldest)
        for name in names[-RECENT_AUDITS:]:
            index = index.add(AuditEntry.from_json(self.storage.read_bytes(self.storage.child(directory, name))))
        return index

    # -- retention -----------------------------------------------------------------------

    def prune(self, table: str, retention_ms: int) -> int:
        """Delete the run directories and audit entries of runs committed before now - ``retention_ms``.

        Runs are found by their audit entries (written only at commit), oldest first, so
        this lists one directory and reads no entry -- and only once the oldest entry is
        a slack (a thirtieth of the retention, at most a day) past the horizon, so most
        commits list nothing. The pending run is never touched; the index keeps the
        newest entries. Returns how many runs were removed.
        """
        self._check_guard()
        horizon = self.now_ms() - retention_ms
        index = self._audit_index(table)
        if index.oldest_ms is not None and index.oldest_ms >= horizon - min(retention_ms // 30, DAY_MS):
            return 0
        pending = self.pending_run(table)
        keep = run_dir_name(pending) if pending else None
        directory = self._table(table, "audit")
        removed, oldest = 0, None
        for name in self.storage.list_dir(directory):
            m = _AUDIT_NAME.match(name)
            if not m:
                continue
            if int(m["ms"]) >= horizon:
                oldest = int(m["ms"])
                break  # names sort by commit time
            if m["run"] != keep:
                self.storage.delete(self._table(table, "runs", m["run"]))
            self.storage.delete(self.storage.child(directory, name))
            removed += 1
        self._write_next(table, "audit-index", index.with_oldest(oldest).to_json())
        return removed

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

    def _read_latest(self, table: str, kind: str, parse, legacy: bool = True):
        """Parse the highest ``<kind>/<seq>.json`` (or the older ``<kind>.json``); None if none."""
        directory = self._table(table, kind)
        versions = [n for n in self.storage.list_dir(directory) if _VERSION.match(n)]
        if versions:
            return parse(self.storage.read_bytes(self.storage.child(directory, versions[-1])))
        return self._read(self._table(table, f"{kind}.json"), parse) if legacy else None

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
