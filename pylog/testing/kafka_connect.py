"""Apache Kafka Connect in distributed mode as child processes for tests.

A ``ConnectWorker`` is one ``java org.apache.kafka.connect.cli.ConnectDistributed
worker.properties`` (what ``connect-distributed.sh`` runs) in its own directory, with its REST
API on a loopback port that it keeps across restarts. Workers with the same ``group_id`` form
one Connect cluster: they share the config, offset and status topics, which Connect creates
itself (compacted) on first start. The jars come from Maven Central through
:mod:`pylog.testing.maven` (the ``kafka-connect`` component); the FileStream connectors are on
that classpath, so no ``plugin.path`` is needed::

    worker = ConnectWorker(tmp_path / "w1", bootstrap, "connect-group").start()
    worker.wait_ready()
    worker.request("POST", "/connectors", {"name": "src", "config": {...}})
    worker.kill()           # SIGKILL: no goodbye to the group, no offset flush
    worker.start()          # same directory, same REST port
    worker.stop()

Timeouts are short (a 6 s group session, a 2 s ``scheduled.rebalance.max.delay.ms``), so the
tasks of a killed worker run elsewhere within seconds rather than Connect's default 5 minutes.
The Connect version is the pom's (4.3.1: see its comment for why not 4.4.0).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Mapping

from pylog.testing import maven
from pylog.testing.process import ServerProcess, free_port

HOST = "127.0.0.1"
MAIN_CLASS = "org.apache.kafka.connect.cli.ConnectDistributed"
JVM_OPTIONS = ("-Xmx256m", *maven.JVM_OPTIONS)
STRING_CONVERTER = "org.apache.kafka.connect.storage.StringConverter"

# The worker's output file: Connect's herder, workers and tasks at INFO, the clients at WARN.
LOG4J2 = maven.log4j2_console("WARN", {"org.apache.kafka.connect": "INFO",
                                       "org.reflections": "ERROR"})


def connect_classpath() -> str:
    return maven.classpath("kafka-connect")


class ConnectError(RuntimeError):
    """The REST API answered an error status (the message has Connect's own words)."""

    def __init__(self, status: int, body: object) -> None:
        super().__init__(f"HTTP {status}: {body}")
        self.status = status
        self.body = body


class ConnectWorker:
    """One distributed Connect worker (see the module docstring).

    Parameters:
        work_dir: holds ``worker.properties``, ``log4j2.properties`` and ``worker.log``.
        bootstrap: the Kafka cluster's ``host:port,...``.
        group_id: the Connect cluster this worker joins; it also names the internal topics
            (``<group_id>-configs``, ``-offsets``, ``-status``).
        replication_factor: of the internal topics Connect creates.
        overrides: more ``worker.properties`` settings.
    """

    def __init__(self, work_dir: Path, bootstrap: str, group_id: str,
                 replication_factor: int = 3,
                 overrides: Mapping[str, object] | None = None) -> None:
        self.work_dir = Path(work_dir)
        self.port = free_port(HOST)
        self.settings: dict[str, str] = {
            "bootstrap.servers": bootstrap,
            "group.id": group_id,
            "config.storage.topic": f"{group_id}-configs",
            "offset.storage.topic": f"{group_id}-offsets",
            "status.storage.topic": f"{group_id}-status",
            "config.storage.replication.factor": str(replication_factor),
            "offset.storage.replication.factor": str(replication_factor),
            "status.storage.replication.factor": str(replication_factor),
            "offset.storage.partitions": "5",
            "status.storage.partitions": "3",
            "key.converter": STRING_CONVERTER,
            "value.converter": STRING_CONVERTER,
            "offset.flush.interval.ms": "500",
            "offset.flush.timeout.ms": "5000",
            # A lost worker is noticed in 6 s, and its tasks go elsewhere 2 s later.
            "session.timeout.ms": "6000",
            "heartbeat.interval.ms": "1000",
            "rebalance.timeout.ms": "15000",
            "scheduled.rebalance.max.delay.ms": "2000",
            # Sink tasks' consumers too: a killed worker's sink consumer stays in its group
            # until its session expires (45 s by default) and holds the new task's JoinGroup.
            "consumer.session.timeout.ms": "6000",
            "consumer.heartbeat.interval.ms": "1000",
            "task.shutdown.graceful.timeout.ms": "2000",
            "listeners": f"http://{HOST}:{self.port}",
            "rest.advertised.host.name": HOST,
            "rest.advertised.port": str(self.port),
            # Only plugins with a ServiceLoader manifest (all of Kafka's own): no slow scan
            # of every class on the classpath at start.
            "plugin.discovery": "service_load",
        }
        self.settings.update({k: str(v) for k, v in (overrides or {}).items()})
        self.process: ServerProcess | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def worker_id(self) -> str:
        """How the status API names this worker: ``host:port`` of its REST listener."""
        return f"{HOST}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.work_dir / "worker.log"

    # -- life cycle --------------------------------------------------------------------

    def start(self) -> "ConnectWorker":
        """Start the JVM (again, after ``kill``); ``wait_ready`` blocks until it serves."""
        if self.alive():
            return self
        self.work_dir.mkdir(parents=True, exist_ok=True)
        config = self.work_dir / "worker.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in self.settings.items()))
        log_config = self.work_dir / "log4j2.properties"
        log_config.write_text(LOG4J2)
        argv = ["java", *JVM_OPTIONS, f"-Dlog4j2.configurationFile={log_config}",
                "-cp", connect_classpath(), MAIN_CLASS, str(config)]
        self.process = ServerProcess(argv, self.log_path, cwd=self.work_dir).start()
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until ``GET /health`` answers 200 (KIP-1017): the worker has finished starting,
        its herder has read the internal topics and joined the group."""
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"Connect worker exited ({self.process.process.returncode})"
                                   f" before it was ready{self.log_tail()}")
            try:
                self.request("GET", "/health")
                return
            except (ConnectError, OSError) as exc:
                last = exc
            time.sleep(0.25)
        raise RuntimeError(f"Connect worker on {self.url} not ready after {timeout:g} s "
                           f"(last: {last}){self.log_tail()}")

    def alive(self) -> bool:
        return self.process is not None and self.process.alive()

    def kill(self) -> None:
        """SIGKILL, as in a crash: no offset flush, no LeaveGroup."""
        if self.process is not None:
            self.process.kill()

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(timeout=20)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 40) -> str:
        tail = "\n".join(self.log_text().splitlines()[-lines:])
        return f"\n--- last lines of {self.log_path} ---\n{tail}"

    # -- REST --------------------------------------------------------------------------

    def request(self, method: str, path: str, body: object = None, timeout: float = 30.0):
        """One REST call; the decoded JSON answer (None for an empty one).

        Raises ConnectError for an HTTP error status, OSError if nothing answers."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method, headers={
            "Content-Type": "application/json", "Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                text = response.read()
        except urllib.error.HTTPError as exc:
            payload = exc.read()
            try:
                detail = json.loads(payload)
            except ValueError:
                detail = payload.decode(errors="replace")
            raise ConnectError(exc.code, detail) from None
        return json.loads(text) if text else None

    def status(self, connector: str) -> dict:
        """``GET /connectors/<name>/status``: the connector's and its tasks' state and worker."""
        return self.request("GET", f"/connectors/{connector}/status")
