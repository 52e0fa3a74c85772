"""Compiling small Java programs for tests, once: ``javac`` into a cached classes directory.

A test's Java program (say ``pylog/testing/java/wordcount/WordCount.java``) is compiled
against a classpath from :mod:`pylog.testing.maven`. The classes land under
``<cache_dir>/java/<name>-<hash>``, the hash over the sources' names and bytes and the
classpath, so the second run of a test (or a second test) finds them compiled::

    classes = compiled("wordcount", classpath("kafka-streams"))
    subprocess.run(["java", "-cp", f"{classes}:{classpath('kafka-streams')}", "WordCount"])
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from pylog.testing.maven import cache_dir

SOURCES = Path(__file__).with_name("java")


class JavaCompileError(RuntimeError):
    """``javac`` rejected the sources (the message has its own words)."""


def compiled(name: str, classpath: str = "", javac: str = "javac") -> Path:
    """The classes directory of ``pylog/testing/java/<name>/*.java`` compiled against
    ``classpath``, compiling them on first use.

    Raises JavaCompileError if ``javac`` fails."""
    sources = sorted((SOURCES / name).rglob("*.java"))
    if not sources:
        raise JavaCompileError(f"no Java sources under {SOURCES / name}")
    digest = hashlib.sha256(classpath.encode())
    for source in sources:
        digest.update(str(source.relative_to(SOURCES)).encode() + b"\0" + source.read_bytes())
    target = cache_dir() / "java" / f"{name}-{digest.hexdigest()[:16]}"
    if target.is_dir():
        return target
    # Compiled into a temporary directory, then renamed: a killed javac leaves no half.
    partial = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    argv = [javac, "-nowarn", "-d", str(partial), *(["-cp", classpath] if classpath else []),
            *map(str, sources)]
    result = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        raise JavaCompileError(f"javac failed for {name}:\n{result.stdout}")
    try:
        os.rename(partial, target)
    except OSError:  # another process compiled the same sources first
        shutil.rmtree(partial, ignore_errors=True)
    return target
