"""The loader's commit as the state store's history grows: after 10 and after 10,000 runs.

    python benchmarks/state_bench.py [--history 10 10000] [--commits 5]

For each history size, in a fresh temporary directory (file://): write the state that
many committed runs leave (an audit entry, plan, folded done markers and committed
marker each, within ``state_retention_days`` so retention removes nothing and every
entry stays), then commit ``--commits`` scheduled runs of 4 ranges each through
``pylog.etl.commit.commit`` -- offsets snapshot, publish of the staged Parquet files,
audit index, fold, retention -- and time each. Also times ``latest_audit`` (what
``pylog status`` and ``pylog tables`` read) against ``list_audits`` (``--history``).
Prints medians and the ratio large/small; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pylog.etl.commit import commit  # noqa: E402
from pylog.etl.config import parse_config  # noqa: E402
from pylog.etl.fs import Storage  # noqa: E402
from pylog.etl.layout import staging_root  # noqa: E402
from pylog.etl.model import AuditEntry, PartitionAudit, TablePlan, TaskDoneMarker, TaskRange  # noqa: E402
from pylog.etl.state import StateStore  # noqa: E402
from pylog.etl.writer import parquet_bytes  # noqa: E402

TABLE = "ev"
PARTITIONS = 4
RETENTION_MS = 30 * 24 * 3_600_000


def write_history(root: Path, runs: int, end_ms: int, spacing_ms: int = 60_000) -> None:
    """The state ``runs`` committed runs leave, one every ``spacing_ms`` up to ``end_ms``."""
    table = root / "tables" / TABLE
    (table / "audit").mkdir(parents=True)
    store = StateStore(root.as_uri(), clock=lambda: end_ms / 1000)
    for i in range(runs):
        run_id, at_ms = f"old-{i:06d}", end_ms - (runs - i) * spacing_ms
        r = TaskRange(TABLE, 0, i * 10, i * 10 + 10)
        entry = AuditEntry(run_id, "scheduled", TABLE, TABLE, at_ms, 10, 10, 0, 1000, 900, 1.0, 0.5, (r,),
                           (PartitionAudit(TABLE, 0, i * 10, i * 10 + 10, 10, 10, 0),), ())
        if i == runs - 1:
            store.write_audit(entry)  # builds the audit index
            continue
        (table / "audit" / f"{at_ms:013d}-{run_id}.json").write_bytes(entry.to_json())
        run_dir = table / "runs" / run_id
        run_dir.mkdir(parents=True)
        (run_dir / "plan.json").write_text("{}")
        (run_dir / "done.json").write_text(json.dumps({"markers": []}))
        (run_dir / "committed.json").write_text(json.dumps({"run_id": run_id, "at_ms": at_ms}))


def one_commit(state: StateStore, warehouse: Storage, config, n: int, offsets: dict[int, int]) -> float:
    """Plan, stage and mark ``PARTITIONS`` ranges of 100 records, then time the commit alone."""
    topic = config.topics[0]
    run_id = f"bench-{n}"
    snapshot = state.offsets_snapshot(TABLE)
    ranges = tuple(TaskRange(TABLE, p, offsets.get(p, 0), offsets.get(p, 0) + 100) for p in range(PARTITIONS))
    plan = TablePlan(run_id, "scheduled", TABLE, TABLE, state.now_ms(), ranges,
                     {r.partition: r.start for r in ranges}, {r.partition: r.end for r in ranges},
                     base_run_id=snapshot.run_id if snapshot else None,
                     base_offsets=dict(snapshot.offsets) if snapshot else {})
    state.write_plan(plan)
    data = parquet_bytes(pa.table({"_partition": [0] * 100, "_offset": list(range(100))}))
    markers = []
    for r in ranges:
        path = warehouse.child(staging_root(warehouse, run_id, TABLE), "dt=2026-11-20", "hr=07", f"{r.name}.parquet")
        warehouse.write_atomic(path, data)
        marker = TaskDoneMarker(r, r.end, 100, 100, 0, 10_000, len(data), (path,), (), 0.1)
        state.write_marker(TABLE, run_id, marker)
        markers.append(marker)
    started = time.perf_counter()
    commit(state, warehouse, plan, topic, markers, retention_ms=RETENTION_MS)
    seconds = time.perf_counter() - started
    offsets.update(plan.end_offsets)
    return seconds


def measure(history: int, commits: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        config = parse_config({"source": {"bootstrap_servers": "127.0.0.1:9"},
                               "warehouse": (root / "warehouse").as_uri(), "state": (root / "state").as_uri(),
                               "topics": {TABLE: {"format": "raw"}}})
        now_ms = int(time.time() * 1000)
        write_history(root / "state", history, now_ms)
        state, warehouse = StateStore(config.state), Storage.from_uri(config.warehouse)
        offsets: dict[int, int] = {}
        times = [one_commit(state, warehouse, config, n, offsets) for n in range(commits)]
        started = time.perf_counter()
        state.latest_audit(TABLE)
        latest = time.perf_counter() - started
        started = time.perf_counter()
        entries = len(state.list_audits(TABLE))
        full = time.perf_counter() - started
        return {"commit": statistics.median(times), "latest": latest, "history": full, "entries": entries}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", type=int, nargs=2, default=[10, 10_000], metavar=("SMALL", "LARGE"))
    parser.add_argument("--commits", type=int, default=5)
    args = parser.parse_args()
    results = {}
    for history in args.history:
        results[history] = r = measure(history, args.commits)
        print(f"after {history:6,} runs: commit {r['commit'] * 1000:7.1f} ms (median of {args.commits}), "
              f"latest_audit {r['latest'] * 1000:6.1f} ms, list_audits ({r['entries']:,} entries) "
              f"{r['history'] * 1000:8.1f} ms")
    small, large = (results[h] for h in args.history)
    print(f"commit ratio {args.history[1]:,}/{args.history[0]:,} runs: {large['commit'] / small['commit']:.2f}x; "
          f"latest_audit ratio: {large['latest'] / small['latest']:.2f}x; "
          f"full history ratio: {large['history'] / small['history']:.1f}x")


if __name__ == "__main__":
    main()
