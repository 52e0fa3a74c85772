"""Airflow on one machine, in a directory of its own, driven through its command line.

Used by ``pylog demo`` and the DAG tests: a private ``AIRFLOW_HOME`` with the SQLite
metadata database, the repository's ``dags/`` folder, no example DAGs, and the Spark
connection in its JSON form (the URI form ``spark://local[2]`` would fall back to YARN)::

    airflow = LocalAirflow(Path("/tmp/demo/airflow"), Path("dags"),
                           {"PYLOG_LOADER_CONFIG": "/tmp/demo/loader.yaml"})
    airflow.migrate()
    run = airflow.dags_test("pylog_load")
    assert run.state == "success", run.output
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from pylog.errors import PylogError

# local[N,F]: local mode retries a failed task only when F (attempts) is given.
SPARK_LOCAL_CONNECTION = json.dumps({"conn_type": "spark", "host": "local[2,4]"})


class AirflowCommandError(PylogError):
    """An ``airflow`` command failed; the message ends with the tail of its output."""


@dataclass(frozen=True, slots=True)
class DagTestResult:
    """One ``airflow dags test`` run: its run id, final state, task states and output."""

    dag_id: str
    run_id: str
    state: str
    task_states: dict[str, str]
    """``task_id`` (``task_id[map_index]`` for mapped tasks) -> state."""
    output: str


class LocalAirflow:
    """An Airflow installation in ``home``, with the DAGs of ``dags_folder``."""

    def __init__(self, home: Path, dags_folder: Path, extra_env: Mapping[str, str] | None = None,
                 base_env: Mapping[str, str] | None = None) -> None:
        self.home = Path(home)
        self.dags_folder = Path(dags_folder)
        bin_dir = str(Path(sys.executable).parent)
        env = dict(os.environ if base_env is None else base_env)
        env.update({
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{self.home / 'airflow.db'}",
            "AIRFLOW_CONN_SPARK_DEFAULT": env.get("AIRFLOW_CONN_SPARK_DEFAULT", SPARK_LOCAL_CONNECTION),
            # spark-submit and airflow from this environment, this Python on Spark executors.
            "PATH": bin_dir + os.pathsep + env.get("PATH", ""),
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": env.get("SPARK_LOCAL_IP", "127.0.0.1"),
            "PYTHONWARNINGS": "ignore",
        })
        env.update(extra_env or {})
        self.env = env
        self.airflow = shutil.which("airflow", path=bin_dir) or "airflow"

    def run(self, *args: str, timeout: float = 900, check: bool = True,
            env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
        """Run ``airflow <args>``; AirflowCommandError when it exits non-zero and ``check``."""
        self.home.mkdir(parents=True, exist_ok=True)
        result = subprocess.run([self.airflow, *args], env={**self.env, **(env or {})}, cwd=self.home,
                                capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if check and result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).splitlines()[-30:])
            raise AirflowCommandError(f"airflow {' '.join(args)} exited with {result.returncode}:\n{tail}")
        return result

    def migrate(self) -> None:
        """Create or upgrade the metadata database (``airflow db migrate``); safe to repeat."""
        self.run("db", "migrate", timeout=600)

    def dags_test(self, dag_id: str, logical_date: str | None = None, conf: dict | None = None,
                  env: Mapping[str, str] | None = None, timeout: float = 1200) -> DagTestResult:
        """``airflow dags test``: one DAG run, in this process tree, without a scheduler."""
        before = {run["run_id"] for run in self.dag_runs(dag_id)}
        args = ["dags", "test", dag_id] + ([logical_date] if logical_date else [])
        if conf is not None:
            args += ["--conf", json.dumps(conf)]
        result = self.run(*args, timeout=timeout, check=False, env=env)
        output = result.stdout + result.stderr
        new = [run for run in self.dag_runs(dag_id) if run["run_id"] not in before]
        if not new:
            raise AirflowCommandError(f"airflow dags test {dag_id} created no DAG run:\n"
                                      + "\n".join(output.splitlines()[-40:]))
        run = new[-1]
        return DagTestResult(dag_id, run["run_id"], run["state"],
                             self.task_states(dag_id, run["run_id"]), output)

    def tasks_test(self, dag_id: str, task_id: str, run_id: str, map_index: int | None = None,
                   env: Mapping[str, str] | None = None, timeout: float = 900) -> str:
        """``airflow tasks test``: run one task of an existing DAG run again; its output."""
        args = ["tasks", "test", dag_id, task_id, run_id]
        if map_index is not None:
            args += ["--map-index", str(map_index)]
        result = self.run(*args, timeout=timeout, check=False, env=env)
        return result.stdout + result.stderr

    def dag_runs(self, dag_id: str) -> list[dict]:
        """The DAG's runs (``run_id``, ``state``, ``logical_date`` ...), oldest first."""
        result = self.run("dags", "list-runs", dag_id, "-o", "json", check=False)
        if result.returncode != 0 and "does not exist" in result.stdout + result.stderr:
            return []  # not parsed into the database yet: no runs
        if result.returncode != 0:
            raise AirflowCommandError(f"airflow dags list-runs {dag_id} exited with {result.returncode}:\n"
                                      + (result.stdout + result.stderr)[-2000:])
        runs = _json_list(result.stdout)
        return sorted(runs, key=lambda run: run.get("run_after") or "")

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str]:
        rows = _json_list(self.run("tasks", "states-for-dag-run", dag_id, run_id, "-o", "json").stdout)
        states = {}
        for row in rows:
            index = row.get("map_index")
            key = row["task_id"] if index in (None, -1, "-1", "") else f"{row['task_id']}[{index}]"
            states[key] = row.get("state")
        return states


def _json_list(stdout: str) -> list[dict]:
    """The JSON array in a command's output (other lines, such as warnings, are skipped)."""
    for line in stdout.splitlines():
        if line.startswith("["):
            return json.loads(line)
    if "No data found" in stdout or not stdout.strip():
        return []
    raise AirflowCommandError(f"no JSON list in airflow output:\n{stdout[-2000:]}")
