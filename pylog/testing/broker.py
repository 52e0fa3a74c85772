"""Real pylog brokers as child processes, for tests and benchmarks.

``BrokerProcess`` runs ``python -m pylog.cli.main broker --override ...`` in its own
directory on a free loopback port, waits until it listens, and stops it by signal::

    with BrokerProcess(tmp_path / "b0", {"num.partitions": "2"}) as broker:
        run(["kcat", "-b", broker.bootstrap, "-L"])
        broker.kill()       # SIGKILL, as in a crash
        broker.start()      # recovers from the same log dir, same port

For pytest, ``broker_fixture()`` makes a fixture, and ``BrokerFactory`` starts several
(cluster tests add ``zookeeper.connect`` and ``broker.id``)::

    broker = broker_fixture(scope="module", overrides={"auto.create.topics.enable": "false"})

    def test_x(broker): ...
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Mapping, Sequence

from pylog.client.connection import BrokerConnection
from pylog.client.metadata import ClusterSnapshot
from pylog.protocol import ApiKey
from pylog.testing.process import ServerProcess, free_port, wait_for_port

HOST = "127.0.0.1"
START_TIMEOUT = 60.0


def broker_metadata(port: int, topics: list[str] | None = None,
                    timeout_s: float = 10.0) -> ClusterSnapshot:
    """Metadata as the broker on ``port`` answers it (no client-side caching)."""
    connection = BrokerConnection(HOST, port, timeout_s=timeout_s)
    try:
        response = connection.request(ApiKey.METADATA, {
            "topics": None if topics is None else [{"name": t} for t in topics],
            "allow_auto_topic_creation": False})
        return ClusterSnapshot.from_response(response)
    finally:
        connection.close()


class BrokerProcess:
    """One broker child process with its own log dir under ``base_dir``.

    Parameters:
        base_dir: holds ``logs/`` (``log.dirs``) and ``broker.log`` (its output).
        overrides: more ``server.properties`` settings (strings), e.g. ``broker.id``,
            ``zookeeper.connect``. ``listeners`` and ``log.dirs`` are set unless given.
        config_file: a properties file to start from (optional).
        extra_listeners: names of more listeners, each on a free port after the PLAINTEXT
            one (``["SSL"]``; other names need ``listener.security.protocol.map``);
            ``ports[name]`` and ``bootstrap_for(name)`` give their addresses.
    """

    def __init__(self, base_dir: Path, overrides: Mapping[str, object] | None = None,
                 config_file: Path | None = None, extra_listeners: Sequence[str] = ()) -> None:
        self.base_dir = Path(base_dir)
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.config_file = config_file
        self.overrides = {k: str(v) for k, v in (overrides or {}).items()}
        self.port = free_port(HOST)
        self.ports = {"PLAINTEXT": self.port}
        for name in extra_listeners:
            self.ports[name] = free_port(HOST)
        self.overrides.setdefault("listeners", ",".join(
            f"{name}://{HOST}:{port}" for name, port in self.ports.items()))
        self.overrides.setdefault("log.dirs", str(self.base_dir / "logs"))
        self.process: ServerProcess | None = None

    @property
    def host(self) -> str:
        return HOST

    @property
    def bootstrap(self) -> str:
        """``host:port`` for clients' bootstrap.servers."""
        return f"{HOST}:{self.port}"

    def bootstrap_for(self, listener: str) -> str:
        """``host:port`` of one of the ``extra_listeners`` (or ``PLAINTEXT``)."""
        return f"{HOST}:{self.ports[listener]}"

    @property
    def log_dir(self) -> Path:
        return Path(self.overrides["log.dirs"].split(",")[0])

    @property
    def log_path(self) -> Path:
        return self.base_dir / "broker.log"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def argv(self) -> list[str]:
        argv = [sys.executable, "-m", "pylog.cli.main", "--log-level", "INFO", "broker"]
        if self.config_file is not None:
            argv += ["--config", str(self.config_file)]
        for key, value in self.overrides.items():
            argv += ["--override", f"{key}={value}"]
        return argv

    def start(self, timeout: float = START_TIMEOUT) -> "BrokerProcess":
        """Start (or start again) and wait until the port accepts connections."""
        if self.alive():
            return self
        return self.launch().wait_listening(timeout)

    def launch(self) -> "BrokerProcess":
        """Start the process without waiting for it to listen, so that several brokers
        start side by side; ``wait_listening`` then waits for each."""
        if not self.alive():
            env = dict(os.environ, PYTHONUNBUFFERED="1")
            self.process = ServerProcess(self.argv(), self.log_path, env=env).start()
        return self

    def wait_listening(self, timeout: float = START_TIMEOUT) -> "BrokerProcess":
        """Wait until the launched process accepts connections; kill it if it never does."""
        assert self.process is not None, "launch() first"
        try:
            wait_for_port(HOST, self.port, timeout, self.process.process, self.log_path)
        except BaseException:
            self.process.kill()
            raise
        return self

    def alive(self) -> bool:
        return self.process is not None and self.process.alive()

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (clean shutdown), then SIGKILL after ``timeout``. Returns the status."""
        return None if self.process is None else self.process.stop(timeout)

    def kill(self) -> None:
        """SIGKILL: no clean shutdown."""
        if self.process is not None:
            self.process.kill()

    def pause(self) -> None:
        """SIGSTOP (e.g. to let a ZooKeeper session expire); ``resume`` continues it."""
        if self.process is not None:
            self.process.signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.process is not None:
            self.process.signal(signal.SIGCONT)

    def restart(self, timeout: float = START_TIMEOUT) -> "BrokerProcess":
        self.stop()
        return self.start(timeout)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def __enter__(self) -> "BrokerProcess":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class BrokerFactory:
    """Starts brokers in subdirectories of one base dir and stops them all on close."""

    def __init__(self, base_dir: Path | None = None) -> None:
        self._tmp = None
        if base_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="pylog-brokers-")
            base_dir = Path(self._tmp.name)
        self.base_dir = Path(base_dir)
        self.brokers: list[BrokerProcess] = []

    def start(self, overrides: Mapping[str, object] | None = None, name: str | None = None,
              config_file: Path | None = None) -> BrokerProcess:
        name = name or f"broker-{len(self.brokers)}"
        broker = BrokerProcess(self.base_dir / name, overrides, config_file)
        self.brokers.append(broker)
        return broker.start()

    def close(self) -> None:
        for broker in self.brokers:
            broker.stop()
        if self._tmp is not None:
            self._tmp.cleanup()

    def __enter__(self) -> "BrokerFactory":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def broker_fixture(scope: str = "module", overrides: Mapping[str, object] | None = None):
    """A pytest fixture yielding a started BrokerProcess in a temporary directory.

    >>> broker = broker_fixture(scope="module", overrides={"num.partitions": 3})
    """
    import pytest

    @pytest.fixture(scope=scope)
    def fixture(tmp_path_factory):
        process = BrokerProcess(tmp_path_factory.mktemp("broker"), overrides)
        process.start()
        try:
            yield process
        finally:
            process.stop()

    return fixture


def broker_factory_fixture(scope: str = "function"):
    """A pytest fixture yielding a BrokerFactory whose brokers stop at teardown."""
    import pytest

    @pytest.fixture(scope=scope)
    def fixture(tmp_path_factory):
        factory = BrokerFactory(tmp_path_factory.mktemp("brokers"))
        try:
            yield factory
        finally:
            factory.close()

    return fixture
