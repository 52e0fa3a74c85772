"""The table lock: at most one run (scheduled or backfill) works on a table at a time.

Files under ``tables/<table>/`` (paths built by the state store)::

    lock.json                      TableLock of the holder, created exclusively, never
                                   rewritten; ``token`` is unique to the holder
    lock-beats/<token>.<ms>.beat   heartbeats: each beat creates a new file, then deletes
                                   the holder's older ones (the newest one counts)
    lock-ends/<token>              created exclusively by whoever ends the generation
                                   ``token`` (its holder releasing, or a run breaking it
                                   when stale); only that process deletes lock.json

Because lock.json is only created exclusively and only deleted by the single owner of
its ``lock-ends`` marker, two runs can never both believe they took the table: two
breakers of the same stale lock race for one marker, and a holder that comes back after
its lock was broken cannot delete or overwrite its successor's lock. A holder notices
the loss at its next heartbeat or :meth:`TableLocks.verify` (done before every commit
step) and stops.

A lock is stale when its newest heartbeat is older than the timeout. A rerun of the
same run id may also take the lock over once its holder is provably dead: same host,
and the holder's process is gone. A live holder is never taken over, whatever the run id.
"""

from __future__ import annotations

import json
import os
import re
import socket
import uuid
from typing import Callable

from pylog.etl.errors import TableLockedError
from pylog.etl.fs import Storage
from pylog.etl.model import TableLock

_BEAT = re.compile(r"^(?P<token>[\w-]+)\.(?P<ms>\d{13})\.beat$")
END_MARKER_RETENTION_MS = 7 * 24 * 3600 * 1000
"""``lock-ends`` markers of generations older than this are pruned (a week)."""


class TableLocks:
    """Lock operations over a Storage; ``table_path(table, *parts)`` names the files."""

    def __init__(self, storage: Storage, table_path: Callable[..., str], now_ms: Callable[[], int]) -> None:
        self.storage = storage
        self._path = table_path
        self.now_ms = now_ms

    # -- reading -------------------------------------------------------------------------

    def read(self, table: str) -> TableLock | None:
        """The lock with its newest heartbeat, or None when the table is free."""
        held = self._read_file(table)
        if held is None:
            return None
        beats = [int(m["ms"]) for m in map(_BEAT.match, self.storage.list_dir(self._path(table, "lock-beats")))
                 if m and m["token"] == held.token]
        beat = max([held.heartbeat_at_ms, *beats])
        return TableLock(held.run_id, held.kind, held.host, held.pid, held.acquired_at_ms, beat, held.token)

    def _read_file(self, table: str) -> TableLock | None:
        try:
            held = TableLock.from_json(self.storage.read_bytes(self._path(table, "lock.json")))
        except FileNotFoundError:
            return None
        if not held.token:  # written before tokens existed
            held = TableLock(held.run_id, held.kind, held.host, held.pid, held.acquired_at_ms,
                             held.heartbeat_at_ms, f"{held.acquired_at_ms:013d}-{held.pid}-legacy")
        return held

    # -- taking and giving up --------------------------------------------------------------

    def acquire(self, table: str, run_id: str, kind: str, timeout_s: float) -> TableLock:
        """Take the table for ``run_id``, breaking a stale lock.

        Raises TableLockedError naming the holder (run, host, pid) when a live run holds
        it -- also when that run has the same run id (an earlier attempt still running).
        """
        now = self.now_ms()
        mine = TableLock(run_id, kind, socket.gethostname(), os.getpid(), now, now,
                         f"{now:013d}-{uuid.uuid4().hex}")
        path = self._path(table, "lock.json")
        for _ in range(5):
            if self.storage.create_exclusive(path, mine.to_json()):
                self._prune_ends(table)
                return mine
            held = self.read(table)
            if held is None:
                continue  # released meanwhile: try again
            if not self._is_stale(held, run_id, timeout_s):
                raise TableLockedError(_held_message(table, held, run_id, kind, timeout_s, self.now_ms()))
            if not self.end_generation(table, held):
                raise TableLockedError(
                    f"table {table}: the stale lock of run {held.run_id!r} (host {held.host}, pid "
                    f"{held.pid}) is being broken by another run; retry. If no run is starting, "
                    f"delete {path}.")
        raise TableLockedError(f"table {table}: could not take the lock at {path}; other runs keep taking it")

    def release(self, table: str, lock: TableLock) -> None:
        """Give the table up if ``lock`` still holds it; nothing otherwise."""
        held = self._read_file(table)
        if held is not None and held.token == lock.token:
            self.end_generation(table, held)

    def end_generation(self, table: str, held: TableLock) -> bool:
        """Delete ``held``'s lock file if this call wins its end marker; True when it did.

        False: another process ended (or is ending) that generation; nothing was touched.
        """
        marker = self._path(table, "lock-ends", held.token)
        body = json.dumps({"run_id": held.run_id, "ended_at_ms": self.now_ms(),
                           "by_host": socket.gethostname(), "by_pid": os.getpid()}).encode()
        if not self.storage.create_exclusive(marker, body):
            return False
        # Only the marker's creator reaches this line for generation ``held.token``, and
        # nobody else deletes lock.json, so the file is still ``held``'s.
        self.storage.delete(self._path(table, "lock.json"))
        self._delete_beats(table, held.token, keep_ms=None)
        return True

    # -- while holding it ----------------------------------------------------------------

    def verify(self, table: str, lock: TableLock) -> None:
        """Raise TableLockedError unless ``lock`` still holds the table."""
        held = self._read_file(table)
        if held is None or held.token != lock.token:
            now = f"run {held.run_id!r} (host {held.host}, pid {held.pid})" if held else "nobody"
            raise TableLockedError(
                f"table {table}: run {lock.run_id!r} lost its lock (it is held by {now} now), so it "
                f"stops before committing anything more; rerun it")

    def heartbeat(self, table: str, lock: TableLock) -> TableLock:
        """Refresh ``lock``'s heartbeat; raises TableLockedError if it was taken from us."""
        self.verify(table, lock)
        now = self.now_ms()
        beat = self._path(table, "lock-beats", f"{lock.token}.{now:013d}.beat")
        self.storage.create_exclusive(beat, b"")  # False: a beat of this millisecond exists
        self._delete_beats(table, lock.token, keep_ms=now)
        self.verify(table, lock)  # broken between the two checks: the beat is harmless
        return TableLock(lock.run_id, lock.kind, lock.host, lock.pid, lock.acquired_at_ms, now, lock.token)

    # -- helpers -------------------------------------------------------------------------

    def _is_stale(self, held: TableLock, run_id: str, timeout_s: float) -> bool:
        if self.now_ms() - held.heartbeat_at_ms > timeout_s * 1000:
            return True
        # The same run id again: its earlier attempt may be provably dead (same host, no process).
        return held.run_id == run_id and held.host == socket.gethostname() and not _process_alive(held.pid)

    def _delete_beats(self, table: str, token: str, keep_ms: int | None) -> None:
        directory = self._path(table, "lock-beats")
        for name in self.storage.list_dir(directory):
            m = _BEAT.match(name)
            if m and m["token"] == token and (keep_ms is None or int(m["ms"]) < keep_ms):
                self.storage.delete(self.storage.child(directory, name))

    def _prune_ends(self, table: str) -> None:
        """Forget end markers of generations long gone (their holders cannot come back)."""
        directory = self._path(table, "lock-ends")
        horizon = self.now_ms() - END_MARKER_RETENTION_MS
        for name in self.storage.list_dir(directory):
            stamp = name.split("-", 1)[0]
            if stamp.isdigit() and int(stamp) < horizon:
                self.storage.delete(self.storage.child(directory, name))


def _held_message(table: str, held: TableLock, run_id: str, kind: str, timeout_s: float, now_ms: int) -> str:
    age_s = (now_ms - held.heartbeat_at_ms) / 1000
    who = f"host {held.host}, pid {held.pid}, last heartbeat {age_s:.0f}s ago"
    if held.run_id == run_id:
        return (f"table {table}: run {run_id!r} is already running ({who}); two attempts of one run "
                f"must not load the table at once. Retry when it has finished (its lock expires "
                f"{timeout_s:.0f}s after its last heartbeat).")
    return (f"table {table} is locked by {held.kind} run {held.run_id!r} ({who}); a {kind} load of "
            f"the same table cannot run at the same time. Retry when it has finished "
            f"(a dead run's lock expires after {timeout_s:.0f}s).")


def _process_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True
