"""Running Apache Kafka's own Java tools and clients as child processes.

``KafkaTools`` runs one command-line tool against pylog and against Apache Kafka at once,
for side-by-side comparisons of what a user sees.

``java -cp <kafka jars> org.apache.kafka.tools.<Tool>`` is what ``kafka-topics.sh`` and its
siblings run. The long-running ones Kafka's system tests drive (VerifiableProducer,
VerifiableConsumer, TransactionalMessageCopier) print one JSON object per line; a
``JavaClient`` collects those as they come so a test can wait on them while the process runs.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from pylog.testing import maven
from pylog.testing.apache_kafka import kafka_classpath
from pylog.testing.waiting import wait_until

TOOLS = "org.apache.kafka.tools."

# A tool is a short-lived client: a small heap and the C1 compiler start it fastest.
JVM_OPTIONS = ("-Xmx256m", *maven.JVM_OPTIONS)
# Errors only, on stderr: stdout stays what the tool itself prints.
LOG4J2 = maven.log4j2_console("ERROR", target="SYSTEM_ERR", pattern="%p %m (%c)%n")


def write_log_config(work_dir: Path) -> Path:
    path = work_dir / "log4j2.properties"
    path.write_text(LOG4J2)
    return path


def java_argv(classpath: str, log_config: Path, main_class: str, args: list[str]) -> list[str]:
    return ["java", *JVM_OPTIONS, f"-Dlog4j2.configurationFile={log_config}", "-cp", classpath,
            main_class, *args]


def write_properties(path: Path, settings: dict[str, object]) -> Path:
    path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    return path


class JavaClient:
    """A running Java tool whose stdout is JSON lines, gathered by a reader thread.

    ``events`` holds every parsed object in order; lines that are not JSON (a tool's own
    warnings) go to ``other_lines``. stderr is written to ``stderr_path`` for the failure
    message.
    """

    def __init__(self, argv: list[str], stderr_path: Path) -> None:
        self.argv = argv
        self.stderr_path = stderr_path
        self.events: list[dict] = []
        self.other_lines: list[str] = []
        self._lock = threading.Lock()
        with open(stderr_path, "ab") as stderr:
            self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr,
                                            text=True, bufsize=1)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            line = line.strip()
            if not line:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                with self._lock:
                    self.other_lines.append(line)
                continue
            with self._lock:
                self.events.append(event)

    def named(self, key: str, value: str | None = None) -> list[dict]:
        """The events with ``key`` (VerifiableProducer's ``name``, the copier's ``progress``),
        equal to ``value`` if given."""
        with self._lock:
            return [e for e in self.events if key in e and (value is None or e[key] == value)]

    def wait_for(self, predicate: Callable[["JavaClient"], object], message: str,
                 timeout: float = 60.0):
        def check():
            if self.process.poll() is not None and not predicate(self):
                raise AssertionError(f"{message}: the tool exited ({self.process.returncode}) "
                                     f"first\n{self.diagnostics()}")
            return predicate(self)
        return wait_until(check, timeout=timeout, message=message, interval=0.1)

    def wait_exit(self, timeout: float = 120.0) -> int:
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the tool did not finish in {timeout:g} s\n{self.diagnostics()}")
        self._reader.join(10)
        return code

    def kill(self) -> None:
        """SIGKILL: no shutdown hook, no goodbye to the broker."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)
        self._reader.join(10)

    def terminate(self, timeout: float = 60.0) -> int:
        """SIGTERM: the tool's shutdown hook closes its clients (a consumer leaves its group).
        A JVM that ran its hooks after SIGTERM exits with 143."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.wait_exit(timeout)

    def diagnostics(self) -> str:
        stderr = self.stderr_path.read_text(errors="replace")[-4000:]
        with self._lock:
            tail = self.events[-5:] + self.other_lines[-5:]
        main_class = next(i for i, a in enumerate(self.argv) if a.startswith("org.apache."))
        return (f"command: {' '.join(self.argv[main_class:])}\nlast output: {tail}\n"
                f"stderr:\n{stderr}")


@dataclass(frozen=True)
class Side:
    """One broker the tools talk to: its name in assertion messages, bootstrap and node id."""

    name: str
    bootstrap: str
    broker_id: int


@dataclass(frozen=True)
class ToolRun:
    returncode: int
    stdout: str
    stderr: str


class KafkaTools:
    """Runs one tool command against pylog and Kafka at once (two JVMs, two cores)."""

    def __init__(self, pylog: Side, kafka: Side, work_dir: Path) -> None:
        self.sides = (pylog, kafka)
        self.work_dir = work_dir
        self.log_config = write_log_config(work_dir)
        self.classpath = kafka_classpath()

    def argv(self, side: Side, main_class: str, args: list[str]) -> list[str]:
        """``args`` may name ``{bootstrap}`` and ``{broker_id}``, filled in for ``side``."""
        return java_argv(self.classpath, self.log_config, main_class, [
            a.format(bootstrap=side.bootstrap, broker_id=side.broker_id) for a in args])

    def run(self, side: Side, main_class: str, args: list[str], stdin: str | None = None,
            timeout: float = 60.0) -> ToolRun:
        done = subprocess.run(self.argv(side, main_class, args), input=stdin,
                              capture_output=True, text=True, timeout=timeout)
        return ToolRun(done.returncode, done.stdout, done.stderr)

    def start(self, side: Side, main_class: str, args: list[str]) -> subprocess.Popen:
        """A tool that keeps running (a console consumer); the caller stops it."""
        return subprocess.Popen(self.argv(side, main_class, args), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)

    def both(self, main_class: str, *args: str, stdin: str | None = None,
             ok: bool = True) -> tuple[ToolRun, ToolRun]:
        """(pylog's run, Kafka's run); with ``ok``, both must exit 0."""
        with ThreadPoolExecutor(2) as pool:
            runs = list(pool.map(lambda side: self.run(side, main_class, list(args), stdin),
                                 self.sides))
        if ok:
            for side, run in zip(self.sides, runs):
                assert run.returncode == 0, (
                    f"{main_class.rsplit('.', 1)[-1]} {' '.join(args)} failed on {side.name} "
                    f"({run.returncode}):\n{run.stdout}\n{run.stderr}")
        return runs[0], runs[1]


def rows(text: str) -> list[list[str]]:
    """A tool's table as cells: split on tabs (TransactionsCommand) or runs of spaces."""
    table = []
    for line in text.splitlines():
        if line.strip():
            cells = line.split("\t") if "\t" in line else re.split(r"\s{2,}", line.strip())
            table.append([cell.strip() for cell in cells if cell.strip()])
    return table


def error_class(run: ToolRun) -> str:
    """The Kafka exception a failed tool names on stderr, e.g. ``TopicExistsException``."""
    match = re.search(r"org\.apache\.kafka\.common\.errors\.(\w+)|java\.lang\.(\w+Exception)",
                      run.stderr + run.stdout)
    assert match, f"no exception named in:\n{run.stderr}"
    return match.group(1) or match.group(2)


def error_message(run: ToolRun) -> str:
    """What the tool printed of the broker's error: the message after the exception's name."""
    match = re.search(r"org\.apache\.kafka\.common\.errors\.\w+: (.*)", run.stderr + run.stdout)
    assert match, f"no error message in:\n{run.stderr}"
    return match.group(1).strip()


# A three-broker pylog cluster as Kafka's Java clients meet a production one: replication
# factor 3 and min ISR 2, the internal topics replicated too, few partitions so it starts fast.
REPLICATED = {
    "default.replication.factor": 3, "min.insync.replicas": 2,
    "offsets.topic.replication.factor": 3, "offsets.topic.num.partitions": 3,
    "transaction.state.log.replication.factor": 3,
    "transaction.state.log.min.isr": 2, "transaction.state.log.num.partitions": 3,
    "group.initial.rebalance.delay.ms": 0, "replica.lag.time.max.ms": 3000,
    "replica.fetch.wait.max.ms": 100}


def replicated_cluster_fixture(name: str, **extra: object):
    """A module-scoped fixture ``cluster``: three brokers (``REPLICATED`` settings and
    ``extra``) in their own chroot of the module's ``zookeeper`` fixture."""
    import uuid

    import pytest

    from tests.cluster.cluster_helpers import LocalCluster

    @pytest.fixture(scope="module")
    def cluster(zookeeper, tmp_path_factory):
        connect = f"{zookeeper.connect_string}/{name}-{uuid.uuid4().hex[:8]}"
        started = LocalCluster(tmp_path_factory.mktemp(name), connect,
                               extra={**REPLICATED, **extra}).start()
        try:
            yield started
        finally:
            started.close()

    return cluster
