"""``pylog demo --cluster`` end to end, as ``make demo-cluster`` runs it, with few events.

ZooKeeper, three brokers, HDFS, a Spark standalone cluster and Airflow's scheduler on
PostgreSQL, all real processes: the scheduler must run pylog_load to success, the tables
must be on hdfs:// and hold every produced record once, and no process the demo started
may outlive it.
"""

from __future__ import annotations

import re
import subprocess
import sys
import uuid

import pytest

from pylog.orchestration.demo import PARTITIONS, TOPIC
from pylog.testing.spark import spark_env
from tests.dags.test_demo_smoke import wait_for_no_processes

pytestmark = pytest.mark.slow(minutes=2)

EVENTS = 300


def test_pylog_demo_cluster_end_to_end(tmp_path):
    token = f"PYLOG_DEMO_CLUSTER={uuid.uuid4().hex}"
    env = spark_env()
    env[token.split("=")[0]] = token.split("=")[1]
    workdir = tmp_path / "demo"
    result = subprocess.run(
        [sys.executable, "-m", "pylog.cli.main", "demo", "--cluster", "--events", str(EVENTS),
         "--workdir", str(workdir)],
        env=env, capture_output=True, text=True, timeout=1200, stdin=subprocess.DEVNULL)
    output = result.stdout
    assert result.returncode == 0, output[-4000:] + result.stderr[-4000:]
    assert output.rstrip().splitlines()[-1] == "demo OK"
    assert not wait_for_no_processes(token), "processes left running by the demo"

    assert re.search(r"1\. ZooKeeper on 127\.0\.0\.1:\d+; 3 pylog brokers on (127\.0\.0\.1:\d+,?){3}\n", output)
    assert re.search(rf"produced {EVENTS} page views into {TOPIC} \(replication factor 3, acks=all\): "
                     + ", ".join(rf"partition {p}: \d+" for p in range(PARTITIONS)), output)
    assert re.search(r"2\. HDFS: NameNode hdfs://127\.0\.0\.1:\d+/", output)
    assert re.search(r"3\. Spark standalone: master spark://127\.0\.0\.1:\d+, 2 workers; executors run "
                     r"pylog from pylog-env-\w+\.tar\.gz", output)
    # the run is the scheduler's own (run type scheduled), and every task succeeded
    run = re.search(r"DAG run (scheduled__\S+) \(scheduled\): success; (.*)", output)
    assert run, output[-4000:]
    tasks = dict(item.rsplit(" ", 1) for item in run.group(2).split(", "))
    assert tasks == {"plan_loads": "success", "load": "success", "audit": "success",
                     "register_partitions": "success", "compact": "success"}
    assert f"exactly once: {EVENTS} produced, {EVENTS} rows, {EVENTS} distinct (partition, offset): ok" in output
    assert re.search(r"the tables were at hdfs://127\.0\.0\.1:\d+/pylog/warehouse", output)
    status = output.split("\n$ pylog status", 1)[1]
    assert len([line for line in status.splitlines()
                if line.startswith(f"{TOPIC}  ") and line.split()[-1] == "0"]) >= PARTITIONS
    # each process logged into the kept working directory
    for log in ("zookeeper/zookeeper.log", "broker-2/broker.log", "hdfs/namenode.log",
                "spark/master.log", "airflow/scheduler.log"):
        assert (workdir / log).is_file(), log
