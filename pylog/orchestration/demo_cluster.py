"""``pylog demo --cluster``: the docker-compose topology as local processes, end to end.

What ``docker-compose.yml`` describes, each piece a real process on loopback:

1. ZooKeeper, and three pylog brokers registered in it (``page_views`` with replication
   factor 3, ``min.insync.replicas`` 2);
2. HDFS: Hadoop's NameNode and a DataNode; the tables and the loader's state on ``hdfs://``;
3. a Spark standalone cluster: a master and two workers; the executors run pylog from a
   packed virtualenv shipped with ``--archives`` (:mod:`pylog.etl.ship`), as on machines
   that have no pylog installed;
4. Airflow: PostgreSQL, then the api-server, the scheduler and the dag-processor with the
   LocalExecutor; ``pylog_load`` is unpaused and **the scheduler** runs it: spark-submit to
   the cluster, the audit, the catalog, compaction;
5. what an analyst sees (``pylog tables``, two queries, ``pylog status``) on the HDFS
   tables, and an exactly-once check of the table against what was produced.

Everything is stopped at the end, in a ``finally``, whatever failed; the working
directory (logs of every process, the config) is kept for a look. ``demo OK`` is the
last line of a good run; a failed step prints ``demo FAILED: ...`` and exits 1.
"""

from __future__ import annotations

import json
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from pylog.orchestration.demo import (
    HOURS, PARTITIONS, TOPIC, DemoStepFailed, _show_analyst_view, checkout_root, failure_line, prepare_workdir)

BROKERS = 3
DAG_TIMEOUT_S = 600


def run_cluster_demo(workdir: Path, events: int, out=print) -> int:
    """Run the cluster demonstration in ``workdir``; 0 when every step and check passed."""
    root = checkout_root()
    workdir = prepare_workdir(workdir)
    out(f"pylog demo --cluster in {workdir}\n")
    try:
        with ExitStack() as running:
            config_path = _run_steps(root, workdir, events, running, out)
        out("\nstopped every process the demo started")
    except Exception as exc:  # every failure ends in one readable line and status 1
        out(failure_line(exc))
        return 1
    out(f"\nThe logs of every process are under {workdir}; the tables were at "
        f"{_warehouse(config_path)}.")
    out("demo OK")
    return 0


def _warehouse(config_path: Path) -> str:
    from pylog.etl.config import load_config

    return load_config(config_path).warehouse


def _started(running: ExitStack, server, stop=None):
    running.callback(stop or server.stop)
    return server.start()


def _run_steps(root: Path, workdir: Path, events: int, running: ExitStack, out) -> Path:
    from pylog.etl.ship import executor_environment
    from pylog.orchestration.sample_events import page_views, produce
    from pylog.testing.airflow import ScheduledAirflow
    from pylog.testing.broker import BrokerProcess
    from pylog.testing.hdfs import HdfsCluster
    from pylog.testing.postgres import running_postgres
    from pylog.testing.spark_cluster import SparkStandaloneCluster
    from pylog.testing.zookeeper import ZooKeeperServer

    zookeeper = _started(running, ZooKeeperServer(workdir / "zookeeper"))
    brokers = [_started(running, BrokerProcess(workdir / f"broker-{i}", {
        "broker.id": i, "zookeeper.connect": f"{zookeeper.connect_string}/pylog",
        "default.replication.factor": BROKERS, "min.insync.replicas": 2,
        "offsets.topic.replication.factor": BROKERS, "num.partitions": PARTITIONS},
        config_file=root / "conf" / "server.properties")) for i in range(BROKERS)]
    bootstrap = ",".join(b.bootstrap for b in brokers)
    _create_replicated_topic(brokers)
    out(f"1. ZooKeeper on {zookeeper.connect_string}; {BROKERS} pylog brokers on {bootstrap}")
    views = page_views(events, int(time.time() * 1000), hours=HOURS)
    counts = produce(bootstrap, TOPIC, views)
    out(f"   produced {len(views)} page views into {TOPIC} (replication factor {BROKERS}, acks=all): "
        + ", ".join(f"partition {p}: {n}" for p, n in sorted(counts.items())))

    hdfs = _started(running, HdfsCluster(workdir / "hdfs", datanodes=1))
    out(f"2. HDFS: NameNode {hdfs.uri('/')} (WebHDFS on port {hdfs.http_port}), one DataNode")

    spark = _started(running, SparkStandaloneCluster(workdir / "spark", workers=2))
    archive = executor_environment(log=lambda line: out(f"   {line}"))
    spark_conf = _spark_conf(workdir, archive)
    out(f"3. Spark standalone: master {spark.master_url}, 2 workers; executors run pylog from "
        f"{archive.name} (--archives)")

    config_path = _loader_config(root, workdir, bootstrap, hdfs.uri("/pylog"))
    # Under the system's temporary directory, which the postgres user can reach when the
    # demo runs as root (a working directory under /root is private); removed at the end.
    postgres = running.enter_context(running_postgres())
    airflow = ScheduledAirflow(workdir / "airflow", root / "dags", postgres, {
        "PYLOG_LOADER_CONFIG": str(config_path),
        "PYLOG_METASTORE_DIR": str(workdir / "metastore"),
        "SPARK_CONF_DIR": str(spark_conf),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": spark.master_url}),
        "PYLOG_LOAD_SCHEDULE": "@hourly"})
    _started(running, airflow)
    out(f"4. Airflow on PostgreSQL (port {postgres.port}): api-server {airflow.base_url}, scheduler, "
        "dag-processor, LocalExecutor")
    airflow.wait_for_dag("pylog_load")
    airflow.unpause("pylog_load")
    out("   unpaused pylog_load; the scheduler starts the latest hour's run ...")
    runs = airflow.wait_for_runs("pylog_load", lambda runs: bool(runs) and runs[0].finished,
                                 timeout=DAG_TIMEOUT_S)
    run = runs[0]
    tasks = airflow.task_instances("pylog_load", run.run_id)
    out(f"   DAG run {run.run_id} ({run.run_type}): {run.state}; "
        + ", ".join(f"{t.task_id} {t.state}" for t in tasks))
    if run.state != "success":
        raise DemoStepFailed(f"the scheduled run {run.run_id} ended {run.state}; see {airflow.home}/logs")
    _show_analyst_view(config_path, len(views), out, step=5)
    return config_path


def _create_replicated_topic(brokers, timeout_s: float = 60.0) -> None:
    """Create the topic on all three brokers once each has registered in ZooKeeper."""
    from pylog.client import Admin
    from pylog.testing.broker import broker_metadata

    deadline = time.monotonic() + timeout_s
    while len(broker_metadata(brokers[0].port).brokers) < len(brokers):
        if time.monotonic() > deadline:
            raise DemoStepFailed(f"only {len(broker_metadata(brokers[0].port).brokers)} of "
                                 f"{len(brokers)} brokers registered after {timeout_s:.0f}s")
        time.sleep(0.2)
    with Admin(brokers[0].bootstrap) as admin:
        admin.create_topic(TOPIC, num_partitions=PARTITIONS, replication_factor=len(brokers))


def _spark_conf(workdir: Path, archive: Path) -> Path:
    """conf/spark-defaults.conf plus what a cluster without pylog installed needs."""
    conf = workdir / "spark-conf"
    conf.mkdir()
    shipped = (checkout_root() / "conf" / "spark-defaults.conf").read_text()
    (conf / "spark-defaults.conf").write_text(shipped + "\n".join([
        "# pylog demo --cluster: the executors' Python comes in the archive",
        f"spark.archives                      {archive}#environment",
        "spark.pyspark.python                ./environment/bin/python",
        f"spark.pyspark.driver.python         {sys.executable}",
        "spark.driver.host                   127.0.0.1",
        "spark.executor.memory               512m",
        "spark.ui.enabled                    false", ""]))
    return conf


def _loader_config(root: Path, workdir: Path, bootstrap: str, hdfs_root: str) -> Path:
    import yaml

    raw = yaml.safe_load((root / "conf" / "loader.yaml").read_text())
    raw["source"]["bootstrap_servers"] = bootstrap
    raw["warehouse"] = f"{hdfs_root}/warehouse"
    raw["state"] = f"{hdfs_root}/state"
    path = workdir / "loader.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path
