"""The table lock is exclusive: tokens, one breaker per stale generation, no live takeover."""

import subprocess
import sys
import threading

import pytest

from pylog.etl.errors import TableLockedError
from pylog.etl.job import TableLockHolder
from pylog.etl.model import OffsetsSnapshot
from pylog.etl.state import StateStore
from tests.etl.test_state import Clock


def test_two_breakers_of_a_stale_lock_cannot_both_take_it(tmp_path):
    clock = Clock()
    a, b = StateStore(tmp_path.as_uri(), clock=clock), StateStore(tmp_path.as_uri(), clock=clock)
    StateStore(tmp_path.as_uri(), clock=clock).acquire_lock("tbl", "dead", "scheduled", timeout_s=60)
    clock.now += 120
    seen_by_a = a.read_lock("tbl")  # a found the lock stale ...
    taken_by_b = b.acquire_lock("tbl", "run-b", "scheduled", timeout_s=60)  # ... b broke it first
    assert not a.locks.end_generation("tbl", seen_by_a)  # a's break of the same generation loses
    assert a.read_lock("tbl") == taken_by_b
    with pytest.raises(TableLockedError, match="run-b"):
        a.acquire_lock("tbl", "run-a", "scheduled", timeout_s=60)


def test_racing_breakers_end_with_exactly_one_holder(tmp_path):
    clock = Clock()
    StateStore(tmp_path.as_uri(), clock=clock).acquire_lock("tbl", "dead", "scheduled", timeout_s=60)
    clock.now += 120
    winners, losers, start = [], [], threading.Barrier(6)

    def contend(n: int) -> None:
        state = StateStore(tmp_path.as_uri(), clock=clock)
        start.wait()
        try:
            winners.append(state.acquire_lock("tbl", f"run-{n}", "scheduled", timeout_s=60))
        except TableLockedError:
            losers.append(n)

    threads = [threading.Thread(target=contend, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(winners) == 1 and len(losers) == 5
    assert StateStore(tmp_path.as_uri(), clock=clock).read_lock("tbl") == winners[0]


def hold_lock_and_exit(state_uri: str, run_id: str) -> int:
    """Take the lock in a child process that then dies without releasing it; its pid."""
    code = ("import os, sys; from pylog.etl.state import StateStore; "
            f"StateStore({state_uri!r}).acquire_lock('tbl', {run_id!r}, 'scheduled', 600); "
            "print(os.getpid()); sys.stdout.flush(); os._exit(0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(done.stdout)


def test_same_run_id_takes_over_only_from_a_dead_holder(tmp_path):
    state = StateStore(tmp_path.as_uri())
    pid = hold_lock_and_exit(tmp_path.as_uri(), "crash-1")
    assert state.read_lock("tbl").pid == pid
    with pytest.raises(TableLockedError, match="crash-1"):  # another run waits for the timeout
        state.acquire_lock("tbl", "other", "scheduled", timeout_s=600)
    mine = state.acquire_lock("tbl", "crash-1", "scheduled", timeout_s=600)  # holder is gone
    assert state.read_lock("tbl") == mine and mine.pid != pid
    with pytest.raises(TableLockedError, match=f"'crash-1' is already running .*pid {mine.pid}"):
        state.acquire_lock("tbl", "crash-1", "scheduled", timeout_s=600)  # a live one: never


def test_a_holder_whose_lock_was_broken_can_neither_commit_nor_release_it(tmp_path):
    clock = Clock()
    old_store = StateStore(tmp_path.as_uri(), clock=clock)
    old = old_store.acquire_lock("tbl", "zombie", "scheduled", timeout_s=60)
    guarded = old_store.guarded(lambda: old_store.verify_lock("tbl", old))
    guarded.write_offsets(OffsetsSnapshot("tbl", "t", "zombie", 1, {0: 5}))  # holds it: allowed
    clock.now += 120
    new = StateStore(tmp_path.as_uri(), clock=clock).acquire_lock("tbl", "fresh", "scheduled", timeout_s=60)
    with pytest.raises(TableLockedError, match="'zombie' lost its lock .*'fresh'"):
        guarded.write_offsets(OffsetsSnapshot("tbl", "t", "zombie", 2, {0: 9}))
    for step in (lambda: guarded.write_plan(None), lambda: guarded.mark_committed("tbl", "zombie"),
                 lambda: guarded.clear_pending("tbl", "zombie")):
        with pytest.raises(TableLockedError):
            step()
    assert old_store.committed_offsets("tbl") == {0: 5}
    with pytest.raises(TableLockedError):
        old_store.heartbeat(old, "tbl")
    old_store.release_lock("tbl", old)
    assert old_store.read_lock("tbl") == new


def test_the_driver_stops_when_its_heartbeat_finds_the_lock_lost(tmp_path):
    clock = Clock()
    state = StateStore(tmp_path.as_uri(), clock=clock)
    with TableLockHolder(state, "tbl", "run-1", "scheduled", timeout_s=1) as held:
        held.check()  # still ours
        thief = StateStore(tmp_path.as_uri(), clock=lambda: clock.now + 10)
        thief.acquire_lock("tbl", "run-2", "scheduled", timeout_s=1)
        held._thread.join(timeout=60)  # the heartbeat thread ends once it sees the loss
        assert held.lost is not None and "run-2" in str(held.lost)
        with pytest.raises(TableLockedError, match="'run-1' lost its lock"):
            held.check()
    assert state.read_lock("tbl").run_id == "run-2"  # leaving the block did not release it
