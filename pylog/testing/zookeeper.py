"""A real ZooKeeper server (Debian's ``zookeeper`` package) as a child process for tests.

The server runs standalone with its data in a temporary directory, listens on a free
loopback port, and uses a short ``tickTime`` with a narrow session-timeout window so
sessions expire within a few seconds when a client stops heartbeating (a killed or
SIGSTOPped broker).

Usage in a test module::

    from pylog.testing.zookeeper import zookeeper_fixture, zk_chroot_fixture
    zookeeper = zookeeper_fixture()          # one server per test module
    zk_connect = zk_chroot_fixture()         # a fresh chroot per test: "127.0.0.1:port/t-..."
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from pathlib import Path

from pylog.testing.process import (
    ServerProcess, free_port, running_in_temp_dir, server_fixture, wait_for_port)

ZOOKEEPER_CLASSPATH = ("/usr/share/java/zookeeper.jar", "/usr/share/java/slf4j-simple.jar")
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"


class ZooKeeperServer:
    """One standalone ZooKeeper server.

    ``tick_time_ms`` and the session-timeout bounds decide how fast a silent client's
    session expires: the server grants a client's requested timeout clamped to
    ``[min_session_timeout_ms, max_session_timeout_ms]``.
    """

    def __init__(self, work_dir: Path, port: int | None = None, tick_time_ms: int = 200,
                 min_session_timeout_ms: int = 400, max_session_timeout_ms: int = 6000) -> None:
        self.work_dir = Path(work_dir)
        self.port = port or free_port()
        self.tick_time_ms = tick_time_ms
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.server: ServerProcess | None = None

    @property
    def connect_string(self) -> str:
        """``host:port`` for ``zookeeper.connect`` (append a chroot path if wanted)."""
        return f"127.0.0.1:{self.port}"

    def _write_config(self) -> Path:
        data_dir = self.work_dir / "data"
        data_dir.mkdir(parents=True, exist_ok=True)
        config = self.work_dir / "zoo.cfg"
        config.write_text("\n".join([
            f"tickTime={self.tick_time_ms}",
            f"dataDir={data_dir}",
            f"clientPort={self.port}",
            "clientPortAddress=127.0.0.1",
            f"minSessionTimeout={self.min_session_timeout_ms}",
            f"maxSessionTimeout={self.max_session_timeout_ms}",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,stat",
            "maxClientCnxns=0",
            # Snapshots and purges are irrelevant for a test server that lives minutes.
            "autopurge.purgeInterval=0",
            "",
        ]))
        return config

    def start(self, timeout: float = 60.0) -> "ZooKeeperServer":
        """Start the server and block until it serves requests (``srvr`` reports a mode)."""
        config = self._write_config()
        argv = ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                "-Dzookeeper.jmx.log4j.disable=true",
                "-cp", ":".join(ZOOKEEPER_CLASSPATH), MAIN_CLASS, str(config)]
        env = dict(os.environ, ZOO_LOG_DIR=str(self.work_dir))
        self.server = ServerProcess(argv, self.work_dir / "zookeeper.log", env=env,
                                    cwd=self.work_dir).start()
        deadline = time.monotonic() + timeout
        wait_for_port("127.0.0.1", self.port, timeout, self.server.process, self.server.log_path)
        while "Mode:" not in self.four_letter_word("srvr"):
            if time.monotonic() > deadline or not self.server.alive():
                self.stop()
                raise RuntimeError(f"ZooKeeper on port {self.port} is not serving:\n"
                                   + self.server.log_text()[-3000:])
            time.sleep(0.05)
        return self

    def four_letter_word(self, word: str, timeout: float = 2.0) -> str:
        """Send a ZooKeeper four-letter command and return the reply ('' if none)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as sock:
                sock.sendall(word.encode("ascii"))
                chunks = []
                while chunk := sock.recv(4096):
                    chunks.append(chunk)
                return b"".join(chunks).decode("utf-8", "replace").strip()
        except OSError:
            return ""

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()

    def kill(self) -> None:
        if self.server is not None:
            self.server.kill()


def running_zookeeper(base_dir: Path | None = None, **options):
    """A started ZooKeeper for the duration of a ``with`` block; its files are removed after."""
    return running_in_temp_dir(lambda work_dir: ZooKeeperServer(work_dir, **options), "pylog-zk-", base_dir)


def zookeeper_fixture(scope: str = "module", **options):
    """A pytest fixture yielding a running ZooKeeperServer, one per ``scope``."""
    return server_fixture(running_zookeeper, "zookeeper", scope, **options)


def zk_chroot_fixture(server_fixture: str = "zookeeper"):
    """A pytest fixture giving each test its own chroot on the shared server.

    The value is a ``zookeeper.connect`` string such as ``127.0.0.1:2181/t-1a2b3c``; the
    chroot node itself is created by whoever connects first (as brokers do).
    """
    import pytest

    @pytest.fixture
    def zk_connect(request) -> str:
        server: ZooKeeperServer = request.getfixturevalue(server_fixture)
        return f"{server.connect_string}/t-{uuid.uuid4().hex[:10]}"

    return zk_connect


def expire_session(connect: str, session: tuple[int, bytes], timeout: float = 10.0) -> None:
    """Make the server expire a live client's session, as if the client went silent.

    A second client attaches to the same session id and password and closes it; the
    server then tells the original client its session expired (the standard trick, also
    used by kazoo's own test harness).
    """
    from kazoo.client import KazooClient

    hosts = connect.partition("/")[0]
    intruder = KazooClient(hosts=hosts, client_id=session)
    intruder.start(timeout=timeout)
    intruder.stop()
    intruder.close()
