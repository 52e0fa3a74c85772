"""Crash tests: a child process appending in a loop is killed with SIGKILL at random
points; after each kill the log dir is loaded again (unclean: no marker) and checked."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from pylog.log import LogManager
from pylog.records.header import iter_batch_headers
from tests.log.crash_child import CONFIG, expected_batch
from tests.log.test_log import read_all

ROOT = Path(__file__).resolve().parents[2]


def run_child_until_killed(log_dir: Path, seed: int, first_tag: int, rng: random.Random) -> tuple[int, int]:
    """Start the child, let it append for a random while, SIGKILL it; return the last
    ``(flushed offset, next tag)`` it reported."""
    child = subprocess.Popen([sys.executable, "-m", "tests.log.crash_child", str(log_dir), str(seed),
                              str(first_tag)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().startswith("ready")
        # Wait for a random number of flush reports, then kill at a random moment.
        last = (0, first_tag)
        for _ in range(rng.randint(1, 40)):
            words = child.stdout.readline().split()
            assert words[0] == "flushed", words
            last = (int(words[1]), int(words[2]))
        time.sleep(rng.random() * 0.05)
        child.send_signal(signal.SIGKILL)
        for line in child.stdout:  # flushes reported before the kill landed
            words = line.split()
            last = (int(words[1]), int(words[2]))
    finally:
        child.kill()
        child.wait()
    assert child.returncode == -signal.SIGKILL
    return last


def check_log(log_dir: Path) -> tuple[int, int]:
    """Recover the dir; check every batch's bytes and offsets; return (end offset, next tag)."""
    manager = LogManager([log_dir], CONFIG)
    manager.load()
    log = manager.get("crash-test", 0)
    data = read_all(log)
    offset, tag = 0, 0
    for position, header in iter_batch_headers(data, verify_crc=True):
        assert header.base_offset == offset  # contiguous
        expected = expected_batch(tag)
        assert data[position + 8:position + header.size] == expected[8:]
        offset, tag = header.next_offset, tag + 1
    assert offset == log.log_end_offset
    manager.close()
    return offset, tag


def test_sigkill_at_random_points_loses_nothing_flushed(tmp_path):
    rng = random.Random(20261122)
    log_dir = tmp_path / "logs"
    tag = 0
    for round_number in range(6):
        flushed_offset, flushed_tag = run_child_until_killed(log_dir, round_number, tag, rng)
        end, tag = check_log(log_dir)
        assert end >= flushed_offset and tag >= flushed_tag
    assert tag > 6
