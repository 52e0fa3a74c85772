"""``pylog load``: run the loader job through spark-submit, on any Spark master.

Finds spark-submit (``$SPARK_HOME/bin`` or the pyspark installation), zips the pylog
package for the executors (``--py-files``), and passes ``--master``/``--conf`` through.
Other settings come from Spark's usual places: ``$SPARK_CONF_DIR/spark-defaults.conf``
(when SPARK_CONF_DIR is unset, the ``conf/`` directory next to the loader config is used
if it holds a spark-defaults.conf). PYSPARK_PYTHON defaults to this interpreter.

With no master from ``--master``, ``--conf spark.master=``, ``$MASTER`` or
spark-defaults.conf, the master is ``local[*,4]``: local mode ignores
``spark.task.maxFailures`` and only retries a failed task when the master says so
(``local[N,F]``: N threads, F attempts per task).

    pylog load --config conf/loader.yaml
    pylog load --config conf/loader.yaml --since 2026-11-20T00:00:00Z --until 2026-11-21T00:00:00Z
    pylog load --config conf/loader.yaml --master yarn --conf spark.executor.instances=4
    pylog load --config conf/loader.yaml --master spark://host:7077 --executor-env pylog-env.tar.gz

On workers without pylog, ``--executor-env`` ships a packed virtualenv
(``python -m pylog.etl.ship --output pylog-env.tar.gz``: pylog with its C speedups and
what its tasks import) with ``--archives`` instead of the zip, and runs the executors'
Python from it; the driver keeps this interpreter.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from pylog.errors import ConfigError

DEFAULT_MASTER = "local[*,4]"
"""Local mode with 4 attempts per task: plain ``local[*]`` never retries a failed task."""

JOB_SCRIPT = """import sys
from pylog.etl.cli_args import main
sys.exit(main(sys.argv[1:]))
"""


def register(subparsers) -> None:
    from pylog.etl.cli_args import add_load_arguments

    parser = subparsers.add_parser("load", help="load topics into Parquet tables (spark-submit)",
                                   description="Load log partitions into Parquet tables exactly once.")
    add_load_arguments(parser)
    parser.add_argument("--master", help="Spark master (default: from spark-defaults.conf, "
                        f"else {DEFAULT_MASTER}: local mode that retries a failed task)")
    parser.add_argument("--deploy-mode", choices=["client", "cluster"], help="spark-submit --deploy-mode")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting, passed to spark-submit (repeatable)")
    parser.add_argument("--spark-submit", help="path of spark-submit (default: SPARK_HOME or pyspark's)")
    parser.add_argument("--executor-env", metavar="ARCHIVE",
                        help="packed virtualenv for the executors (python -m pylog.etl.ship), "
                             "shipped with --archives instead of pylog's zip")
    parser.set_defaults(func=run)


def find_spark_submit(explicit: str | None = None) -> str:
    """spark-submit from the argument, $SPARK_HOME, or the installed pyspark package."""
    candidates = []
    if explicit:
        candidates.append(Path(explicit))
    if os.environ.get("SPARK_HOME"):
        candidates.append(Path(os.environ["SPARK_HOME"]) / "bin" / "spark-submit")
    try:
        import pyspark

        candidates.append(Path(pyspark.__file__).parent / "bin" / "spark-submit")
    except ImportError:
        pass
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("spark-submit")
    if found:
        return found
    raise ConfigError("--spark-submit", "spark-submit not found: set SPARK_HOME or install pyspark")


def zip_package(directory: Path) -> Path:
    """``pylog.zip`` of the installed pylog package (for ``--py-files``)."""
    import pylog

    package = Path(pylog.__file__).parent
    target = directory / "pylog.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(package.rglob("*.py")):
            archive.write(path, Path("pylog") / path.relative_to(package))
    return target


def check_storage(uri: str) -> None:
    """Raise a one-line error unless ``uri``'s directory exists or can be made: an
    unreachable NameNode, a path through a file, a refused permission. Nothing else is
    written, so a refused load leaves no trace."""
    from pylog.etl.fs import Storage

    storage = Storage.from_uri(uri)
    storage.makedirs(storage.root)


def check_master(master: str | None, timeout_s: float = 10.0) -> None:
    """Raise a one-line error unless a ``spark://`` master (any of an HA list) accepts a
    connection: spark-submit itself retries for a minute and then ends in a stack trace."""
    if not master or not master.startswith("spark://"):
        return
    addresses = [a.strip() for a in master.removeprefix("spark://").split(",") if a.strip()]
    problems = []
    for address in addresses:
        host, _, port = address.rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=timeout_s):
                return
        except ValueError:
            problems.append(f"{address}: not host:port")
        except OSError as exc:
            problems.append(f"{address}: {exc.strerror or exc}")
    raise ConfigError("--master", f"cannot reach the Spark master {master} ({'; '.join(problems)})")


def configured_master(args, env: dict[str, str]) -> str | None:
    """The master Spark would use without ``--master``: --conf, $MASTER, spark-defaults.conf."""
    for setting in args.conf:
        key, _, value = setting.partition("=")
        if key.strip() == "spark.master":
            return value.strip()
    if env.get("MASTER"):
        return env["MASTER"]
    if env.get("SPARK_CONF_DIR"):
        defaults = Path(env["SPARK_CONF_DIR"]) / "spark-defaults.conf"
        if defaults.is_file():
            for line in defaults.read_text().splitlines():
                parts = line.split(None, 1)
                if len(parts) == 2 and parts[0] == "spark.master":
                    return parts[1].strip()
    return None


def build_command(args, spark_submit: str, py_files: Path | None, script: Path,
                  env: dict[str, str] | None = None) -> list[str]:
    command = [spark_submit, "--name", "pylog-load"]
    if getattr(args, "executor_env", None):
        archive = Path(args.executor_env).resolve()
        command += ["--archives", f"{archive}#environment",
                    "--conf", "spark.pyspark.python=./environment/bin/python",
                    "--conf", f"spark.pyspark.driver.python={os.environ.get('PYSPARK_DRIVER_PYTHON', sys.executable)}"]
    elif py_files is not None:
        command += ["--py-files", str(py_files)]
    master = args.master or (None if configured_master(args, env or {}) else DEFAULT_MASTER)
    if master:
        command += ["--master", master]
    if args.deploy_mode:
        command += ["--deploy-mode", args.deploy_mode]
    for setting in args.conf:
        if "=" not in setting:
            raise ConfigError("--conf", f"{setting!r} is not KEY=VALUE")
        command += ["--conf", setting]
    command += [str(script), "--config", str(Path(args.config).resolve())]
    for flag in ("run_id", "topics", "since", "until"):
        value = getattr(args, flag)
        if value is not None:
            command += [f"--{flag.replace('_', '-')}", value]
    return command


def spark_environment(config_path: str) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", env["PYSPARK_PYTHON"])
    if "SPARK_CONF_DIR" not in env:
        conf_dir = Path(config_path).resolve().parent
        if (conf_dir / "spark-defaults.conf").is_file():
            env["SPARK_CONF_DIR"] = str(conf_dir)
    return env


def run(args) -> int:
    from pylog.etl.cli_args import request_from_args
    from pylog.etl.config import load_config

    config = load_config(args.config)  # bad config or arguments fail here, before Spark starts
    request = request_from_args(args)
    config.select(list(request.topics) if request.topics else None)
    if args.executor_env and not Path(args.executor_env).is_file():
        raise ConfigError("--executor-env", f"no such file: {args.executor_env} "
                          "(build one with: python -m pylog.etl.ship --output FILE)")
    for uri in (config.state, config.warehouse):  # and so does a storage that cannot take the load
        check_storage(uri)
    spark_submit = find_spark_submit(args.spark_submit)
    with tempfile.TemporaryDirectory(prefix="pylog-load-") as scratch:
        directory = Path(scratch)
        script = directory / "load_log.py"
        script.write_text(JOB_SCRIPT)
        env = spark_environment(args.config)
        check_master(args.master or configured_master(args, env))
        py_files = None if args.executor_env else zip_package(directory)
        command = build_command(args, spark_submit, py_files, script, env)
        return subprocess.call(command, env=env)
