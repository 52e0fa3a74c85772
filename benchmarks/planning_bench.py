"""Planning cost: seconds and requests to plan many partitions on a three-broker cluster.

    python benchmarks/planning_bench.py [--topics 200] [--partitions 50] [--legacy-topics 20]

A real ZooKeeper and three pylog brokers (replication factor 1), each behind a counting
TCP proxy that it advertises (``pylog/testing/counting_proxy.py``), so every request a
client sends is counted per broker. Timings include the proxy hop. Measured, each with a
fresh consumer (no cached metadata or connections):

* **batched** -- ``plan_scheduled_many`` over every table: one Metadata request for all
  topics, two ListOffsets per leader (earliest, latest), leaders in parallel.
* **per table** -- ``plan_scheduled`` table after table, as ``run_load`` calls it (one
  Metadata and two ListOffsets per leader for each table).
* **old** -- the previous planner (earliest and latest asked per partition, one after
  the other), on the first ``--legacy-topics`` topics only; its plans are compared with
  the batched ones for the same topics.
* **tasks** -- ``--tasks`` map-task style reads (one small fetch each), a new
  SimpleConsumer per task (the old task.py) next to ``shared_consumer``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pylog.client import SimpleConsumer  # noqa: E402
from pylog.client.cache import close_shared_consumers, shared_consumer  # noqa: E402
from pylog.etl.config import TopicConfig  # noqa: E402
from pylog.etl.model import SCHEDULED  # noqa: E402
from pylog.etl.planner import _plan, plan_scheduled, plan_scheduled_many  # noqa: E402
from pylog.etl.state import StateStore  # noqa: E402
from pylog.protocol import ApiKey  # noqa: E402
from pylog.testing.zookeeper import running_zookeeper  # noqa: E402
from pylog.testing.counting_proxy import ProxiedCluster  # noqa: E402

APIS = {"Metadata": ApiKey.METADATA, "ListOffsets": ApiKey.LIST_OFFSETS,
        "ApiVersions": ApiKey.API_VERSIONS, "Fetch": ApiKey.FETCH}


def old_plan_scheduled(run_id, config, consumer, state):
    """The planner before batching (new partitions start at earliest), kept to compare."""
    base = state.offsets_snapshot(config.table)
    starts, ends = {}, {}
    for partition in sorted(consumer.partitions_for(config.topic)):
        earliest = consumer.earliest_offset(config.topic, partition)
        latest = consumer.latest_offset(config.topic, partition)
        starts[partition], ends[partition] = earliest, latest
    notes = [f"partition {p} is new: starting at {s} (earliest)" for p, s in starts.items()]
    return _plan(run_id, SCHEDULED, config, consumer, state, starts, ends, [], notes, None, base)


def measure(cluster: ProxiedCluster, client_id: str, work) -> tuple[float, dict[str, dict[int, int]], object]:
    cluster.reset_counts()
    started = time.perf_counter()
    result = work()
    seconds = time.perf_counter() - started
    return seconds, {name: cluster.requests(key, client_id) for name, key in APIS.items()}, result


def report(label: str, seconds: float, requests: dict[str, dict[int, int]], count: int,
           unit: str = "partitions") -> None:
    per_api = "  ".join(f"{name} {sum(by_broker.values())} {_by_broker(by_broker)}"
                        for name, by_broker in requests.items() if sum(by_broker.values()))
    print(f"{label:<29} {count:>6} {unit:<10}  {seconds:7.2f} s  requests: {per_api}", flush=True)


def _by_broker(by_broker: dict[int, int]) -> str:
    return "(" + ",".join(f"b{b}:{n}" for b, n in sorted(by_broker.items())) + ")"


def plan_with(cluster, client_id, configs, state, planner):
    def work():
        with SimpleConsumer(cluster.bootstrap, client_id=client_id) as consumer:
            return planner(consumer)
    return measure(cluster, client_id, work)


def tasks_with(cluster, client_id, topic, partitions, tasks, shared):
    def work():
        for i in range(tasks):
            if shared:
                consumer = shared_consumer(cluster.bootstrap, client_id=client_id)
            else:
                consumer = SimpleConsumer(cluster.bootstrap, client_id=client_id)
            try:
                consumer.fetch_raw(topic, i % partitions, 0, max_wait_ms=0)
            finally:
                consumer.close()
    return measure(cluster, client_id, work)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=50, help="per topic")
    parser.add_argument("--legacy-topics", type=int, default=20,
                        help="topics the old per-partition planner is timed on")
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--batch", type=int, default=10, help="topics per CreateTopics request")
    args = parser.parse_args()

    names = [f"bench{i:04d}" for i in range(args.topics)]
    configs = [TopicConfig(topic=n, table=n, max_records_per_task=1000) for n in names]
    with tempfile.TemporaryDirectory(prefix="pylog-planning-") as tmp, running_zookeeper(Path(tmp)) as zk:
        cluster = ProxiedCluster(Path(tmp), f"{zk.connect_string}/bench-{uuid.uuid4().hex[:6]}",
                                 extra={"max.partitions.per.topic": max(args.partitions, 10000)}).start()
        try:
            started = time.perf_counter()
            cluster.create_topics(names, args.partitions, batch=args.batch, timeout=1800)
            total = args.topics * args.partitions
            print(f"setup: {args.topics} topics x {args.partitions} partitions = {total} partitions "
                  f"on 3 brokers, created in {time.perf_counter() - started:.0f} s", flush=True)
            from tests.etl.helpers import produce  # confluent-kafka: a few records to offset > 0
            for name in names[:args.legacy_topics]:
                produce(cluster.bootstrap, name, [b'{"n": 1}'] * args.partitions * 3, args.partitions)
            state = StateStore((Path(tmp) / "state").as_uri())

            seconds, requests, plans = plan_with(
                cluster, "batched", configs, state,
                lambda c: plan_scheduled_many("r1", configs, c, state))
            report("batched (plan_scheduled_many)", seconds, requests, total)
            seconds, requests, _ = plan_with(
                cluster, "per-table", configs, state,
                lambda c: [plan_scheduled("r1", t, c, state) for t in configs])
            report("per table (plan_scheduled)", seconds, requests, total)
            legacy = configs[:args.legacy_topics]
            seconds, requests, old = plan_with(
                cluster, "old", legacy, state,
                lambda c: [old_plan_scheduled("r1", t, c, state) for t in legacy])
            report("old (per partition)", seconds, requests, len(legacy) * args.partitions)
            print(f"old, extrapolated to {total} partitions: "
                  f"{seconds * args.topics / max(len(legacy), 1):.1f} s ({2 * total} ListOffsets requests)", flush=True)
            same = all(replace(a, created_at_ms=0) == replace(b, created_at_ms=0) for a, b in zip(old, plans))
            print(f"old and batched plans of the {len(legacy)} topics identical: {same}", flush=True)

            for label, shared in (("tasks, consumer per task", False), ("tasks, shared_consumer", True)):
                client_id = "shared" if shared else "per-task"
                seconds, requests, _ = tasks_with(cluster, client_id, names[0], args.partitions, args.tasks, shared)
                report(label, seconds, requests, args.tasks, "tasks")
            close_shared_consumers()
        finally:
            cluster.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
