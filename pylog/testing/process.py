"""Run a real server as a child process for tests: start, wait until it listens, stop.

Shared by the broker and ZooKeeper fixtures so they start, log and stop the same way.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def wait_for_port(host: str, port: int, timeout: float, process: subprocess.Popen | None = None,
                  log_path: Path | None = None) -> None:
    """Block until ``host:port`` accepts a TCP connection.

    Raises RuntimeError with the tail of ``log_path`` if ``process`` exits first or the
    timeout passes.
    """
    deadline = time.monotonic() + timeout
    while True:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"process exited with {process.returncode} before listening on "
                               f"{host}:{port}{_log_tail(log_path)}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"nothing listening on {host}:{port} after {timeout:.0f}s"
                                   f"{_log_tail(log_path)}") from None
            time.sleep(0.05)


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (children, their children ...), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry))
    found, pending = [], [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    return found


def _log_tail(log_path: Path | None, lines: int = 30) -> str:
    if log_path is None or not log_path.exists():
        return ""
    tail = log_path.read_text(errors="replace").splitlines()[-lines:]
    return "\n--- last lines of " + str(log_path) + " ---\n" + "\n".join(tail)


class ServerProcess:
    """A child process whose output goes to a log file, stopped by signal."""

    def __init__(self, argv: list[str], log_path: Path, env: dict[str, str] | None = None,
                 cwd: Path | None = None) -> None:
        self.argv = argv
        self.log_path = log_path
        self.env = env
        self.cwd = cwd
        self.process: subprocess.Popen | None = None

    def start(self) -> "ServerProcess":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        try:
            self.process = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=self.env, cwd=self.cwd, start_new_session=True)
        finally:
            log.close()
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, signum: int) -> None:
        if self.alive():
            os.kill(self.pid, signum)

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, wait, then SIGKILL. Returns the exit status."""
        if self.process is None:
            return None
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL: no clean shutdown, as in a crash."""
        if self.alive():
            self.process.kill()
            self.process.wait()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@contextmanager
def running_in_temp_dir(make: Callable[[Path], object], prefix: str, base_dir: Path | None = None,
                        finish: Callable[[object], None] | None = None, keep_files: bool = False) -> Iterator:
    """``make(work_dir)`` started, in a new directory under ``base_dir``, for the block.

    Afterwards ``finish(server)`` (default: ``server.stop()``) and the directory is removed
    unless ``keep_files``. The server fixtures (ZooKeeper, HDFS, Kafka, Spark) share this.
    """
    work_dir = Path(tempfile.mkdtemp(prefix=prefix, dir=base_dir))
    server = make(work_dir)
    try:
        yield server.start()
    finally:
        (finish or (lambda started: started.stop()))(server)
        if not keep_files:
            shutil.rmtree(work_dir, ignore_errors=True)


def server_fixture(running: Callable[..., object], directory: str, scope: str = "module", **options):
    """A pytest fixture yielding ``running(base_dir, **options)``'s server, one per ``scope``,
    its files in a pytest temporary directory named after ``directory``."""
    import pytest

    @pytest.fixture(scope=scope)
    def server(tmp_path_factory):
        with running(tmp_path_factory.mktemp(directory), **options) as started:
            yield started

    return server
