"""pylog_load: land every configured topic in its Parquet table, exactly once, on a schedule.

plan_loads -> load (one spark-submit of jobs/load_log.py per topic, dynamically mapped)
-> audit -> register_partitions (Spark catalog; emits one Asset per table), and beside it
compact (small files of partitions older than ``compaction.older_than`` rewritten, under
the table lock; skipped when ``compaction.after_load`` is false in loader.yaml).

The Airflow run id is the load's run id: a retried task or a cleared DAG run reuses the
load's plan and adds no duplicates. Settings: see pylog.orchestration.settings. A source
behind ``source.airflow_conn_id`` is resolved at execute time and reaches spark-submit
through its environment only (pylog.orchestration.connections).
"""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import Asset, dag, task

from pylog.etl.config import load_config
from pylog.orchestration import loads
from pylog.orchestration.connections import source_environment
from pylog.orchestration.operators import PylogSparkSubmitOperator
from pylog.orchestration.settings import at_runtime, from_environment

SETTINGS = from_environment(Path(__file__).resolve().parents[1])
TABLE_ASSETS = [Asset(name=f"pylog.{table}", uri=uri)
                for table, uri in loads.table_asset_uris(load_config(SETTINGS.loader_config)).items()]


@dag(dag_id="pylog_load", schedule=SETTINGS.schedule, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
     catchup=False, max_active_runs=1, tags=["pylog"], doc_md=__doc__,
     default_args={"retries": 1, "retry_delay": SETTINGS.retry_delay})
def pylog_load():
    @task
    def plan_loads(run_id=None) -> list[list[str]]:
        return loads.load_arguments(at_runtime(SETTINGS).loader_config, run_id)

    load = PylogSparkSubmitOperator.partial(
        task_id="load", application=SETTINGS.load_application, conn_id=SETTINGS.spark_conn_id,
        name="pylog-load", py_files=SETTINGS.py_files, env_vars=SETTINGS.spark_env,
    ).expand(application_args=plan_loads())

    @task(retries=0)  # a run that does not add up stays failed until someone looks
    def audit(run_id=None) -> str:
        settings = at_runtime(SETTINGS)
        source_environment(settings.loader_config)  # the lag check asks the brokers
        return loads.audit(settings.loader_config, run_id, settings.max_lag)

    @task(outlets=TABLE_ASSETS)
    def register_partitions() -> list[str]:
        return loads.register_catalog(at_runtime(SETTINGS))

    @task
    def compact() -> str:
        from airflow.sdk.exceptions import AirflowSkipException

        report = loads.compact(at_runtime(SETTINGS).loader_config)
        if report is None:
            raise AirflowSkipException("compaction.after_load is false in the loader configuration")
        return report

    checked = load >> audit()
    checked >> register_partitions()
    checked >> compact()


pylog_load()
