"""The end-to-end demonstration behind ``make demo``: from page views to an analyst's query.

1. start a standalone pylog broker (a child process, loopback, a free port);
2. produce realistic page views (user, page, referrer, duration, timestamps spread over
   the last six hours) into a topic with four partitions;
3. ``airflow db migrate`` and ``airflow dags test pylog_load`` in a private AIRFLOW_HOME:
   the DAG spark-submits the loader on local Spark, audits the run and registers the
   table in the Spark catalog;
4. print what an analyst sees: ``pylog tables``, page views per hour with ``pylog query``,
   and ``pylog status``.

Everything lives in one working directory, emptied at the start (so a second run starts
from scratch) and kept afterwards for a look. The broker is stopped in a ``finally``:
nothing keeps running. Any step that fails (the broker, producing, Airflow, the DAG run,
one of the analyst's commands, the exactly-once check) ends the demo with a
``demo FAILED: ...`` line and exit status 1; the last line of a good run is ``demo OK``.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from pylog.errors import PylogError

TOPIC = "page_views"
PARTITIONS = 4
EVENTS = 6000
HOURS = 6
MARKER = ".pylog-demo"
SPARK_MASTER = "local[2,4]"
"""Two threads, up to four attempts per task (local mode ignores spark.task.maxFailures)."""

PER_HOUR_SQL = ("SELECT strftime(date_trunc('hour', ts), '%Y-%m-%d %H:00') AS hour, count(*) AS views, "
                "count(DISTINCT user_id) AS users FROM page_views GROUP BY 1 ORDER BY 1")
TOP_REFERRERS_SQL = ("SELECT coalesce(referrer, '(direct)') AS referrer, count(*) AS views "
                     "FROM page_views GROUP BY 1 ORDER BY 2 DESC LIMIT 5")


def checkout_root() -> Path:
    """The repository this pylog runs from (the DAGs and conf/ live there)."""
    import pylog

    root = Path(pylog.__file__).resolve().parents[1]
    if not (root / "dags" / "pylog_load.py").exists() or not (root / "conf" / "loader.yaml").exists():
        raise PylogError(f"the demo runs from a checkout of pylog: no dags/ and conf/ next to {root / 'pylog'}")
    return root


def prepare_workdir(workdir: Path) -> Path:
    """Empty ``workdir`` if an earlier demo made it; refuse to touch any other directory."""
    workdir = workdir.resolve()
    if workdir.exists() and any(workdir.iterdir()):
        if not (workdir / MARKER).exists():
            raise PylogError(f"{workdir} is not empty and was not made by pylog demo; choose another --workdir")
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / MARKER).write_text("made by pylog demo; emptied by the next run\n")
    return workdir


def write_demo_config(root: Path, workdir: Path, bootstrap: str) -> Path:
    """conf/loader.yaml with this demo's broker, warehouse and state store."""
    import yaml

    raw = yaml.safe_load((root / "conf" / "loader.yaml").read_text())
    raw["source"]["bootstrap_servers"] = bootstrap
    raw["warehouse"] = (workdir / "warehouse").as_uri()
    raw["state"] = (workdir / "state").as_uri()
    path = workdir / "loader.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


class DemoStepFailed(PylogError):
    """A step of the demonstration failed; the message says which and why."""


def run_demo(workdir: Path, events: int = EVENTS, out=print) -> int:
    """Run the whole demonstration in ``workdir``; 0 when every step and check passed."""
    root = checkout_root()
    workdir = prepare_workdir(workdir)
    out(f"pylog demo in {workdir}\n")
    try:
        config_path = _run_steps(root, workdir, events, out)
    except Exception as exc:  # every failure ends in one readable line and status 1
        out(failure_line(exc))
        return 1
    out(f"\nTry it yourself:\n  .venv/bin/pylog query --config {config_path} \"SELECT url, count(*) FROM "
        f"page_views GROUP BY url ORDER BY 2 DESC LIMIT 10\"")
    out("demo OK")
    return 0


def failure_line(exc: Exception) -> str:
    """The demo's last line when a step raised."""
    return f"demo FAILED: {exc}" if isinstance(exc, PylogError) else f"demo FAILED: {type(exc).__name__}: {exc}"


def _run_steps(root: Path, workdir: Path, events: int, out) -> Path:
    """Steps 1-4 with the broker stopped at the end; DemoStepFailed when one fails."""
    from pylog.orchestration.local_airflow import LocalAirflow
    from pylog.orchestration.sample_events import page_views, produce
    from pylog.testing.broker import BrokerProcess

    broker = BrokerProcess(workdir / "broker", {"num.partitions": PARTITIONS},
                           config_file=root / "conf" / "server.properties")
    try:
        broker.start()
        out(f"1. started a pylog broker on {broker.bootstrap} (log dir {broker.log_dir})")
        views = page_views(events, int(time.time() * 1000), hours=HOURS)
        counts = produce(broker.bootstrap, TOPIC, views, partitions=PARTITIONS)
        out(f"2. produced {len(views)} page views from {len({v.user_id for v in views})} users over the "
            f"last {HOURS} hours into {TOPIC}: "
            + ", ".join(f"partition {p}: {n}" for p, n in sorted(counts.items())))
        config_path = write_demo_config(root, workdir, broker.bootstrap)
        airflow = LocalAirflow(workdir / "airflow", root / "dags",
                               {"PYLOG_LOADER_CONFIG": str(config_path),
                                "PYLOG_METASTORE_DIR": str(workdir / "metastore"),
                                "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(
                                    {"conn_type": "spark", "host": SPARK_MASTER})})
        out(f"3. airflow db migrate; airflow dags test pylog_load (spark-submit on {SPARK_MASTER}) ...")
        airflow.migrate()
        run = airflow.dags_test("pylog_load")
        (workdir / "airflow-dags-test.log").write_text(run.output)
        out(f"   DAG run {run.run_id}: {run.state}; "
            + ", ".join(f"{task} {state}" for task, state in run.task_states.items()))
        out(f"   (Airflow's output: {workdir / 'airflow-dags-test.log'})")
        if run.state != "success":
            failed = [task for task, state in run.task_states.items() if state != "success"]
            raise DemoStepFailed(f"the DAG run {run.run_id} ended {run.state} (tasks not successful: "
                                 f"{', '.join(failed) or 'none'}; see {workdir / 'airflow-dags-test.log'})")
        _show_analyst_view(config_path, len(views), out)
    finally:
        broker.stop()
    return config_path


def _show_analyst_view(config_path: Path, produced: int, out, step: int = 4) -> None:
    from pylog.cli.main import main as pylog

    config = ["--config", str(config_path)]
    out(f"\n{step}. what an analyst sees")
    for shown, argv in (("tables", ["tables", *config]),
                        (f'query "{PER_HOUR_SQL}"', ["query", *config, PER_HOUR_SQL]),
                        (f'query "{TOP_REFERRERS_SQL}"', ["query", *config, TOP_REFERRERS_SQL]),
                        ("status", ["status", *config])):
        out(f"\n$ pylog {shown}")
        status = pylog(argv)
        if status != 0:
            raise DemoStepFailed(f"pylog {argv[0]} exited with status {status}")
    if not _exactly_once(config_path, produced, out):
        raise DemoStepFailed("the table does not hold every produced record exactly once")


def _exactly_once(config_path: Path, produced: int, out) -> bool:
    from pylog.etl.config import load_config
    from pylog.etl.fs import Storage
    from pylog.warehouse.query import run_query

    storage = Storage.from_uri(load_config(config_path).warehouse)
    [row] = run_query(storage, "SELECT count(*) AS rows, count(DISTINCT (_partition, _offset)) AS "
                               "distinct_offsets FROM page_views").to_pylist()
    ok = row["rows"] == row["distinct_offsets"] == produced
    out(f"\nexactly once: {produced} produced, {row['rows']} rows, {row['distinct_offsets']} distinct "
        f"(partition, offset): {'ok' if ok else 'MISMATCH'}")
    return ok

