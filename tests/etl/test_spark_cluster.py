"""The loader submitted to a Spark standalone cluster as a user would, pylog shipped to
the executors in a packed virtualenv (``--archives``), reading a real pylog broker.

One master and two workers (one core each) for the module; the driver runs here in
client mode with this interpreter, the executors run ``./environment/bin/python`` from
the archive (pylog.etl.ship builds it, cached by content). The broker advertises a proxy
that can hold each Fetch response for a while, so the second test can catch a task in
the middle of its fetch and SIGKILL that worker's whole process group.
"""

from __future__ import annotations

import collections
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pylog.etl.ship import EXECUTOR_PACKAGES, environment_key, executor_environment
from pylog.etl.state import StateStore
from pylog.protocol import ApiKey
from pylog.testing.broker import BrokerProcess
from pylog.testing.process import free_port
from pylog.testing.sockets import close_sockets, read_exactly
from pylog.testing.spark_cluster import spark_cluster_fixture, spark_submit_path
from tests.etl.helpers import broker_records, duckdb_keys, events, produce, write_config

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SUBMIT_TIMEOUT = 240
JVM_OPTIONS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"

spark_cluster = spark_cluster_fixture()


class FetchHoldingProxy:
    """Forwards a broker's connections; holds each Fetch response ``delay_s`` before passing
    it on, and knows which client ports have a Fetch in flight."""

    def __init__(self, port: int, target_port: int) -> None:
        self.target_port = target_port
        self.delay_s = 0.0
        self._lock = threading.Lock()
        self._fetching: collections.Counter[int] = collections.Counter()
        self._sockets: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", port))
        threading.Thread(target=self._accept, daemon=True).start()

    def fetching_ports(self) -> set[int]:
        """Client-side ports of the connections waiting for a Fetch response."""
        with self._lock:
            return {port for port, n in self._fetching.items() if n > 0}

    def _accept(self) -> None:
        while True:
            try:
                client, (_, port) = self._listener.accept()
            except OSError:
                return
            broker = socket.create_connection(("127.0.0.1", self.target_port))
            keys: collections.deque[int] = collections.deque()
            with self._lock:
                self._sockets += [client, broker]
            threading.Thread(target=self._requests, args=(client, broker, port, keys), daemon=True).start()
            threading.Thread(target=self._responses, args=(broker, client, port, keys), daemon=True).start()

    def _requests(self, client, broker, port: int, keys) -> None:
        try:
            while True:
                size = read_exactly(client, 4)
                frame = read_exactly(client, struct.unpack(">i", size)[0])
                api_key = struct.unpack_from(">h", frame)[0]
                with self._lock:
                    keys.append(api_key)
                    self._fetching[port] += api_key == ApiKey.FETCH
                broker.sendall(size + frame)
        except OSError:
            pass
        finally:
            close_sockets(client, broker)

    def _responses(self, broker, client, port: int, keys) -> None:
        try:
            while True:
                size = read_exactly(broker, 4)
                frame = read_exactly(broker, struct.unpack(">i", size)[0])
                with self._lock:
                    api_key = keys.popleft()
                if api_key == ApiKey.FETCH and self.delay_s:
                    time.sleep(self.delay_s)
                client.sendall(size + frame)
                with self._lock:
                    self._fetching[port] -= api_key == ApiKey.FETCH
        except OSError:
            pass
        finally:
            with self._lock:
                self._fetching.pop(port, None)
            close_sockets(client, broker)

    def close(self) -> None:
        self._listener.close()
        with self._lock:
            close_sockets(*self._sockets)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """(bootstrap, proxy): a 4-partition broker reached only through the proxy."""
    proxy_port = free_port()
    broker = BrokerProcess(tmp_path_factory.mktemp("broker"), {
        "num.partitions": 4, "advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy_port}"})
    broker.start()
    proxy = FetchHoldingProxy(proxy_port, broker.port)
    try:
        yield f"127.0.0.1:{proxy_port}", proxy
    finally:
        proxy.close()
        broker.stop()


@pytest.fixture(scope="module")
def executor_env():
    """The packed executor virtualenv, from ~/.cache/pylog or built (10-30 s) in a thread
    while the cluster and the broker start: a future, ``.result()`` is the archive."""
    with ThreadPoolExecutor(1, thread_name_prefix="executor-env") as pool:
        yield pool.submit(executor_environment, log=print)


def submit(cluster, archive: Path, config_path: str, run_id: str, out_dir: Path) -> subprocess.Popen:
    """``spark-submit jobs/load_log.py`` to the cluster, client mode, as the README shows;
    its output goes to ``out_dir``/submit-<run id>.{out,err}."""
    env = cluster.environment()
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable  # the user's own Python, with pylog
    env["PYSPARK_PYTHON"] = "./environment/bin/python"  # the executors': the archive's
    argv = [str(spark_submit_path()), "--master", cluster.master_url,
            "--archives", f"{archive}#environment",
            "--executor-memory", "512m", "--driver-memory", "512m",
            "--conf", "spark.ui.enabled=false", "--conf", "spark.driver.host=127.0.0.1",
            # Tasks start once both executors registered, so each worker gets some.
            "--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0",
            # Short-lived JVMs on 2 cores: start fast rather than run fast.
            "--conf", f"spark.driver.extraJavaOptions={JVM_OPTIONS}",
            "--conf", f"spark.executor.extraJavaOptions={JVM_OPTIONS}",
            str(REPO / "jobs" / "load_log.py"), "--config", config_path, "--run-id", run_id]
    out = open(out_dir / f"submit-{run_id}.out", "w")
    err = open(out_dir / f"submit-{run_id}.err", "w")
    try:
        return subprocess.Popen(argv, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                cwd=out_dir, start_new_session=True)
    finally:
        out.close()
        err.close()


def finish(process: subprocess.Popen, cluster, out_dir: Path, run_id: str) -> tuple[int, str]:
    """Wait for a submit; (exit status, stdout). Killed with its group after the timeout."""
    try:
        status = process.wait(SUBMIT_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        status = process.wait()
    stdout = (out_dir / f"submit-{run_id}.out").read_text()
    if status != 0:
        stderr = (out_dir / f"submit-{run_id}.err").read_text()
        print(f"spark-submit {run_id} exited {status}:\n{stderr[-4000:]}\n{cluster.log_tails()}")
    return status, stdout


def assert_exactly_once(warehouse: Path, table: str, held: dict) -> None:
    """Every record the broker holds is one row of the table, as DuckDB reads it (no local
    SparkSession here: one more JVM on two cores slows the cluster down)."""
    keys = duckdb_keys(warehouse, table)
    duplicates = [k for k, n in collections.Counter(keys).items() if n > 1]
    assert not duplicates, f"duplicated rows: {duplicates[:5]}"
    assert set(keys) == set(held), (f"missing {sorted(set(held) - set(keys))[:5]}, "
                                    f"extra {sorted(set(keys) - set(held))[:5]}")


def total_line(stdout: str, table: str) -> list[str]:
    return [line.split() for line in stdout.splitlines() if line.startswith(f"{table} ")][-1]


def test_submitted_load_is_exactly_once(executor_env, spark_cluster, source, tmp_path):
    bootstrap, _ = source
    config = write_config(tmp_path, bootstrap, topic="ev", max_records_per_task=50)
    produce(bootstrap, "ev", events(0, 400), partitions=4)
    held = broker_records(bootstrap, "ev")

    status, stdout = finish(submit(spark_cluster, executor_env.result(), config.path, "cluster-1", tmp_path),
                            spark_cluster, tmp_path, "cluster-1")
    assert status == 0
    assert total_line(stdout, "ev")[:2] == ["ev", "total"] and total_line(stdout, "ev")[-3:] == ["400", "400", "0"]
    # Each worker's executor unpacked the archive in its working directory.
    unpacked = list(spark_cluster.work_dir.glob("worker-*/app-*/*/environment/bin/python"))
    assert len({path.parts[-6] for path in unpacked}) == 2, unpacked
    assert_exactly_once(tmp_path / "warehouse", "ev", held)


def test_pylog_load_ships_the_executor_env(executor_env, spark_cluster, source, tmp_path):
    """``pylog load --executor-env``: the archive instead of pylog's zip, the executors'
    Python from it, the driver's this one; a missing archive is one line."""
    bootstrap, _ = source
    config = write_config(tmp_path, bootstrap, topic="shipped", max_records_per_task=50)
    produce(bootstrap, "shipped", events(0, 200), partitions=4)
    held = broker_records(bootstrap, "shipped")
    command = [sys.executable, "-m", "pylog.cli.main", "load", "--config", config.path, "--run-id", "shipped-1",
               "--master", spark_cluster.master_url, "--conf", "spark.executor.memory=512m",
               "--conf", "spark.ui.enabled=false", "--conf", "spark.driver.host=127.0.0.1",
               "--conf", f"spark.driver.extraJavaOptions={JVM_OPTIONS}",
               "--conf", f"spark.executor.extraJavaOptions={JVM_OPTIONS}"]
    env = spark_cluster.environment()
    missing = subprocess.run([*command, "--executor-env", str(tmp_path / "nope.tar.gz")], env=env,
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1
    assert missing.stderr.strip() == (f"pylog load: error: --executor-env: no such file: {tmp_path / 'nope.tar.gz'} "
                                      "(build one with: python -m pylog.etl.ship --output FILE)")
    result = subprocess.run([*command, "--executor-env", str(executor_env.result())], env=env,
                            capture_output=True, text=True, timeout=SUBMIT_TIMEOUT, cwd=tmp_path,
                            start_new_session=True)
    assert result.returncode == 0, result.stderr[-4000:] + spark_cluster.log_tails()
    assert total_line(result.stdout, "shipped")[-3:] == ["200", "200", "0"]
    # The newest application's executors unpacked the archive, and no pylog.zip was shipped.
    app_dirs = sorted(spark_cluster.work_dir.glob("worker-*/app-*/*"), key=lambda p: p.stat().st_mtime)
    newest = [d for d in app_dirs if d.parent.name == app_dirs[-1].parent.name]
    assert newest and all((d / "environment" / "bin" / "python").exists() for d in newest), newest
    assert not [z for d in newest for z in d.glob("pylog*.zip")]
    assert_exactly_once(tmp_path / "warehouse", "shipped", held)


@pytest.mark.parametrize("victim", ["worker", "executor"])
def test_killed_mid_task_then_retried(executor_env, spark_cluster, source, tmp_path, victim):
    """SIGKILL worker 1 with its executor and Pythons (a lost node: the retries run on
    worker 0), or only its executor JVM (the worker starts another), while one of its
    tasks waits for a Fetch; the load finishes (or its rerun does) exactly once."""
    bootstrap, proxy = source
    topic, run_id = f"kill_{victim}", f"kill-{victim}"
    config = write_config(tmp_path, bootstrap, topic=topic, max_records_per_task=25)
    produce(bootstrap, topic, events(0, 400), partitions=4)
    held = broker_records(bootstrap, topic)
    state = StateStore(config.state)
    proxy.delay_s = 1.5  # until the kill, every task waits this long for its Fetch
    try:
        process = submit(spark_cluster, executor_env.result(), config.path, run_id, tmp_path)
        deadline = time.monotonic() + 150
        while not (proxy.fetching_ports() & spark_cluster.local_ports(1)):
            assert process.poll() is None, (tmp_path / f"submit-{run_id}.err").read_text()[-3000:]
            assert time.monotonic() < deadline, "no task of worker 1's executor fetched"
            time.sleep(0.05)
        pythons = spark_cluster.python_cmdlines(1)
        if victim == "worker":
            spark_cluster.kill_worker(1)
        else:
            assert len(spark_cluster.kill_executor(1)) == 1
        proxy.delay_s = 0.0
        status, stdout = finish(process, spark_cluster, tmp_path, run_id)
        if status != 0:  # the job may fail as a whole; a rerun of the run id finishes it
            status, stdout = finish(submit(spark_cluster, executor_env.result(), config.path, run_id, tmp_path),
                                    spark_cluster, tmp_path, run_id)
        assert status == 0
    finally:
        proxy.delay_s = 0.0
        if victim == "worker":
            spark_cluster.restart_worker(1)

    # The executors ran the archive's interpreter, not this one.
    assert pythons and all(line[0] == "./environment/bin/python" for line in pythons), pythons
    plan = state.read_plan(topic, run_id)
    markers = [state.read_marker(topic, run_id, r) for r in plan.ranges]
    assert len(markers) == 16 and all(markers)
    # The task the kill interrupted ran again, as a later attempt.
    assert any(m.attempt >= 1 for m in markers), [m.attempt for m in markers]
    assert total_line(stdout, topic)[-3:] == ["400", "400", "0"]
    assert_exactly_once(tmp_path / "warehouse", topic, held)


def test_executor_env_is_keyed_by_what_goes_in(tmp_path):
    """The cached archive's name changes with pylog's sources and the pinned versions, not
    with bytecode or build leftovers beside them."""
    root = tmp_path / "checkout"
    (root / "pylog" / "__pycache__").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[project]\nname = 'pylog'\n")
    (root / "pylog" / "__init__.py").write_text("")
    versions = {"pyarrow": "26.0.1"}
    key = environment_key(root, EXECUTOR_PACKAGES, versions)
    (root / "pylog" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    (root / "pylog" / "_speedups.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\0")
    assert environment_key(root, EXECUTOR_PACKAGES, versions) == key
    assert environment_key(root, EXECUTOR_PACKAGES, {"pyarrow": "25.0.0"}) != key
    (root / "pylog" / "__init__.py").write_text("VERSION = 2\n")
    assert environment_key(root, EXECUTOR_PACKAGES, versions) != key
