"""State store over file://: atomic JSON files, run directories, locks, audits."""

import pytest

from pylog.etl.errors import TableLockedError
from pylog.etl.fs import Storage
from pylog.etl.model import (AuditEntry, OffsetGap, OffsetsSnapshot, PartitionAudit, TablePlan,
                             TaskDoneMarker, TaskRange)
from pylog.etl.state import StateStore, run_dir_name


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_storage_atomic_write_and_exclusive_create(tmp_path):
    storage = Storage.from_uri(tmp_path.as_uri())
    path = storage.join("a", "b.json")
    storage.write_atomic(path, b"one")
    storage.write_atomic(path, b"two")
    assert storage.read_bytes(path) == b"two"
    assert storage.list_dir(storage.join("a")) == ["b.json"]  # no temporary files left
    assert storage.create_exclusive(storage.join("lock"), b"x")
    assert not storage.create_exclusive(storage.join("lock"), b"y")
    assert storage.read_bytes(storage.join("lock")) == b"x"
    with pytest.raises(ValueError):
        storage.join("a/b")


def test_run_dir_names_are_safe_and_distinct():
    assert run_dir_name("run-1") == "run-1"
    airflow = run_dir_name("scheduled__2026-11-22T10:00:00+00:00")
    assert ":" not in airflow and "+" not in airflow
    assert run_dir_name("a:b") != run_dir_name("a_b")


def test_plan_marker_offsets_audit_roundtrip(tmp_path):
    state = StateStore(tmp_path.as_uri(), clock=Clock())
    r = TaskRange("t", 0, 10, 20, leader_id=1)
    plan = TablePlan("r1", "scheduled", "tbl", "t", 5, (r,), {0: 10}, {0: 20},
                     gaps=(OffsetGap("t", 0, 5, 10, "deleted by retention"),))
    state.write_plan(plan)
    assert state.read_plan("tbl", "r1") == plan
    assert state.pending_run("tbl") == "r1"
    marker = TaskDoneMarker(r, 20, 9, 8, 1, 900, 300, ("f",), (), 0.5)
    state.write_marker("tbl", "r1", marker)
    assert state.read_marker("tbl", "r1", r) == marker and state.count_markers("tbl", "r1") == 1
    assert state.committed_offsets("tbl") == {}
    state.write_offsets(OffsetsSnapshot("tbl", "t", "r1", 7, {0: 20, 1: 3}))
    assert state.committed_offsets("tbl") == {0: 20, 1: 3}
    assert state.committed_offsets("t") == {0: 20, 1: 3}  # by topic name
    assert state.committed_offsets("other") == {}
    audit = AuditEntry("r1", "scheduled", "tbl", "t", 8, 9, 8, 1, 900, 300, 1.0, 0.5, (r,),
                       (PartitionAudit("t", 0, 10, 20, 9, 8, 1),), plan.gaps)
    state.write_audit(audit)
    state.write_audit(audit)  # a rerun keeps one entry
    assert state.list_audits("tbl") == [audit] and state.latest_audit("tbl") == audit
    assert state.latest_audit("tbl", kind="backfill") is None
    state.clear_pending("tbl", "r1")
    assert state.pending_run("tbl") is None


def test_lock_refuses_live_holder_and_breaks_stale_one(tmp_path):
    clock = Clock()
    state = StateStore(tmp_path.as_uri(), clock=clock)
    lock = state.acquire_lock("tbl", "sched-1", "scheduled", timeout_s=60)
    with pytest.raises(TableLockedError, match="sched-1"):
        state.acquire_lock("tbl", "backfill-1", "backfill", timeout_s=60)
    with pytest.raises(TableLockedError, match=f"already running .*pid {lock.pid}"):
        state.acquire_lock("tbl", "sched-1", "scheduled", timeout_s=60)  # its holder is alive
    clock.now += 30
    lock = state.heartbeat(lock, "tbl")
    assert state.read_lock("tbl").heartbeat_at_ms == lock.heartbeat_at_ms
    clock.now += 45  # 45 s since the heartbeat: still live
    with pytest.raises(TableLockedError):
        state.acquire_lock("tbl", "backfill-1", "backfill", timeout_s=60)
    clock.now += 30
    taken = state.acquire_lock("tbl", "backfill-1", "backfill", timeout_s=60)
    assert state.read_lock("tbl") == taken and taken.token != lock.token
    with pytest.raises(TableLockedError):
        state.heartbeat(lock, "tbl")
    state.release_lock("tbl", lock)  # not ours any more: nothing happens
    assert state.read_lock("tbl") == taken
    state.release_lock("tbl", taken)
    assert state.read_lock("tbl") is None
