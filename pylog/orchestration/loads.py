"""What the DAGs' tasks do, as plain functions.

The DAG files wire these into tasks; everything here runs (and is tested) without a
scheduler: building each mapped load's spark-submit arguments, the per-table Assets,
auditing a run and registering its partitions in the Spark catalog.
"""

from __future__ import annotations

import logging

from pylog.errors import ConfigError
from pylog.etl.config import LoaderConfig, load_config, parse_timestamp_ms
from pylog.etl.fs import Storage
from pylog.orchestration.audit import audit_run, enforce, format_checks
from pylog.orchestration.settings import DagSettings
from pylog.warehouse.catalog import table_location

log = logging.getLogger(__name__)


def load_arguments(config_path: str, run_id: str, topics: list[str] | None = None) -> list[list[str]]:
    """One ``jobs/load_log.py`` argument list per configured topic (the mapped loads).

    The DAG run id is the load's run id, so a retry or a rerun of the DAG run reuses the
    load's plan and loads nothing twice.
    """
    config = load_config(config_path)
    return [["--config", config_path, "--run-id", run_id, "--topics", topic.topic]
            for topic in config.select(topics)]


def backfill_arguments(config_path: str, run_id: str, since: str, until: str | None = None,
                       topics: str | list[str] | None = None) -> list[str]:
    """``jobs/load_log.py`` arguments of a backfill; ConfigError names a bad param."""
    config = load_config(config_path)
    for name, value in (("since", since), ("until", until)):
        if name == "since" and not value:
            raise ConfigError("since", "a backfill needs a start time, e.g. 2026-11-20T00:00:00Z")
        if value:
            try:
                parse_timestamp_ms(value)
            except ValueError:
                raise ConfigError(name, f"{value!r} is not an ISO-8601 time such as 2026-11-20T00:00:00Z") from None
    names = _topic_list(topics)
    config.select(names)  # raises ConfigError for a topic that is not configured
    args = ["--config", config_path, "--run-id", run_id, "--since", since]
    if until:
        args += ["--until", until]
    if names:
        args += ["--topics", ",".join(names)]
    return args


def _topic_list(topics: str | list[str] | None) -> list[str] | None:
    if not topics:
        return None
    if isinstance(topics, str):
        topics = topics.split(",")
    return [t.strip() for t in topics if t and t.strip()] or None


def table_asset_uris(config: LoaderConfig) -> dict[str, str]:
    """``{table: URI of its directory}`` for every configured table: the DAGs' Asset outlets."""
    storage = Storage.from_uri(config.warehouse)
    return {topic.table: table_location(storage, topic.table) for topic in config.topics}


def audit(config_path: str, run_id: str, max_lag: int | None, topics: list[str] | None = None) -> str:
    """Audit a run (see :mod:`pylog.orchestration.audit`); returns the report, raises on failure."""
    checks = audit_run(load_config(config_path), run_id, topics=topics, max_lag=max_lag)
    report = format_checks(checks)
    log.info("audit of run %s:\n%s", run_id, report)
    enforce(checks)
    return report


def register_catalog(settings: DagSettings) -> list[str]:
    """Register every table of the loader's warehouse in the Spark catalog; lines for the log."""
    from pylog.warehouse.catalog import catalog_session, register_tables

    config = load_config(settings.loader_config)
    spark = catalog_session(settings.metastore_dir)
    try:
        registrations = register_tables(spark, config.warehouse, database=settings.catalog_database)
    finally:
        spark.stop()
    return [f"{r.qualified_name} at {r.location}: {'created, ' if r.created else ''}"
            f"{len(r.added_partitions)} new partitions" for r in registrations]


def compact(config_path: str) -> str | None:
    """The DAG's compact task: compact every table per the ``compaction:`` section.

    Returns the report (see ``pylog compact``), or None when ``compaction.after_load`` is
    false (the task is then skipped). Raises TableLockedError when a run kept a table
    locked longer than ``compaction.lock_wait_seconds``.
    """
    from pylog.etl.compact import compact_tables, format_compactions

    config = load_config(config_path)
    if not config.compaction.after_load:
        return None
    report = format_compactions(compact_tables(config, older_than_s=config.compaction.older_than_seconds))
    log.info("compaction:\n%s", report)
    return report
