"""One local SparkSession per test run, shared by every test that needs Spark.

The master is ``local[2,2]``: two worker threads and ``maxFailures`` 2, so a task that
fails once is retried as on a cluster. Executors use this interpreter (PYSPARK_PYTHON)
so they import the same pylog.

    from pylog.testing.spark import local_spark, spark_env
    spark = local_spark()           # created on first use, stopped at interpreter exit
    env = spark_env()               # environment for spark-submit child processes
"""

from __future__ import annotations

import atexit
import os
import sys
import tempfile
import threading

DEFAULT_MASTER = "local[2,2]"
_lock = threading.Lock()
_session = None


def spark_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for Spark processes: loopback only, this Python on driver and executors."""
    env = dict(os.environ if base is None else base)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    return env


def local_spark(master: str = DEFAULT_MASTER, app_name: str = "pylog-tests"):
    """The shared SparkSession (created with ``master`` on first call)."""
    global _session
    with _lock:
        if _session is not None:
            return _session
        os.environ.update(spark_env())
        from pyspark.sql import SparkSession

        warehouse = tempfile.mkdtemp(prefix="pylog-spark-")
        _session = (SparkSession.builder.master(master).appName(app_name)
                    .config("spark.ui.enabled", "false")
                    .config("spark.sql.shuffle.partitions", "2")
                    .config("spark.sql.session.timeZone", "UTC")
                    .config("spark.sql.warehouse.dir", warehouse)
                    .config("spark.driver.host", "127.0.0.1")
                    .config("spark.driver.bindAddress", "127.0.0.1")
                    .config("spark.python.worker.reuse", "true")
                    .getOrCreate())
        _session.sparkContext.setLogLevel("ERROR")
        atexit.register(stop_spark)
        return _session


def stop_spark() -> None:
    global _session
    with _lock:
        if _session is not None:
            _session.stop()
            _session = None
