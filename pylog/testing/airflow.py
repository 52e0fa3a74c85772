"""Airflow 3 as real processes for tests: api-server, scheduler and dag-processor on Postgres.

The DAGs run as they do in production: the scheduler creates runs on their schedules and
hands task instances to the LocalExecutor, the dag-processor parses ``dags/``, and the
tasks talk to the api-server's execution API. The test drives it through the REST API
(``/api/v2``, a JWT from ``/auth/token`` of the simple auth manager).

The environment is :class:`pylog.orchestration.local_airflow.LocalAirflow`'s (the
repository's ``dags/``, the Spark connection, this Python on the Spark executors), with
the metadata database on a :class:`pylog.testing.postgres.PostgresServer`, every port on
loopback and free, small parallelism and short parsing and scheduling intervals::

    with running_postgres() as postgres:
        airflow = ScheduledAirflow(tmp_path / "airflow", DAGS, postgres,
                                   {"PYLOG_LOADER_CONFIG": "..."}).start()
        airflow.unpause("pylog_load")
        [run] = airflow.wait_for_runs("pylog_load", lambda runs: len(runs) >= 1 and runs[0].finished)
        airflow.stop()
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable, Mapping

from pylog.orchestration.local_airflow import LocalAirflow
from pylog.testing.postgres import PostgresServer
from pylog.testing.process import ServerProcess, descendants, free_port, wait_for_port

ADMIN = "admin"
FINISHED_STATES = frozenset({"success", "failed"})


@dataclass(frozen=True, slots=True)
class DagRunState:
    """One DAG run as the REST API reports it."""

    run_id: str
    state: str
    run_type: str
    start_date: datetime | None
    end_date: datetime | None
    conf: dict

    @property
    def finished(self) -> bool:
        return self.state in FINISHED_STATES

    @classmethod
    def from_api(cls, row: dict) -> "DagRunState":
        return cls(row["dag_run_id"], row["state"], row["run_type"], _time(row.get("start_date")),
                   _time(row.get("end_date")), row.get("conf") or {})


@dataclass(frozen=True, slots=True)
class TaskTry:
    """One try of a task instance (``map_index`` -1 for an unmapped task)."""

    task_id: str
    map_index: int
    try_number: int
    state: str | None
    start_date: datetime | None
    end_date: datetime | None

    @classmethod
    def from_api(cls, row: dict) -> "TaskTry":
        return cls(row["task_id"], row.get("map_index", -1), row["try_number"], row.get("state"),
                   _time(row.get("start_date")), _time(row.get("end_date")))


def _time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


class AirflowApiError(RuntimeError):
    """A REST call answered with an error status; the message holds the status and body."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ScheduledAirflow:
    """An Airflow installation in ``home`` whose scheduler runs the DAGs of ``dags_folder``.

    Parameters:
        home: AIRFLOW_HOME (configuration, logs, the admin's password file).
        dags_folder: the DAG files, e.g. the repository's ``dags/``.
        postgres: a started server; its database becomes the metadata database.
        extra_env: more environment for every process and so every task (``PYLOG_*``).
        parallelism: task instances running at once (LocalExecutor worker processes).
    """

    def __init__(self, home: Path, dags_folder: Path, postgres: PostgresServer,
                 extra_env: Mapping[str, str] | None = None, parallelism: int = 2) -> None:
        self.home = Path(home)
        self.port = free_port()
        self.password = secrets.token_urlsafe(12)
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.cli = LocalAirflow(self.home, dags_folder, {**self._airflow_config(postgres, parallelism),
                                                         **(extra_env or {})})
        self.processes: dict[str, ServerProcess] = {}
        self._token: str | None = None
        self.timings: dict[str, float] = {}
        """Seconds each start-up step took: migrate, api_server, scheduler, dag_processor."""

    def _airflow_config(self, postgres: PostgresServer, parallelism: int) -> dict[str, str]:
        return {
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": postgres.url("psycopg"),
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": str(parallelism),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base_url}/execution/",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{ADMIN}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.home / "passwords.json"),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__BASE_URL": self.base_url,
            "AIRFLOW__API__WORKERS": "1",
            # Shared by every process: the api-server checks the tokens the scheduler signs.
            "AIRFLOW__API__SECRET_KEY": secrets.token_hex(16),
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            # Parse and schedule within seconds, not the production minutes.
            "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "10",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "30",
            "AIRFLOW__DAG_PROCESSOR__PRINT_STATS_INTERVAL": "600",
            "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.5",
            "AIRFLOW__SCHEDULER__JOB_HEARTBEAT_SEC": "2",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        }

    # -- processes -------------------------------------------------------------------------

    def start(self, timeout: float = 180.0) -> "ScheduledAirflow":
        """Migrate the database, start the three processes, and wait until each is healthy."""
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "passwords.json").write_text(json.dumps({ADMIN: self.password}))
        began = time.monotonic()
        self.cli.migrate()
        self.timings["migrate"] = time.monotonic() - began
        for name in ("api-server", "scheduler", "dag-processor"):
            self.processes[name] = ServerProcess(
                [self.cli.airflow, name], self.home / f"{name}.log", env=self.cli.env, cwd=self.home).start()
        try:
            api = self.processes["api-server"]
            wait_for_port("127.0.0.1", self.port, timeout, api.process, api.log_path)
            self.timings["api_server"] = time.monotonic() - began
            self._wait_healthy(began, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_healthy(self, began: float, timeout: float) -> None:
        """Until the health endpoint sees the scheduler's and dag-processor's heartbeats."""
        pending = {"scheduler", "dag_processor"}
        while pending:
            for name, process in self.processes.items():
                if not process.alive():
                    raise RuntimeError(f"airflow {name} exited with {process.process.returncode}:\n"
                                       + process.log_text()[-4000:])
            try:
                health = self.request("GET", "/api/v2/monitor/health", authenticated=False)
            except (OSError, AirflowApiError):
                health = {}
            for name in list(pending):
                if (health.get(name) or {}).get("status") == "healthy":
                    self.timings[name] = time.monotonic() - began
                    pending.discard(name)
            if pending and time.monotonic() - began > timeout:
                raise RuntimeError(f"no healthy {', '.join(sorted(pending))} after {timeout:.0f}s: {health}"
                                   + "".join(f"\n--- {n} ---\n{p.log_text()[-2000:]}"
                                             for n, p in self.processes.items()))
            time.sleep(0.5)

    def stop(self) -> None:
        """Scheduler first (no new task instances), then the others; stragglers are killed.

        A task's supervisor moves it into a session of its own, so neither the scheduler's
        process group nor its exit reaches a task still running (a spark-submit, a hung
        driver): every descendant seen before the stop is SIGKILLed once its ancestors
        have exited.
        """
        below = [pid for process in self.processes.values() if process.alive()
                 for pid in descendants(process.pid)]
        for name in ("scheduler", "dag-processor", "api-server"):
            process = self.processes.get(name)
            if process is None or process.process is None:
                continue
            process.stop(timeout=30)
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in below:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def log(self, name: str) -> str:
        """The output of ``api-server``, ``scheduler`` or ``dag-processor``."""
        return self.processes[name].log_text()

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int, map_index: int = -1) -> str:
        """The text of one try's log file under ``$AIRFLOW_HOME/logs``."""
        directory = self.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
        if map_index >= 0:
            directory = directory / f"map_index={map_index}"
        path = directory / f"attempt={try_number}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    # -- REST ------------------------------------------------------------------------------

    def token(self) -> str:
        """A JWT for the admin user (``POST /auth/token``), fetched once."""
        if self._token is None:
            answer = self.request("POST", "/auth/token", {"username": ADMIN, "password": self.password},
                                  authenticated=False)
            self._token = answer["access_token"]
        return self._token

    def request(self, method: str, path: str, body: dict | None = None, authenticated: bool = True,
                timeout: float = 30.0) -> dict:
        """One REST call with a JSON body; its decoded JSON answer. AirflowApiError on 4xx/5xx."""
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if authenticated:
            headers["Authorization"] = f"Bearer {self.token()}"
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base_url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as response:
                payload = response.read()
        except urllib.error.HTTPError as error:
            raise AirflowApiError(error.code, f"{method} {path}: {error.code} {error.read()[:2000]!r}") from None
        return json.loads(payload) if payload else {}

    def wait_for_dag(self, dag_id: str, timeout: float = 120.0) -> dict:
        """The DAG once the dag-processor has parsed it into the database (``GET /dags/{id}``)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.request("GET", f"/api/v2/dags/{dag_id}")
            except AirflowApiError as error:
                if error.status != 404 or time.monotonic() > deadline:
                    raise RuntimeError(f"DAG {dag_id} not parsed after {timeout:.0f}s:\n"
                                       + self.log("dag-processor")[-3000:]) from error
            time.sleep(0.5)

    def set_paused(self, dag_id: str, paused: bool) -> None:
        self.request("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": paused})

    def unpause(self, dag_id: str) -> None:
        """Unpause the DAG (after it is parsed): a scheduled DAG starts its runs."""
        self.wait_for_dag(dag_id)
        self.set_paused(dag_id, False)

    def trigger(self, dag_id: str, conf: dict | None = None) -> str:
        """A manual run with ``conf`` (``POST /dags/{id}/dagRuns``); its run id."""
        answer = self.request("POST", f"/api/v2/dags/{dag_id}/dagRuns",
                              {"logical_date": None, "conf": conf or {}})
        return answer["dag_run_id"]

    def dag_runs(self, dag_id: str) -> list[DagRunState]:
        """The DAG's runs, oldest first."""
        answer = self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns?order_by=run_after&limit=100")
        return [DagRunState.from_api(row) for row in answer["dag_runs"]]

    def dag_run(self, dag_id: str, run_id: str) -> DagRunState:
        quoted = urllib.parse.quote(run_id, safe="")
        return DagRunState.from_api(self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{quoted}"))

    def wait_for_runs(self, dag_id: str, done: Callable[[list[DagRunState]], bool], timeout: float = 300.0,
                      poll: float = 1.0) -> list[DagRunState]:
        """Poll the DAG's runs until ``done(runs)``; the runs then. RuntimeError on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            runs = self.dag_runs(dag_id)
            if done(runs):
                return runs
            if time.monotonic() > deadline:
                raise RuntimeError(f"{dag_id}: runs not as expected after {timeout:.0f}s: {runs}\n"
                                   f"--- scheduler ---\n{self.log('scheduler')[-3000:]}")
            for name, process in self.processes.items():
                if not process.alive():
                    raise RuntimeError(f"airflow {name} exited:\n{process.log_text()[-3000:]}")
            time.sleep(poll)

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = 300.0) -> DagRunState:
        """Poll one run until it succeeded or failed."""
        [run] = [r for r in self.wait_for_runs(
            dag_id, lambda runs: any(r.run_id == run_id and r.finished for r in runs), timeout)
                 if r.run_id == run_id]
        return run

    def task_instances(self, dag_id: str, run_id: str) -> list[TaskTry]:
        """The run's task instances (mapped ones one per map index), at their latest try."""
        quoted = urllib.parse.quote(run_id, safe="")
        answer = self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{quoted}/taskInstances?limit=100")
        return [TaskTry.from_api(row) for row in answer["task_instances"]]

    def task_tries(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> list[TaskTry]:
        """Every try of one task instance, oldest first."""
        quoted = urllib.parse.quote(run_id, safe="")
        path = f"/api/v2/dags/{dag_id}/dagRuns/{quoted}/taskInstances/{task_id}"
        path += f"/{map_index}/tries" if map_index >= 0 else "/tries"
        rows = self.request("GET", path)["task_instances"]
        return sorted((TaskTry.from_api(row) for row in rows), key=lambda t: t.try_number)
