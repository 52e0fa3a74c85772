"""``pylog demo``: what ``make demo`` runs.

By default the whole system end to end (see :mod:`pylog.orchestration.demo`): a broker,
sample page views, ``airflow dags test pylog_load`` spark-submitting the loader, then the
tables, a query and the status an analyst would look at. ``--cluster`` runs the same on
the docker-compose topology as local processes -- ZooKeeper, three brokers, HDFS, a Spark
standalone cluster, Airflow's scheduler on PostgreSQL (see
:mod:`pylog.orchestration.demo_cluster`). ``--log-only`` runs only the storage
walk-through (see :mod:`pylog.cli.demo_log`): write, read back, SIGKILL, recover.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "demo", help="run the end-to-end demonstration (broker -> Airflow + Spark load -> queries)",
        description="Start a broker, produce sample page views, load them with "
                    "`airflow dags test pylog_load` and show the tables, a query and the status. "
                    "Leaves nothing running; safe to run again.")
    parser.add_argument("--workdir", type=Path, default=Path("demo-data"),
                        help="working directory, emptied first and kept afterwards (default demo-data)")
    parser.add_argument("--events", type=int, default=6000, help="page views to produce (default 6000)")
    parser.add_argument("--cluster", action="store_true",
                        help="run on ZooKeeper, 3 brokers, HDFS, a Spark standalone cluster and "
                             "Airflow's scheduler on PostgreSQL, all as local processes")
    parser.add_argument("--log-only", action="store_true",
                        help="only demonstrate the partition log: write, read back, crash, recover")
    parser.add_argument("--dir", type=Path, default=None,
                        help="log dir for the --log-only walk-through (implies --log-only; "
                             "default: a temporary one, deleted afterwards)")
    parser.add_argument("--child-append-loop", type=Path, help=argparse.SUPPRESS)
    parser.set_defaults(func=run)


def run(args) -> int:
    from pylog.cli import demo_log

    if args.child_append_loop is not None:
        return demo_log.child_append_loop(args.child_append_loop)
    if args.dir is not None:
        return demo_log.log_demo(args.dir)
    if args.log_only:
        with tempfile.TemporaryDirectory(prefix="pylog-demo-") as tmp:
            return demo_log.log_demo(Path(tmp))
    if args.cluster:
        from pylog.orchestration.demo_cluster import run_cluster_demo

        return run_cluster_demo(args.workdir, events=args.events)
    from pylog.orchestration.demo import run_demo

    return run_demo(args.workdir, events=args.events)
