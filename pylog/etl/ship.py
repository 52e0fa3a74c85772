"""The executors' Python environment: a packed virtualenv for ``spark-submit --archives``.

On a cluster, executors need pylog and what its map tasks import (pyarrow, cramjam,
crc32c, pyyaml, scramp ...), but none of the driver's tools (pyspark: Spark puts its own
``pyspark.zip`` on the executors' path; Airflow; duckdb). This builds a small virtualenv
with just that, pylog installed from its sources (not editable, so its C speedups are
compiled in), the versions pinned to the driver's environment, and packs it as a
``.tar.gz`` whose root is the virtualenv (what ``venv-pack`` makes)::

    python -m pylog.etl.ship --output pylog-env.tar.gz
    PYSPARK_DRIVER_PYTHON=python PYSPARK_PYTHON=./environment/bin/python \\
        spark-submit --master spark://host:7077 --archives pylog-env.tar.gz#environment \\
        jobs/load_log.py --config loader.yaml

(``--conf spark.pyspark.python=...`` would do too, but it also becomes the driver's Python
unless ``spark.pyspark.driver.python`` is set as well.)

The interpreter itself is not copied: ``bin/python`` links to the driver's base Python,
which must exist at the same path on every worker (as with venv-pack).

Archives are cached under ``~/.cache/pylog/executor-env/`` (``PYLOG_CACHE_DIR``), named by
a hash of everything that goes in: pylog's sources, pyproject.toml and setup.py, the pinned
versions, the Python version (not README.md: the build gets a stub, as executors never read
it). A build writes a temporary file, then renames it.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from pylog.etl.errors import LoaderError

# What the executors import beyond pylog's declared dependencies: pyarrow for Parquet and
# the file systems; numpy, which pylog.records.columns imports (pyarrow does not require
# it); hdfs and hdfs-native for an hdfs:// warehouse (the loader extra).
EXECUTOR_PACKAGES = ("pyarrow", "numpy", "hdfs", "hdfs-native")
SOURCE_SUFFIXES = (".py", ".pyi", ".c", ".h", ".typed")
PROJECT_FILES = ("pyproject.toml", "setup.py")
KEEP_ARCHIVES = 3
FORMAT = "1"  # bump when the build itself changes


class ShipError(LoaderError):
    """The environment could not be built (pip failed, or no pylog sources to build from)."""


def project_root() -> Path:
    """The source checkout pylog is imported from (it holds pyproject.toml)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / "pyproject.toml").exists():
        raise ShipError(f"pylog is not imported from a source checkout ({root} has no "
                        "pyproject.toml): give --source")
    return root


def cache_dir() -> Path:
    base = os.environ.get("PYLOG_CACHE_DIR") or Path.home() / ".cache" / "pylog"
    return Path(base) / "executor-env"


def driver_versions() -> dict[str, str]:
    """``name -> version`` of every distribution in this environment except pylog itself:
    the executors get the same versions as the driver."""
    versions = {}
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name and name != "pylog":
            versions[name] = dist.version
    return dict(sorted(versions.items()))


def _source_files(root: Path) -> list[Path]:
    files = [root / name for name in PROJECT_FILES if (root / name).exists()]
    for path in sorted((root / "pylog").rglob("*")):
        if path.is_file() and path.suffix in SOURCE_SUFFIXES and "__pycache__" not in path.parts:
            files.append(path)
    return files


def environment_key(root: Path, packages: tuple[str, ...], versions: dict[str, str]) -> str:
    """A hash of everything the archive is built from."""
    digest = hashlib.sha256()
    for part in (FORMAT, sys.version, platform.machine(), " ".join(packages),
                 "".join(f"{n}=={v}\n" for n, v in versions.items())):
        digest.update(part.encode() + b"\0")
    for path in _source_files(root):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:20]


def executor_environment(root: Path | None = None, packages: tuple[str, ...] = EXECUTOR_PACKAGES,
                         cache: Path | None = None, log=None) -> Path:
    """The packed executor environment for the pylog sources at ``root``: from the cache,
    or built now (about 10 s with a warm pip cache). Returns the ``.tar.gz`` path.

    Raises ShipError if pip fails (its output is in the message).
    """
    root = root or project_root()
    cache = cache or cache_dir()
    versions = driver_versions()
    archive = cache / f"pylog-env-{environment_key(root, packages, versions)}.tar.gz"
    if archive.exists():
        os.utime(archive)  # most recently used: pruned last
        return archive
    cache.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pylog-env-", dir=cache) as scratch:
        scratch = Path(scratch)
        _build_venv(root, scratch, packages, versions)
        partial = scratch / archive.name
        pack_venv(scratch / "venv", partial)
        os.replace(partial, archive)
    if log:
        log(f"built {archive} ({archive.stat().st_size >> 20} MB) in {time.monotonic() - started:.1f} s")
    _prune(cache, keep=archive)
    return archive


def _build_venv(root: Path, scratch: Path, packages: tuple[str, ...], versions: dict[str, str]) -> None:
    # Build from a copy: setuptools writes build/ and *.egg-info next to the sources.
    source = scratch / "source"
    for path in _source_files(root):
        target = source / path.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    (source / "README.md").write_text("pylog, built for Spark executors\n")  # pyproject's readme
    constraints = scratch / "constraints.txt"
    constraints.write_text("".join(f"{n}=={v}\n" for n, v in versions.items()))
    venv = scratch / "venv"
    base_python = getattr(sys, "_base_executable", sys.executable)
    _run([base_python, "-m", "venv", "--without-pip", str(venv)])
    # This environment's pip installs into the new one: no pip inside the archive.
    _run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
          "--quiet", "--disable-pip-version-check", "--no-warn-script-location",
          "--constraint", str(constraints), str(source), *packages])


def _run(argv: list[str]) -> None:
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        raise ShipError(f"{' '.join(argv[:6])} ... failed with {result.returncode}:\n"
                        f"{(result.stdout + result.stderr)[-4000:]}")


def pack_venv(venv: Path, output: Path, compresslevel: int = 1) -> Path:
    """Pack ``venv`` as a gzipped tar whose root is the virtualenv, symlinks kept.

    Level 1: the archive is about 12 % larger than at level 6 and packs about 3 times
    faster. Scripts' shebangs point into the build directory; executors run only
    ``bin/python``, which finds its pyvenv.cfg beside it wherever it is unpacked."""
    with tarfile.open(output, "w:gz", compresslevel=compresslevel) as tar:
        for path in sorted(venv.iterdir()):
            tar.add(path, arcname=path.name)
    return output


def _prune(cache: Path, keep: Path) -> None:
    """Remove all but the ``KEEP_ARCHIVES`` most recently used archives."""
    archives = sorted(cache.glob("pylog-env-*.tar.gz"), key=lambda p: p.stat().st_mtime, reverse=True)
    for stale in archives[KEEP_ARCHIVES:]:
        if stale != keep:
            stale.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pylog.etl.ship",
        description="Pack the executors' Python environment for spark-submit --archives.")
    parser.add_argument("--output", help="copy the archive here (default: print its cached path)")
    parser.add_argument("--source", help="pylog source checkout (default: the one imported)")
    parser.add_argument("--package", action="append", default=None,
                        help=f"extra packages for the executors (default: {' '.join(EXECUTOR_PACKAGES)})")
    args = parser.parse_args(argv)
    try:
        archive = executor_environment(Path(args.source) if args.source else None,
                                       tuple(args.package) if args.package else EXECUTOR_PACKAGES,
                                       log=lambda line: print(line, file=sys.stderr))
    except ShipError as exc:
        print(f"pylog ship: error: {exc}", file=sys.stderr)
        return 1
    if args.output:
        output = Path(args.output)
        partial = output.with_name(output.name + ".partial")
        shutil.copyfile(archive, partial)
        os.replace(partial, output)
        archive = output
    print(archive)
    return 0


if __name__ == "__main__":
    sys.exit(main())
