"""Where the DAGs take their settings from.

At parse time (schedule, DAG structure, Asset outlets) only environment variables are
read, so parsing never touches the metadata database. At run time an Airflow Variable
of the same name in lower case overrides the environment (``pylog_loader_config``
overrides ``PYLOG_LOADER_CONFIG``), so operators can repoint a deployment from the UI.

======================  ==================================  ===============================
environment / Variable  meaning                             default
======================  ==================================  ===============================
PYLOG_LOADER_CONFIG     the loader's loader.yaml            <checkout>/conf/loader.yaml
PYLOG_JOBS_DIR          directory holding load_log.py       <checkout>/jobs
PYLOG_LOAD_SCHEDULE     pylog_load's schedule (parse time)  @hourly; ``none`` for manual
                                                            or an interval: 30s, 5m, 2h
PYLOG_RETRY_DELAY       wait before a failed task's retry   1m (s, m, h, d)
PYLOG_MAX_LAG           the audit's bound on partition lag  100000 (offsets)
PYLOG_SPARK_CONN_ID     Airflow connection for spark-submit spark_default
PYLOG_METASTORE_DIR     embedded Hive metastore directory   $AIRFLOW_HOME/pylog-metastore
PYLOG_CATALOG_DATABASE  Spark catalog database of tables    pylog
PYLOG_PY_FILES          --py-files for spark-submit         none (pylog installed on workers)
SPARK_CONF_DIR          spark-defaults.conf of the loads    <checkout>/conf
======================  ==================================  ===============================

The Spark master comes from the connection, for example
``AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "local[2,4]"}'`` (local mode
ignores ``spark.task.maxFailures``; ``local[N,F]`` gives a task F attempts).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Mapping

from pylog.errors import ConfigError
from pylog.etl.config import parse_duration_seconds

DEFAULT_SCHEDULE = "@hourly"
DEFAULT_MAX_LAG = 100_000
DEFAULT_RETRY_DELAY = "1m"
# A fixed interval rather than cron: a duration, which no cron expression or preset looks like.
_INTERVAL = re.compile(r"\d+(\.\d+)?[smhd]")


@dataclass(frozen=True, slots=True)
class DagSettings:
    loader_config: str
    """Path of the loader's configuration file."""
    jobs_dir: str
    """Directory of the spark-submit entry points (load_log.py)."""
    schedule: str | timedelta | None = DEFAULT_SCHEDULE
    """pylog_load's schedule: cron or preset, a fixed interval, or None (triggered manually only)."""
    retry_delay: timedelta = timedelta(minutes=1)
    """How long Airflow waits before retrying a failed task of pylog_load."""
    max_lag: int = DEFAULT_MAX_LAG
    """The audit fails when a partition lags the log by more offsets than this."""
    spark_conn_id: str = "spark_default"
    """Airflow connection naming the Spark master."""
    metastore_dir: str = ""
    """Where the embedded Hive metastore of the catalog registration lives."""
    catalog_database: str = "pylog"
    """Spark catalog database the tables are registered in."""
    py_files: str | None = None
    """Comma-separated --py-files for the loads (a pylog zip or wheel), when the Spark
    workers do not have pylog installed."""
    spark_conf_dir: str | None = None
    """SPARK_CONF_DIR for spark-submit: its spark-defaults.conf applies to the loads."""

    @property
    def spark_env(self) -> dict[str, str] | None:
        return {"SPARK_CONF_DIR": self.spark_conf_dir} if self.spark_conf_dir else None

    @property
    def load_application(self) -> str:
        return os.path.join(self.jobs_dir, "load_log.py")


def from_environment(checkout: str | os.PathLike, environ: Mapping[str, str] | None = None) -> DagSettings:
    """Settings from ``PYLOG_*`` variables; paths default to ``checkout`` (the repository).

    Raises ConfigError naming the variable when a value is invalid.
    """
    env = os.environ if environ is None else environ
    root = Path(checkout)
    airflow_home = env.get("AIRFLOW_HOME") or str(Path.home() / "airflow")
    return DagSettings(
        loader_config=env.get("PYLOG_LOADER_CONFIG") or str(root / "conf" / "loader.yaml"),
        jobs_dir=env.get("PYLOG_JOBS_DIR") or str(root / "jobs"),
        schedule=parse_schedule(env.get("PYLOG_LOAD_SCHEDULE", DEFAULT_SCHEDULE)),
        retry_delay=timedelta(seconds=parse_duration_seconds(env.get("PYLOG_RETRY_DELAY", DEFAULT_RETRY_DELAY),
                                                             "PYLOG_RETRY_DELAY")),
        max_lag=parse_max_lag(env.get("PYLOG_MAX_LAG", str(DEFAULT_MAX_LAG)), "PYLOG_MAX_LAG"),
        spark_conn_id=env.get("PYLOG_SPARK_CONN_ID") or "spark_default",
        metastore_dir=env.get("PYLOG_METASTORE_DIR") or os.path.join(airflow_home, "pylog-metastore"),
        catalog_database=env.get("PYLOG_CATALOG_DATABASE") or "pylog",
        py_files=env.get("PYLOG_PY_FILES") or None,
        spark_conf_dir=env.get("SPARK_CONF_DIR") or _shipped_spark_conf(root))


def _shipped_spark_conf(root: Path) -> str | None:
    conf = root / "conf"
    return str(conf) if (conf / "spark-defaults.conf").exists() else None


def parse_schedule(value: str) -> str | timedelta | None:
    """``none`` -> None, ``30s``/``5m``/``2h``/``1d`` -> a fixed interval, else cron or a preset."""
    text = value.strip()
    if text.lower() in ("", "none", "null"):
        return None
    if _INTERVAL.fullmatch(text.lower()):
        return timedelta(seconds=parse_duration_seconds(text, "PYLOG_LOAD_SCHEDULE"))
    return text


def parse_max_lag(value, key: str) -> int:
    try:
        lag = int(str(value).strip())
    except ValueError:
        raise ConfigError(key, f"{value!r} is not a whole number of offsets") from None
    if lag < 0:
        raise ConfigError(key, f"{lag} is negative")
    return lag


def at_runtime(settings: DagSettings) -> DagSettings:
    """``settings`` with the run-time overrides from Airflow Variables applied (in a task)."""
    from airflow.sdk import Variable

    def variable(name: str, current: str) -> str:
        return Variable.get(f"pylog_{name}", default=current)

    return DagSettings(
        loader_config=variable("loader_config", settings.loader_config),
        jobs_dir=settings.jobs_dir,
        schedule=settings.schedule,
        retry_delay=settings.retry_delay,
        max_lag=parse_max_lag(variable("max_lag", str(settings.max_lag)), "pylog_max_lag"),
        spark_conn_id=settings.spark_conn_id,
        metastore_dir=variable("metastore_dir", settings.metastore_dir),
        catalog_database=variable("catalog_database", settings.catalog_database),
        py_files=settings.py_files,
        spark_conf_dir=settings.spark_conf_dir)


def loader_config_template(settings: DagSettings) -> str:
    """A Jinja expression for operator arguments: the Variable, else the environment's path."""
    return "{{ var.value.get('pylog_loader_config', %r) }}" % settings.loader_config
