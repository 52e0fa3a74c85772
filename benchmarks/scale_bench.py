"""The loader at scale, measured: 10,000 partitions, 3 brokers, hourly runs, a year.

    python benchmarks/scale_bench.py [--topics 200] [--partitions 50] [--runs 8760]

Figures for the README's "At scale" section, each from real code:

* **plan** -- a real ZooKeeper and three pylog brokers behind counting proxies (as in
  ``planning_bench.py``), ``--topics`` x ``--partitions`` partitions, a few records in
  each; ``plan_scheduled_many`` over every table: seconds, requests per broker, and the
  driver's peak Python memory while planning (tracemalloc).
* **commit** -- one hourly run of one table holding all those partitions (one task
  range and one staged Parquet file per partition) committed by ``pylog.etl.commit``:
  seconds, state files the run leaves, the driver's peak memory.
* **a year** -- ``--runs`` hourly runs of committed state with ``state_retention_days``
  30, then one more real commit (which applies retention): state files kept, and the
  files a year would leave without retention.

Asserts nothing; prints one line per figure.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import tracemalloc
import uuid
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from planning_bench import measure  # noqa: E402
from state_bench import write_history  # noqa: E402

from pylog.client import SimpleConsumer  # noqa: E402
from pylog.etl.commit import commit  # noqa: E402
from pylog.etl.config import TopicConfig, parse_config  # noqa: E402
from pylog.etl.fs import Storage  # noqa: E402
from pylog.etl.layout import staging_root  # noqa: E402
from pylog.etl.model import TablePlan, TaskDoneMarker, TaskRange  # noqa: E402
from pylog.etl.planner import plan_scheduled_many  # noqa: E402
from pylog.etl.state import StateStore  # noqa: E402
from pylog.etl.writer import parquet_bytes  # noqa: E402
from pylog.testing.counting_proxy import ProxiedCluster  # noqa: E402
from pylog.testing.zookeeper import running_zookeeper  # noqa: E402

HOUR_MS = 3_600_000
RETENTION_MS = 30 * 24 * HOUR_MS
TABLE = "ev"  # the table state_bench.write_history writes


def files_under(path: Path) -> int:
    return sum(1 for p in path.rglob("*") if p.is_file())


def produce_a_few(bootstrap: str, names: list[str], partitions: int) -> None:
    """Two records in every partition, so every partition gets a task range."""
    import confluent_kafka

    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "log_level": 3})
    for name in names:
        for partition in range(partitions):
            for _ in range(2):
                producer.produce(name, value=b'{"n": 1}', partition=partition)
        producer.poll(0)
    assert producer.flush(300) == 0


def plan_figures(tmp: Path, topics: int, partitions: int) -> None:
    names = [f"scale{i:04d}" for i in range(topics)]
    configs = [TopicConfig(topic=n, table=n, max_records_per_task=1_000_000) for n in names]
    with running_zookeeper(tmp) as zk:
        cluster = ProxiedCluster(tmp, f"{zk.connect_string}/scale-{uuid.uuid4().hex[:6]}",
                                 extra={"max.partitions.per.topic": max(partitions, 10000)}).start()
        try:
            started = time.perf_counter()
            cluster.create_topics(names, partitions, batch=10, timeout=1800)
            print(f"setup: {topics * partitions:,} partitions ({topics} topics) on 3 brokers in "
                  f"{time.perf_counter() - started:.0f} s", flush=True)
            produce_a_few(cluster.bootstrap, names, partitions)
            state = StateStore((tmp / "plan-state").as_uri())

            def work():
                with SimpleConsumer(cluster.bootstrap, client_id="scale") as consumer:
                    tracemalloc.start()
                    try:
                        plans = plan_scheduled_many("r1", configs, consumer, state)
                        return plans, tracemalloc.get_traced_memory()[1]
                    finally:
                        tracemalloc.stop()

            seconds, requests, (plans, peak) = measure(cluster, "scale", work)
            ranges = sum(len(p.ranges) for p in plans)
            per_api = ", ".join(f"{name} {sum(b.values())} ({'/'.join(str(n) for _, n in sorted(b.items()))})"
                                for name, b in requests.items() if sum(b.values()))
            print(f"plan: {topics * partitions:,} partitions in {seconds:.2f} s; requests {per_api} "
                  f"(per broker); driver peak {peak / 1e6:.0f} MB (Python objects); "
                  f"{ranges:,} ranges planned", flush=True)
        finally:
            cluster.close()


def commit_figures(tmp: Path, partitions: int) -> None:
    config = parse_config({"source": {"bootstrap_servers": "127.0.0.1:9"},
                           "warehouse": (tmp / "warehouse").as_uri(), "state": (tmp / "state").as_uri(),
                           "topics": {TABLE: {"format": "raw"}}})
    state, warehouse = StateStore(config.state), Storage.from_uri(config.warehouse)
    run_id = "hourly-0001"
    ranges = tuple(TaskRange(TABLE, p, 0, 100) for p in range(partitions))
    plan = TablePlan(run_id, "scheduled", TABLE, TABLE, state.now_ms(), ranges,
                     {r.partition: 0 for r in ranges}, {r.partition: 100 for r in ranges})
    state.write_plan(plan)
    data = parquet_bytes(pa.table({"_partition": [0] * 100, "_offset": list(range(100))}))
    markers = []
    for r in ranges:  # what the map tasks leave: a staged file and a done marker each
        path = warehouse.child(staging_root(warehouse, run_id, TABLE), "dt=2026-11-20", "hr=07",
                               f"{r.name}.parquet")
        warehouse.write_atomic(path, data)
        marker = TaskDoneMarker(r, r.end, 100, 100, 0, 10_000, len(data), (path,), (), 0.1)
        state.write_marker(TABLE, run_id, marker)
        markers.append(marker)
    during = files_under(tmp / "state")
    tracemalloc.start()
    started = time.perf_counter()
    commit(state, warehouse, plan, config.topics[0], markers, retention_ms=RETENTION_MS)
    seconds = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    after = files_under(tmp / "state")
    published = files_under(tmp / "warehouse" / TABLE)
    print(f"commit: one run of {partitions:,} ranges in {seconds:.2f} s ({published:,} files published); "
          f"state files {during:,} while the run is pending, {after:,} after the commit (done markers "
          f"folded); driver peak {peak / 1e6:.0f} MB", flush=True)


def year_figures(tmp: Path, runs: int) -> None:
    root = tmp / "year"
    now_ms = int(time.time() * 1000)
    started = time.perf_counter()
    write_history(root / "state", runs, now_ms, spacing_ms=HOUR_MS)
    without = files_under(root / "state")
    config = parse_config({"source": {"bootstrap_servers": "127.0.0.1:9"},
                           "warehouse": (root / "warehouse").as_uri(), "state": (root / "state").as_uri(),
                           "topics": {TABLE: {"format": "raw"}}})
    state, warehouse = StateStore(config.state), Storage.from_uri(config.warehouse)
    r = TaskRange(TABLE, 0, runs * 10, runs * 10 + 10)
    snapshot = state.offsets_snapshot(TABLE)
    plan = TablePlan("hourly-next", "scheduled", TABLE, TABLE, state.now_ms(), (r,), {0: r.start}, {0: r.end},
                     base_run_id=snapshot.run_id if snapshot else None,
                     base_offsets=dict(snapshot.offsets) if snapshot else {})
    state.write_plan(plan)
    marker = TaskDoneMarker(r, r.end, 10, 10, 0, 1000, 0, (), (), 0.1)
    state.write_marker(TABLE, plan.run_id, marker)
    commit_started = time.perf_counter()
    commit(state, warehouse, plan, config.topics[0], [marker], retention_ms=RETENTION_MS)
    seconds = time.perf_counter() - commit_started
    kept = files_under(root / "state")
    print(f"a year: {runs:,} hourly runs ({time.perf_counter() - started:.0f} s to write) leave {without:,} "
          f"state files without retention; the next commit took {seconds * 1000:.0f} ms and with "
          f"state_retention_days 30 kept {kept:,} files", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=50, help="per topic")
    parser.add_argument("--runs", type=int, default=24 * 365)
    args = parser.parse_args()
    total = args.topics * args.partitions
    with tempfile.TemporaryDirectory(prefix="pylog-scale-") as tmp:
        plan_figures(Path(tmp), args.topics, args.partitions)
        commit_figures(Path(tmp), total)
        year_figures(Path(tmp), args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
