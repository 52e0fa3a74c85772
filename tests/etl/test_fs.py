"""State files on a storage that replaces by delete + rename (HDFS, WebHDFS), crashing anywhere.

``HdfsLikeStorage`` is our ArrowStorage on file:// configured the way it runs on HDFS:
a rename refuses an existing target, so replacing a file deletes it first. ``crash_at``
makes the n-th rename raise :class:`Crash`, standing in for the process dying there.
"""

import os

import pytest

from pylog.etl.fs import ArrowStorage
from pylog.etl.model import OffsetsSnapshot, TablePlan, TaskRange
from pylog.etl.state import StateStore


class Crash(BaseException):
    pass


class HdfsLikeStorage(ArrowStorage):
    def __init__(self, uri: str) -> None:
        super().__init__(uri, atomic_replace=False)
        self.local = False  # no os.link: exclusive create is exists + rename, as on HDFS
        self.renames = 0
        self.crash_at: int | None = None

    def _rename(self, src: str, dst: str) -> None:
        self.renames += 1
        if self.renames == self.crash_at:
            raise Crash(f"crash before renaming {src} to {dst}")
        os.link(src, dst)  # refuses an existing target, like an HDFS rename
        os.unlink(src)


def store(tmp_path) -> tuple[StateStore, HdfsLikeStorage]:
    storage = HdfsLikeStorage(tmp_path.as_uri())
    return StateStore(tmp_path.as_uri(), storage=storage), storage


def snapshot(run: str, offset: int) -> OffsetsSnapshot:
    return OffsetsSnapshot("tbl", "t", run, offset, {0: offset, 1: offset + 1})


def test_write_atomic_by_delete_and_rename_can_lose_the_file(tmp_path):
    # The hazard the state store avoids: a crash between the delete and the rename.
    storage = HdfsLikeStorage(tmp_path.as_uri())
    path = storage.join("f.json")
    storage.write_atomic(path, b"one")
    storage.write_atomic(path, b"two")
    assert storage.read_bytes(path) == b"two"
    storage.crash_at = storage.renames + 1
    with pytest.raises(Crash):
        storage.write_atomic(path, b"three")
    assert not storage.exists(path)


def test_committed_offsets_survive_a_crash_at_every_rename(tmp_path):
    state, storage = store(tmp_path)
    state.write_offsets(snapshot("r1", 10))
    before = storage.renames
    state.write_offsets(snapshot("r2", 20))
    steps = storage.renames - before
    assert steps >= 1
    for step in range(1, steps + 1):
        state, storage = store(tmp_path / f"crash{step}")
        state.write_offsets(snapshot("r1", 10))
        storage.crash_at = storage.renames + step
        with pytest.raises(Crash):
            state.write_offsets(snapshot("r2", 20))
        assert state.committed_offsets("tbl") == {0: 10, 1: 11}  # the old snapshot, never {}
        state.write_offsets(snapshot("r2", 20))  # the rerun commits
        assert state.offsets_snapshot("tbl").run_id == "r2"


def test_many_commits_keep_the_newest_and_prune_old_versions(tmp_path):
    state, storage = store(tmp_path)
    for n in range(25):
        state.write_offsets(snapshot(f"r{n}", n))
    assert state.committed_offsets("tbl") == {0: 24, 1: 25}
    versions = storage.list_dir(storage.join("tables", "tbl", "offsets"))
    assert len(versions) == 10 and versions[-1] == "000000000025.json"


def test_offsets_json_of_earlier_versions_is_still_read(tmp_path):
    state, storage = store(tmp_path)
    storage.write_atomic(storage.join("tables", "tbl", "offsets.json"), snapshot("old", 5).to_json())
    assert state.committed_offsets("tbl") == {0: 5, 1: 6}
    state.write_offsets(snapshot("new", 7))
    assert state.committed_offsets("tbl") == {0: 7, 1: 8}


def plan(run_id: str) -> TablePlan:
    return TablePlan(run_id, "scheduled", "tbl", "t", 1, (TaskRange("t", 0, 0, 5),), {0: 0}, {0: 5})


def test_a_plan_never_exists_without_being_pending(tmp_path):
    state, storage = store(tmp_path)
    before = storage.renames
    state.write_plan(plan("x"))
    steps = storage.renames - before
    for step in range(1, steps + 1):
        state, storage = store(tmp_path / f"crash{step}")
        state.write_plan(plan("earlier"))
        state.clear_pending("tbl", "earlier")
        storage.crash_at = storage.renames + step
        with pytest.raises(Crash):
            state.write_plan(plan("x"))
        if state.read_plan("tbl", "x") is not None:
            assert state.pending_run("tbl") == "x"
        assert state.pending_run("tbl") in ("x", None)  # never a stale id, never missing mid-write
        state.write_plan(plan("x"))
        assert state.pending_run("tbl") == "x" and state.read_plan("tbl", "x") == plan("x")


def test_pending_survives_a_crash_while_being_cleared(tmp_path):
    state, storage = store(tmp_path)
    state.write_plan(plan("x"))
    storage.crash_at = storage.renames + 1
    with pytest.raises(Crash):
        state.clear_pending("tbl", "x")
    assert state.pending_run("tbl") == "x"  # still pending: the rerun finishes it
    state.clear_pending("tbl", "x")
    assert state.pending_run("tbl") is None
    state.write_plan(plan("y"))
    assert state.pending_run("tbl") == "y"
