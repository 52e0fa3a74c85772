"""Running Apache Kafka's own Java tools and clients as child processes.

``java -cp <kafka jars> org.apache.kafka.tools.<Tool>`` is what ``kafka-topics.sh`` and its
siblings run. The long-running ones Kafka's system tests drive (VerifiableProducer,
VerifiableConsumer, TransactionalMessageCopier) print one JSON object per line; a
``JavaClient`` collects those as they come so a test can wait on them while the process runs.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
from pathlib import Path
from typing import Callable

from pylog.testing.waiting import wait_until

TOOLS = "org.apache.kafka.tools."

# A tool is a short-lived client: a small heap and the C1 compiler start it fastest.
JVM_OPTIONS = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData",
               "-Djava.awt.headless=true")
# Errors only, on stderr: stdout stays what the tool itself prints.
LOG4J2 = """\
status = error
appender.err.type = Console
appender.err.name = err
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = %p %m (%c)%n
rootLogger.level = ERROR
rootLogger.appenderRef.err.ref = err
"""


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
