"""A Spark standalone cluster (one master, a few workers) as child processes for tests.

Each daemon is pyspark's own ``bin/spark-class`` (which execs the JVM, so the process we
start is the JVM), on loopback only, with small heaps, its web UI on a free port, and its
output in a log file under the cluster's directory. A worker launches each application's
executor as a child JVM, and the executor forks pyspark's Python daemon and workers; the
cluster finds them through /proc, so ``kill_worker`` takes a whole node down at once and
``kill_executor`` only the executor JVM.

Usage in a test module::

    from pylog.testing.spark_cluster import spark_cluster_fixture
    spark_cluster = spark_cluster_fixture()     # one cluster per test module

    def test_x(spark_cluster):
        run(["spark-submit", "--master", spark_cluster.master_url, ...])
        spark_cluster.kill_worker(0)            # SIGKILL the worker, its executor, its Pythons
        spark_cluster.restart_worker(0)
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
from pathlib import Path
from typing import Iterator

from pylog.testing.process import (
    ServerProcess, free_port, running_in_temp_dir, server_fixture, wait_for_port)

HOST = "127.0.0.1"
START_TIMEOUT = 90.0
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


def spark_home() -> Path:
    """The Spark distribution inside the installed pyspark package (bin/, jars/)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def spark_submit_path() -> Path:
    return spark_home() / "bin" / "spark-submit"


class SparkStandaloneCluster:
    """A standalone master and ``workers`` workers, each with ``worker_cores`` cores and
    ``worker_memory`` for executors. ``work_dir`` holds the logs (``master.log``,
    ``worker-N.log``), each worker's ``--work-dir`` (executors' stdout and stderr, the
    unpacked ``--archives``) and an empty ``conf/`` (no spark-defaults leak in)."""

    def __init__(self, work_dir: Path, workers: int = 2, worker_cores: int = 1,
                 worker_memory: str = "1g", daemon_memory: str = "256m") -> None:
        self.work_dir = Path(work_dir)
        self.worker_count = workers
        self.worker_cores = worker_cores
        self.worker_memory = worker_memory
        self.daemon_memory = daemon_memory
        self.port = free_port(HOST)
        self.web_port = free_port(HOST)
        self.conf_dir = self.work_dir / "conf"
        self.master: ServerProcess | None = None
        self.workers: list[ServerProcess | None] = [None] * workers

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.port}"

    def environment(self) -> dict[str, str]:
        """Environment of the daemons, also fit for spark-submit against this cluster."""
        env = dict(os.environ, SPARK_LOCAL_IP=HOST, SPARK_LOCAL_HOSTNAME=HOST,
                   SPARK_CONF_DIR=str(self.conf_dir), SPARK_HOME=str(spark_home()),
                   SPARK_DAEMON_MEMORY=self.daemon_memory,
                   SPARK_DAEMON_JAVA_OPTS="-XX:+UseSerialGC -XX:TieredStopAtLevel=1")
        for name in ("MASTER", "SPARK_MASTER_OPTS", "SPARK_WORKER_OPTS", "PYSPARK_PYTHON",
                     "PYSPARK_DRIVER_PYTHON", "PYTHONPATH"):
            env.pop(name, None)
        return env

    def start(self, timeout: float = START_TIMEOUT) -> "SparkStandaloneCluster":
        """Start the master, then the workers side by side; return once the master counts
        every worker alive. Raises RuntimeError with the log tails otherwise."""
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        argv = [str(spark_home() / "bin" / "spark-class"), MASTER_CLASS, "--host", HOST,
                "--port", str(self.port), "--webui-port", str(self.web_port)]
        self.master = ServerProcess(argv, self.work_dir / "master.log", env=self.environment(),
                                    cwd=self.work_dir).start()
        try:
            wait_for_port(HOST, self.port, timeout, self.master.process, self.master.log_path)
            wait_for_port(HOST, self.web_port, timeout, self.master.process, self.master.log_path)
            for index in range(self.worker_count):
                self._launch_worker(index)
            self.wait_alive_workers(self.worker_count, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _launch_worker(self, index: int) -> None:
        work = self.work_dir / f"worker-{index}"
        work.mkdir(parents=True, exist_ok=True)
        argv = [str(spark_home() / "bin" / "spark-class"), WORKER_CLASS, "--host", HOST,
                "--port", str(free_port(HOST)), "--webui-port", str(free_port(HOST)),
                "--cores", str(self.worker_cores), "--memory", self.worker_memory,
                "--work-dir", str(work), self.master_url]
        self.workers[index] = ServerProcess(argv, self.work_dir / f"worker-{index}.log",
                                            env=self.environment(), cwd=work).start()

    def master_state(self) -> dict:
        """The master web UI's ``/json/`` view (workers, applications), {} if unreachable
        (or while the UI is still attaching its pages: it answers HTML then)."""
        try:
            with urllib.request.urlopen(f"http://{HOST}:{self.web_port}/json/", timeout=2) as reply:
                return json.load(reply)
        except (OSError, ValueError):
            return {}

    def alive_workers(self) -> int:
        return sum(1 for w in self.master_state().get("workers", []) if w.get("state") == "ALIVE")

    def wait_alive_workers(self, count: int, timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while self.alive_workers() != count:
            dead = [i for i, w in enumerate(self.workers) if w is not None and not w.alive()]
            if time.monotonic() > deadline or dead or not self.master.alive():
                raise RuntimeError(f"the master counts {self.alive_workers()} alive workers, "
                                   f"not {count} (exited: {dead})\n{self.log_tails()}")
            time.sleep(0.2)

    def worker_pid(self, index: int) -> int:
        """The PID of worker ``index``'s JVM."""
        worker = self.workers[index]
        assert worker is not None and worker.alive(), f"worker {index} is not running"
        return worker.pid

    def worker_tree(self, index: int) -> list[int]:
        """Worker ``index``'s JVM and every live descendant: its executor JVMs and their
        Python workers. (pyspark's daemon moves itself into a process group of its own, so
        the worker's group alone misses them.)"""
        root = self.worker_pid(index)
        children: dict[int, list[int]] = {}
        for pid in _pids():
            parent = _parent(pid)
            if parent is not None:
                children.setdefault(parent, []).append(pid)
        tree, todo = [], [root]
        while todo:
            pid = todo.pop()
            tree.append(pid)
            todo.extend(children.get(pid, ()))
        return tree

    def executor_pids(self, index: int) -> list[int]:
        """The executor JVMs the worker ``index`` launched (one per running application)."""
        return [pid for pid in self.worker_tree(index) if EXECUTOR_CLASS in _cmdline(pid)]

    def python_cmdlines(self, index: int) -> list[list[str]]:
        """Argument vectors of the Python processes under worker ``index`` (pyspark's
        daemon and its forked workers): which interpreter the executors run."""
        lines = [_cmdline(pid).split("\0") for pid in self.worker_tree(index)]
        return [line for line in lines if line and "python" in Path(line[0]).name]

    def local_ports(self, index: int) -> set[int]:
        """Local ports of the TCP sockets open in worker ``index``'s process tree: which of
        a server's connections come from this worker's executor."""
        inodes = set()
        for pid in self.worker_tree(index):
            try:
                fds = os.listdir(f"/proc/{pid}/fd")
            except OSError:
                continue
            for fd in fds:
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        return {port for port, inode in _tcp_sockets() if inode in inodes}

    def kill_worker(self, index: int) -> None:
        """SIGKILL worker ``index`` with its executors and their Python workers, as when
        its machine dies."""
        worker = self.workers[index]
        if worker is not None and worker.alive():
            for pid in self.worker_tree(index):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            worker.process.wait()

    def kill_executor(self, index: int) -> list[int]:
        """SIGKILL only the executor JVMs of worker ``index`` (the worker launches new
        ones); returns the PIDs killed."""
        pids = self.executor_pids(index)
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        return pids

    def restart_worker(self, index: int, timeout: float = START_TIMEOUT) -> None:
        """Start worker ``index`` again (after ``kill_worker``) and wait until it is back."""
        self.kill_worker(index)
        self._launch_worker(index)
        self.wait_alive_workers(self.worker_count, timeout)

    def log_tails(self, lines: int = 25) -> str:
        """The last lines of the daemons' logs and of every executor's stderr."""
        paths = sorted(self.work_dir.glob("*.log")) + sorted(self.work_dir.glob("worker-*/app-*/*/stderr"))
        parts = []
        for path in paths:
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- last lines of {path} ---\n" + "\n".join(tail))
        return "\n".join(parts)

    def stop(self) -> None:
        """Kill the workers (executors and Pythons too), then stop the master."""
        for index in range(self.worker_count):
            self.kill_worker(index)
        if self.master is not None:
            self.master.stop()


def _pids() -> Iterator[int]:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            yield int(entry)


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state


def _tcp_sockets() -> Iterator[tuple[int, str]]:
    """(local port, inode) of every IPv4 and IPv6 TCP socket, from /proc/net."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            yield int(fields[1].rsplit(":", 1)[1], 16), fields[9]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
    except OSError:
        return ""


def running_spark_cluster(base_dir: Path | None = None, **options):
    """A started cluster for the duration of a ``with`` block. Its files are removed after
    unless it lives under ``base_dir`` (pytest's temporary directories keep the last runs' logs)."""
    return running_in_temp_dir(lambda work_dir: SparkStandaloneCluster(work_dir, **options),
                               "pylog-spark-cluster-", base_dir, keep_files=base_dir is not None)


def spark_cluster_fixture(scope: str = "module", **options):
    """A pytest fixture yielding a running SparkStandaloneCluster, one per ``scope``."""
    return server_fixture(running_spark_cluster, "spark-cluster", scope, **options)
