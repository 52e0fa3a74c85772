"""pylog_backfill: reload a time window from the log, triggered by hand.

Params: ``since`` (ISO-8601, required), ``until`` (default: now), ``topics``
(comma-separated; default: all configured). Runs jobs/load_log.py in backfill mode, then
audits the run and registers the partitions. The scheduled load's committed offsets do
not move. Settings: see pylog.orchestration.settings.
"""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import Asset, Param, dag, task

from pylog.etl.config import load_config
from pylog.orchestration import loads
from pylog.orchestration.connections import source_environment
from pylog.orchestration.operators import PylogSparkSubmitOperator
from pylog.orchestration.settings import at_runtime, from_environment

SETTINGS = from_environment(Path(__file__).resolve().parents[1])
TABLE_ASSETS = [Asset(name=f"pylog.{table}", uri=uri)
                for table, uri in loads.table_asset_uris(load_config(SETTINGS.loader_config)).items()]


@dag(dag_id="pylog_backfill", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
     catchup=False, tags=["pylog"], doc_md=__doc__,
     params={
         "since": Param(type="string", description="start of the window, e.g. 2026-11-20T00:00:00Z"),
         "until": Param(None, type=["null", "string"], description="end of the window (default: now)"),
         "topics": Param(None, type=["null", "string"], description="comma-separated topics (default: all)"),
     })
def pylog_backfill():
    @task
    def backfill_arguments(params=None, run_id=None) -> list[str]:
        return loads.backfill_arguments(at_runtime(SETTINGS).loader_config, run_id, params["since"],
                                        params.get("until"), params.get("topics"))

    backfill = PylogSparkSubmitOperator(
        task_id="backfill", application=SETTINGS.load_application, conn_id=SETTINGS.spark_conn_id,
        name="pylog-backfill", py_files=SETTINGS.py_files, env_vars=SETTINGS.spark_env,
        application_args=backfill_arguments())

    @task(retries=0)  # a run that does not add up stays failed until someone looks
    def audit(params=None, run_id=None) -> str:
        topics = [t.strip() for t in (params.get("topics") or "").split(",") if t.strip()] or None
        config = at_runtime(SETTINGS).loader_config
        source_environment(config)
        return loads.audit(config, run_id, max_lag=None, topics=topics)

    @task(outlets=TABLE_ASSETS)
    def register_partitions() -> list[str]:
        return loads.register_catalog(at_runtime(SETTINGS))

    backfill >> audit() >> register_partitions()


pylog_backfill()
