"""A private PostgreSQL server (Debian's ``postgresql`` package) as a child process for tests.

``initdb`` makes a cluster in a temporary directory, the server listens on a free loopback
port with its unix socket in that directory, and one database with its owner is created
for the client under test (Airflow's metadata database). Durability is traded for speed
(``fsync``, ``synchronous_commit`` and ``full_page_writes`` off): the cluster lives for
one test module and is removed after.

Postgres refuses to run as root. Run as root, the server and its tools run as the
``postgres`` user (``setpriv``), and the temporary directory is made under ``/tmp`` and
given to that user, since pytest's own temporary directories are private to root.

Usage in a test module::

    from pylog.testing.postgres import postgres_fixture
    postgres = postgres_fixture()            # one server per test module
    # postgres.url("psycopg") -> "postgresql+psycopg://airflow:airflow@127.0.0.1:PORT/airflow"
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from pylog.testing.process import ServerProcess, free_port, wait_for_port

POSTGRES_BIN = Path(os.environ.get("PYLOG_POSTGRES_BIN", "/usr/lib/postgresql/15/bin"))
SYSTEM_USER = "postgres"
"""The unprivileged account the server runs as when the tests run as root."""


class PostgresServer:
    """One PostgreSQL cluster in ``work_dir`` with ``database`` owned by ``user``.

    Clients reach it over TCP on 127.0.0.1:``port`` with ``user``/``password``; every local
    connection is trusted (``initdb --auth=trust``), the password is there for clients that
    insist on one.
    """

    def __init__(self, work_dir: Path, port: int | None = None, database: str = "airflow",
                 user: str = "airflow", password: str = "airflow", max_connections: int = 200) -> None:
        self.work_dir = Path(work_dir)
        self.port = port or free_port()
        self.database = database
        self.user = user
        self.password = password
        self.max_connections = max_connections
        self.server: ServerProcess | None = None

    @property
    def data_dir(self) -> Path:
        return self.work_dir / "data"

    @property
    def socket_dir(self) -> Path:
        return self.work_dir / "socket"

    def url(self, driver: str = "psycopg") -> str:
        """A SQLAlchemy URL for the database, e.g. ``postgresql+psycopg://u:p@127.0.0.1:5433/db``."""
        scheme = f"postgresql+{driver}" if driver else "postgresql"
        return f"{scheme}://{self.user}:{self.password}@127.0.0.1:{self.port}/{self.database}"

    def _as_server_user(self, argv: list[str]) -> list[str]:
        if os.geteuid() != 0:
            return argv
        return ["setpriv", f"--reuid={SYSTEM_USER}", f"--regid={SYSTEM_USER}", "--init-groups", *argv]

    def _tool(self, name: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        result = subprocess.run(self._as_server_user([str(POSTGRES_BIN / name), *args]),
                                capture_output=True, text=True, timeout=timeout,
                                stdin=subprocess.DEVNULL, cwd=self.work_dir)
        if result.returncode != 0:
            raise RuntimeError(f"{name} {' '.join(args)} exited with {result.returncode}:\n"
                               + (result.stdout + result.stderr)[-3000:])
        return result

    def _give_to_server_user(self) -> None:
        if os.geteuid() != 0:
            return
        account = pwd.getpwnam(SYSTEM_USER)
        for path in (self.work_dir, *self.work_dir.rglob("*")):
            os.chown(path, account.pw_uid, account.pw_gid)

    def start(self, timeout: float = 60.0) -> "PostgresServer":
        """initdb, start the server, and create the user and database; blocks until they exist."""
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        self._give_to_server_user()
        self._tool("initdb", "-D", str(self.data_dir), "-U", SYSTEM_USER, "--auth=trust",
                   "--encoding=UTF8", "--locale=C", "--no-sync")
        argv = self._as_server_user([
            str(POSTGRES_BIN / "postgres"), "-D", str(self.data_dir), "-p", str(self.port),
            "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.socket_dir}",
            "-c", f"max_connections={self.max_connections}",
            "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"])
        self.server = ServerProcess(argv, self.work_dir / "postgres.log", cwd=self.work_dir).start()
        wait_for_port("127.0.0.1", self.port, timeout, self.server.process, self.server.log_path)
        self._wait_until_accepting(timeout)
        self.psql(f"CREATE ROLE {self.user} LOGIN PASSWORD '{self.password}'")
        self.psql(f"CREATE DATABASE {self.database} OWNER {self.user}")
        return self

    def _wait_until_accepting(self, timeout: float) -> None:
        # The port opens before recovery ends; pg_isready says when connections are served.
        deadline = time.monotonic() + timeout
        while subprocess.run(self._as_server_user([
                str(POSTGRES_BIN / "pg_isready"), "-q", "-h", str(self.socket_dir), "-p", str(self.port)]),
                stdin=subprocess.DEVNULL, cwd=self.work_dir).returncode != 0:
            if time.monotonic() > deadline or not self.server.alive():
                self.stop()
                raise RuntimeError(f"Postgres on port {self.port} does not accept connections:\n"
                                   + self.server.log_text()[-3000:])
            time.sleep(0.1)

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run ``sql`` as the superuser over the unix socket; returns psql's unaligned output."""
        return self._tool("psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", str(self.socket_dir),
                          "-p", str(self.port), "-U", SYSTEM_USER, "-d", database, "-c", sql).stdout

    def stop(self) -> None:
        """Fast shutdown (SIGINT: open sessions are ended rather than waited for)."""
        if self.server is None or not self.server.alive():
            return
        self.server.signal(2)
        try:
            self.server.process.wait(30)
        except subprocess.TimeoutExpired:
            self.server.kill()


@contextmanager
def running_postgres(**options) -> Iterator[PostgresServer]:
    """A started PostgresServer for the duration of the block; its files are removed after.

    The directory is made in the system's temporary directory, which the ``postgres``
    user can reach when the tests run as root.
    """
    work_dir = Path(tempfile.mkdtemp(prefix="pylog-pg-"))
    server = PostgresServer(work_dir, **options)
    try:
        yield server.start()
    finally:
        server.stop()
        shutil.rmtree(work_dir, ignore_errors=True)


def postgres_fixture(scope: str = "module", **options):
    """A pytest fixture yielding a running PostgresServer, one per ``scope``."""
    import pytest

    @pytest.fixture(scope=scope)
    def postgres() -> Iterator[PostgresServer]:
        with running_postgres(**options) as server:
            yield server

    return postgres
