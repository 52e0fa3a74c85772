"""Java components fetched from Maven Central: a classpath per ``pylog/testing/maven/<name>/pom.xml``.

Each directory under ``pylog/testing/maven/`` holds a ``pom.xml`` naming the artifacts of
one component (HDFS's daemons, Apache Kafka, ...). ``classpath(name)`` resolves it once
with ``mvn dependency:build-classpath`` -- the jars land in the local Maven repository,
``~/.m2`` -- and caches the resulting classpath under ``$PYLOG_CACHE_DIR`` (default
``~/.cache/pylog``), keyed by the pom's hash, so a second call costs a file read::

    python -m pylog.testing.maven fetch          # every component (what `make test` runs)
    python -m pylog.testing.maven classpath hdfs # prints the classpath
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

POMS = Path(__file__).with_name("maven")

# What every Java process the tests start runs with: a small footprint on 2 cores (serial GC,
# the C1 compiler only, no perf data); each adds its own heap (-Xmx).
JVM_OPTIONS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData",
               "-Djava.awt.headless=true")


def log4j2_console(root: str = "WARN", loggers: dict[str, str] | None = None,
                   target: str = "SYSTEM_OUT", pattern: str = "[%d] %p %m (%c)%n") -> str:
    """A log4j2.properties writing to the console at ``root`` level, with per-logger levels
    (``{"org.apache.kafka.connect": "INFO"}``)."""
    lines = ["status = warn", "appender.out.type = Console", "appender.out.name = out",
             f"appender.out.target = {target}", "appender.out.layout.type = PatternLayout",
             f"appender.out.layout.pattern = {pattern}", f"rootLogger.level = {root}",
             "rootLogger.appenderRef.out.ref = out"]
    for i, (name, level) in enumerate((loggers or {}).items()):
        lines += [f"logger.l{i}.name = {name}", f"logger.l{i}.level = {level}"]
    return "\n".join(lines) + "\n"


class MavenError(RuntimeError):
    """A component could not be resolved (the message has Maven's own words)."""


def components() -> list[str]:
    return sorted(p.name for p in POMS.iterdir() if (p / "pom.xml").is_file())


def cache_dir() -> Path:
    return Path(os.environ.get("PYLOG_CACHE_DIR", Path.home() / ".cache" / "pylog"))


def classpath(name: str) -> str:
    """The component's classpath (``a.jar:b.jar:...``), resolving it on first use."""
    pom = POMS / name / "pom.xml"
    if not pom.is_file():
        raise MavenError(f"no Maven component {name!r}: one of {', '.join(components())}")
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()[:16]
    cached = cache_dir() / "maven" / f"{name}-{digest}.classpath"
    if cached.is_file():
        entries = cached.read_text().strip()
        if all(Path(jar).is_file() for jar in entries.split(":")):
            return entries
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_suffix(f".{os.getpid()}.tmp")
    result = subprocess.run(
        ["mvn", "-B", "-q", "-f", str(pom), "dependency:build-classpath",
         f"-Dmdep.outputFile={partial}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        tail = "\n".join(result.stdout.splitlines()[-15:])
        raise MavenError(f"cannot resolve {name} from {pom}:\n{tail}")
    os.replace(partial, cached)
    return cached.read_text().strip()


def main(argv: list[str]) -> int:
    if len(argv) >= 1 and argv[0] == "fetch":
        for name in argv[1:] or components():
            jars = classpath(name).split(":")
            print(f"{name}: {len(jars)} jars")
        return 0
    if len(argv) == 2 and argv[0] == "classpath":
        print(classpath(argv[1]))
        return 0
    print("usage: python -m pylog.testing.maven fetch [NAME ...] | classpath NAME", file=sys.stderr)
    return 2


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except MavenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
