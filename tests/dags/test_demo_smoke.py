"""``pylog demo`` end to end, as ``make demo`` runs it, with a small number of events.

A real broker, ``airflow db migrate`` + ``airflow dags test pylog_load`` spark-submitting
the loader, then the analyst's commands: the output must show every step, the queries'
results and ``demo OK``, and no process the demo started may outlive it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from pylog.orchestration.demo import PARTITIONS, SPARK_MASTER, TOPIC
from pylog.testing.spark import spark_env

pytestmark = pytest.mark.slow

EVENTS = 200


def processes_with(token: str) -> list[int]:
    """Pids of live processes whose environment holds ``token`` (the demo's descendants)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if token.encode() in environ and state != "Z":
            found.append(int(entry.name))
    return found


def wait_for_no_processes(token: str, timeout_s: float = 30) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while (left := processes_with(token)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def test_pylog_demo_end_to_end(tmp_path):
    token = f"PYLOG_DEMO_SMOKE={uuid.uuid4().hex}"
    env = spark_env()
    env[token.split("=")[0]] = token.split("=")[1]
    workdir = tmp_path / "demo"
    result = subprocess.run(
        [sys.executable, "-m", "pylog.cli.main", "demo", "--events", str(EVENTS), "--workdir", str(workdir)],
        env=env, capture_output=True, text=True, timeout=1200, stdin=subprocess.DEVNULL)
    output = result.stdout
    assert result.returncode == 0, output[-4000:] + result.stderr[-4000:]
    assert output.rstrip().splitlines()[-1] == "demo OK"
    assert "demo FAILED" not in output
    assert not wait_for_no_processes(token), "processes left running by the demo"

    assert re.search(rf"2\. produced {EVENTS} page views .* into {TOPIC}: "
                     + ", ".join(rf"partition {p}: \d+" for p in range(PARTITIONS)), output)
    assert f"spark-submit on {SPARK_MASTER}" in output
    assert re.search(r"DAG run \S+: success;", output)
    assert f"exactly once: {EVENTS} produced, {EVENTS} rows, {EVENTS} distinct (partition, offset): ok" in output

    # the per-hour query: a header, then hours whose views add up to every event
    per_hour = output.split("$ pylog query \"SELECT strftime", 1)[1].split("\n$ pylog", 1)[0]
    lines = per_hour.splitlines()[1:]
    header = next(i for i, line in enumerate(lines) if line.split()[:3] == ["hour", "views", "users"])
    rows = [line.split() for line in lines[header + 1:] if re.match(r"\d{4}-\d\d-\d\d \d\d:00 ", line)]
    assert rows and sum(int(row[2]) for row in rows) == EVENTS
    # the referrers query and the status table
    referrers = output.split("$ pylog query \"SELECT coalesce(referrer", 1)[1].split("\n$ pylog", 1)[0]
    assert "(direct)" in referrers or "https://" in referrers
    status = output.split("\n$ pylog status", 1)[1]
    lagging = [line.split() for line in status.splitlines() if line.startswith(f"{TOPIC}  ")]
    assert len([row for row in lagging if row[-1] == "0"]) >= PARTITIONS
    assert (workdir / "airflow-dags-test.log").is_file()
