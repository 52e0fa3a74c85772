"""Real Apache Kafka 4.x (KRaft) as child processes for tests: a peer the loader must read.

Every node is a combined controller and broker (``process.roles=broker,controller``) with a
static quorum (``controller.quorum.voters``), listening on loopback only. The jars come from
Maven Central through :mod:`pylog.testing.maven` (the ``kafka`` component). Each node's
directory is formatted once with ``kafka.tools.StorageTool`` (what ``kafka-storage.sh
format`` runs) and then started as ``java kafka.Kafka server.properties``; ``kill(node)``
SIGKILLs one and ``start(node)`` brings it back on the same directory and ports.

A cluster of ``n`` nodes replicates everything ``n`` times (``min(n, 3)`` for the default
replication factor, the offsets and transaction topics) with ``min.insync.replicas``
``min(n, 2)``. Heartbeats and session timeouts are short, so a killed broker is fenced and
its partitions have new leaders within a few seconds.

With ``sasl_users`` each node has a second client listener, SASL_SSL with SCRAM-SHA-256
(certificates from :mod:`pylog.testing.certs`; the users are written at format time, as
``kafka-storage.sh format --add-scram`` does). PLAINTEXT stays for the tests' own tools::

    with running_kafka(tmp_path, nodes=3) as kafka:
        kafka.bootstrap                    # "127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3"
        kafka.kill(1); kafka.start(1)
    kafka = apache_kafka_fixture(nodes=1, sasl_users={"loader": "secret"})  # a test module's
    kafka.sasl_bootstrap, kafka.client_settings("loader")
"""

from __future__ import annotations

import base64
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from pylog.testing import maven
from pylog.testing.certs import TestCertificates
from pylog.testing.process import (
    ServerProcess, _log_tail, free_port, running_in_temp_dir, server_fixture, wait_for_port)

HOST = "127.0.0.1"
MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"
SCRAM_MECHANISM = "SCRAM-SHA-256"
JVM_OPTIONS = ("-Xms64m", *maven.JVM_OPTIONS)

# Console output at INFO (the process log file), Kafka's chattier internals at WARN.
LOG4J2 = maven.log4j2_console("INFO", {
    "org.apache.kafka": "INFO", "kafka.request.logger": "WARN", "kafka.network": "WARN",
    "org.apache.kafka.raft": "WARN", "state.change.logger": "WARN"})


def kafka_classpath() -> str:
    return maven.classpath("kafka")


def random_cluster_id() -> str:
    """A cluster id as ``kafka-storage.sh random-uuid`` prints it: 16 bytes, URL-safe base64,
    never starting with ``-`` (Kafka's Uuid.randomUuid draws again too: StorageTool would
    read such an id as an option, one start in 64)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        if not text.startswith("-"):
            return text


@dataclass(frozen=True)
class KafkaNode:
    """One combined node's identity and ports (fixed for its life, restarts included)."""

    node_id: int
    directory: Path
    port: int
    controller_port: int
    sasl_port: int | None

    @property
    def config_path(self) -> Path:
        return self.directory / "server.properties"

    @property
    def log_path(self) -> Path:
        return self.directory / "kafka.log"

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"


class ApacheKafkaCluster:
    """``nodes`` combined KRaft nodes of Apache Kafka (see the module docstring).

    Parameters:
        base_dir: one directory per node below it, and ``certs/`` with ``sasl_users``.
        nodes: 1 or more; each is controller and broker.
        sasl_users: user -> password; adds a SASL_SSL (SCRAM-SHA-256) listener per node.
        heap: the JVM's ``-Xmx``.
        overrides: more ``server.properties`` settings, for every node.
    """

    def __init__(self, base_dir: Path, nodes: int = 1, sasl_users: Mapping[str, str] | None = None,
                 heap: str = "384m", overrides: Mapping[str, object] | None = None) -> None:
        self.base_dir = Path(base_dir)
        self.sasl_users = dict(sasl_users or {})
        self.heap = heap
        self.overrides = {key: str(value) for key, value in (overrides or {}).items()}
        self.cluster_id = random_cluster_id()
        self.certs = (TestCertificates.create(self.base_dir / "certs", key_password=None)
                      if self.sasl_users else None)
        self.nodes = [KafkaNode(i, self.base_dir / f"node-{i}", free_port(), free_port(),
                                free_port() if self.sasl_users else None)
                      for i in range(1, nodes + 1)]
        self.processes: dict[int, ServerProcess] = {}
        self._classpath: str | None = None
        self._formatted = False

    # -- addresses ---------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """The PLAINTEXT listeners of every node, ``host:port,...``."""
        return ",".join(f"{HOST}:{node.port}" for node in self.nodes)

    @property
    def sasl_bootstrap(self) -> str:
        """The SASL_SSL listeners of every node (only with ``sasl_users``)."""
        if self.certs is None:
            raise RuntimeError("this cluster has no SASL_SSL listener (no sasl_users)")
        return ",".join(f"{HOST}:{node.sasl_port}" for node in self.nodes)

    def client_settings(self, user: str) -> dict[str, str]:
        """librdkafka-named settings of ``user`` on the SASL_SSL listener (password included)."""
        return {"bootstrap.servers": self.sasl_bootstrap, "security.protocol": "SASL_SSL",
                "sasl.mechanism": SCRAM_MECHANISM, "sasl.username": user,
                "sasl.password": self.sasl_users[user],
                "ssl.ca.location": str(self.certs.truststore)}

    def node(self, node_id: int) -> KafkaNode:
        return self.nodes[node_id - 1]

    # -- configuration -----------------------------------------------------------------

    def server_properties(self, node: KafkaNode) -> dict[str, str]:
        count = len(self.nodes)
        replicas, min_isr = str(min(count, 3)), str(min(count, 2))
        listeners = [f"PLAINTEXT://{HOST}:{node.port}"]
        if node.sasl_port:
            listeners.append(f"SASL_SSL://{HOST}:{node.sasl_port}")
        settings = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": ",".join(
                f"{n.node_id}@{HOST}:{n.controller_port}" for n in self.nodes),
            "controller.listener.names": "CONTROLLER",
            "listeners": ",".join(listeners + [f"CONTROLLER://{HOST}:{node.controller_port}"]),
            "advertised.listeners": ",".join(listeners),
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map":
                "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL",
            "log.dirs": str(node.data_dir),
            "num.partitions": "2",
            "default.replication.factor": replicas,
            "min.insync.replicas": min_isr,
            "offsets.topic.replication.factor": replicas,
            "offsets.topic.num.partitions": "2",
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": min_isr,
            "transaction.state.log.num.partitions": "2",
            "share.coordinator.state.topic.replication.factor": replicas,
            "share.coordinator.state.topic.min.isr": min_isr,
            "group.initial.rebalance.delay.ms": "0",
            "unclean.leader.election.enable": "false",
            # A SIGKILLed node is fenced, and its partitions led elsewhere, within seconds;
            # long enough that a live node on a loaded machine (three test workers and a
            # compiler on two cores) keeps its session.
            "broker.heartbeat.interval.ms": "500",
            "broker.session.timeout.ms": "6000",
            "controller.quorum.election.timeout.ms": "2000",
            "controller.quorum.fetch.timeout.ms": "4000",
            "replica.lag.time.max.ms": "5000",
            "controlled.shutdown.enable": "true",
            "log.flush.scheduler.interval.ms": "1000",
            "num.network.threads": "2",
            "num.io.threads": "2",
            "num.recovery.threads.per.data.dir": "1",
            "background.threads": "2",
        }
        if self.certs is not None:
            settings.update(self.certs.broker_settings(prefix="listener.name.sasl_ssl."))
            settings.update({
                "sasl.enabled.mechanisms": SCRAM_MECHANISM,
                "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config":
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            })
        settings.update(self.overrides)
        return settings

    def _write_config(self, node: KafkaNode) -> None:
        node.directory.mkdir(parents=True, exist_ok=True)
        lines = [f"{key}={value}" for key, value in self.server_properties(node).items()]
        node.config_path.write_text("\n".join(lines) + "\n")
        (node.directory / "log4j2.properties").write_text(LOG4J2)

    def _java(self, node: KafkaNode, main_class: str, *args: str) -> list[str]:
        if self._classpath is None:
            self._classpath = kafka_classpath()
        return ["java", f"-Xmx{self.heap}", *JVM_OPTIONS,
                f"-Dlog4j2.configurationFile={node.directory / 'log4j2.properties'}",
                f"-Dkafka.logs.dir={node.directory}",
                "-cp", self._classpath, main_class, *args]

    def _format(self, node: KafkaNode) -> None:
        scram = []
        for user, password in self.sasl_users.items():
            scram += ["--add-scram", f"{SCRAM_MECHANISM}=[name={user},password={password}]"]
        done = subprocess.run(
            self._java(node, STORAGE_TOOL, "format", "-t", self.cluster_id,
                       "-c", str(node.config_path), "--ignore-formatted", *scram),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"formatting Kafka node {node.node_id} failed:\n"
                               + done.stdout[-3000:])

    # -- life cycle --------------------------------------------------------------------

    def start(self, node_id: int | None = None, timeout: float = 90.0) -> "ApacheKafkaCluster":
        """Start every node (formatting them first), or one node again; block until serving.

        Serving means every node listens and the cluster's metadata lists every running
        broker."""
        if not self._formatted:
            for node in self.nodes:
                self._write_config(node)
            with ThreadPoolExecutor(len(self.nodes)) as pool:
                list(pool.map(self._format, self.nodes))
            self._formatted = True
        targets = self.nodes if node_id is None else [self.node(node_id)]
        for node in targets:
            if node.node_id in self.processes and self.processes[node.node_id].alive():
                continue
            self.processes[node.node_id] = ServerProcess(
                self._java(node, MAIN_CLASS, str(node.config_path)), node.log_path,
                cwd=node.directory).start()
        try:
            for node in targets:
                process = self.processes[node.node_id]
                wait_for_port(HOST, node.port, timeout, process.process, node.log_path)
            self.wait_for_brokers(timeout)
        except BaseException:
            if node_id is None:
                self.stop()
            raise
        return self

    def running(self) -> list[KafkaNode]:
        return [n for n in self.nodes if n.node_id in self.processes
                and self.processes[n.node_id].alive()]

    def wait_for_brokers(self, timeout: float = 60.0) -> None:
        """Block until the metadata of a running node lists exactly the running brokers."""
        from pylog.client import SimpleConsumer

        deadline = time.monotonic() + timeout
        expected = {n.node_id for n in self.running()}
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            for node in self.running():
                try:
                    with SimpleConsumer(f"{HOST}:{node.port}", request_timeout_ms=5000) as consumer:
                        if set(consumer.network.refresh_metadata([]).brokers) == expected:
                            return
                except Exception as exc:  # not serving yet
                    last_error = exc
            time.sleep(0.2)
        tails = "".join(_log_tail(n.log_path, 15) for n in self.running())
        raise RuntimeError(f"Kafka brokers {sorted(expected)} not all registered after "
                           f"{timeout:.0f}s (last error: {last_error}){tails}")

    def kill(self, node_id: int | None = None) -> None:
        """SIGKILL one node (or all): no controlled shutdown, as in a crash."""
        ids = [node_id] if node_id is not None else list(self.processes)
        for i in ids:
            self.processes[i].kill()

    def stop(self, node_id: int | None = None) -> None:
        """SIGTERM (a controlled shutdown) for one node or all of them."""
        ids = [node_id] if node_id is not None else [n.node_id for n in self.nodes]
        with ThreadPoolExecutor(max(1, len(ids))) as pool:
            list(pool.map(lambda i: self.processes[i].stop() if i in self.processes else None,
                          ids))

    def log_text(self, node_id: int) -> str:
        path = self.node(node_id).log_path
        return path.read_text(errors="replace") if path.exists() else ""

    def __enter__(self) -> "ApacheKafkaCluster":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def running_kafka(base_dir: Path | None = None, **options):
    """A started Kafka cluster for the duration of a ``with`` block; its files are removed after.

    Its files go next, so the nodes are SIGKILLed: a controlled shutdown (seconds for a
    quorum) would buy nothing.
    """
    return running_in_temp_dir(lambda work_dir: ApacheKafkaCluster(work_dir, **options), "pylog-kafka-",
                               base_dir, finish=lambda cluster: cluster.kill())


def apache_kafka_fixture(scope: str = "module", **options):
    """A pytest fixture yielding a running ApacheKafkaCluster, one per ``scope``.

    ``options`` are ApacheKafkaCluster's: ``nodes``, ``sasl_users``, ``heap``, ``overrides``.
    """
    return server_fixture(running_kafka, "apache-kafka", scope, **options)
