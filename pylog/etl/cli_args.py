"""Arguments of a load, shared by ``jobs/load_log.py`` and ``pylog load``, and the job's main."""

from __future__ import annotations

import argparse
import sys

from pylog.errors import ConfigError, PylogError


def add_load_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="loader configuration (conf/loader.yaml)")
    parser.add_argument("--run-id", help="run id; rerunning the same id finishes or repeats nothing")
    parser.add_argument("--topics", help="comma-separated topics to load (default: all configured)")
    parser.add_argument("--since", help="backfill from this time (ISO-8601, UTC if no zone)")
    parser.add_argument("--until", help="backfill up to this time (default: now)")


def request_from_args(args: argparse.Namespace):
    from pylog.etl import faults
    from pylog.etl.config import parse_timestamp_ms
    from pylog.etl.job import LoadRequest

    def timestamp(name: str, value: str | None) -> int | None:
        if value is None:
            return None
        try:
            return parse_timestamp_ms(value)
        except ValueError:
            raise ConfigError(f"--{name}", f"{value!r} is not an ISO-8601 time such as 2026-11-20T00:00:00Z") from None

    if args.until and not args.since:
        raise ConfigError("--until", "only valid with --since (a backfill)")
    topics = tuple(t.strip() for t in args.topics.split(",") if t.strip()) if args.topics else None
    return LoadRequest(run_id=args.run_id, topics=topics, since_ms=timestamp("since", args.since),
                       until_ms=timestamp("until", args.until), fault=faults.from_env())


def main(argv: list[str]) -> int:
    """Run a load inside spark-submit; errors end as one line on stderr and exit status 1."""
    parser = argparse.ArgumentParser(prog="load_log.py", description="Load log partitions into Parquet tables.")
    add_load_arguments(parser)
    args = parser.parse_args(argv)
    try:
        from pylog.etl.config import load_config
        from pylog.etl.job import run_load
        from pylog.etl.summary import format_summary

        config = load_config(args.config)
        request = request_from_args(args)
        spark = _spark_session(config)
        try:
            audits = run_load(config, spark, request)
        finally:
            spark.stop()
    except PylogError as exc:
        print(f"pylog load: error: {exc}", file=sys.stderr)
        return 1
    print(format_summary(audits))
    return 0


def _spark_session(config):
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    from pylog.etl.source import executor_spark_conf

    submitted = SparkConf()  # what spark-submit was given, before the session exists
    # The loader prints its own progress (pylog.etl.progress); Spark's bar would draw over it.
    builder = SparkSession.builder.appName("pylog-load").config("spark.ui.showConsoleProgress", "false")
    for key, value in executor_spark_conf(config.source, submitted.get("spark.master", "local"),
                                          submitted.get("spark.redaction.regex")).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
