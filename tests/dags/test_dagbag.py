"""The DAG files import cleanly in Airflow and have the shape the deployment relies on."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.dags.conftest import DAGS, local_airflow, write_loader_config

_INSPECT = r"""
import json, sys
from airflow.dag_processing.dagbag import DagBag

bag = DagBag(dag_folder=sys.argv[1])
found = {"import_errors": {path: str(error) for path, error in bag.import_errors.items()}, "dags": {}}
for dag_id, dag in bag.dags.items():
    tasks = {}
    for task in dag.tasks:
        partial = getattr(task, "partial_kwargs", None)
        tasks[task.task_id] = {
            "operator": getattr(task, "operator_name", None) or type(task).__name__,
            "mapped": partial is not None,
            "application": (partial or {}).get("application", getattr(task, "application", None)),
            "outlets": sorted(getattr(outlet, "uri", str(outlet)) for outlet in task.outlets),
            "upstream": sorted(task.upstream_task_ids),
            "retries": (partial or {}).get("retries", getattr(task, "retries", None)),
        }
    found["dags"][dag_id] = {"schedule": str(dag.schedule), "tasks": tasks,
                             "params": sorted(dag.params.keys())}
print("INSPECT:" + json.dumps(found))
"""


def _inspect(airflow) -> dict:
    result = subprocess.run([sys.executable, "-c", _INSPECT, str(DAGS)], env=airflow.env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    [line] = [l for l in result.stdout.splitlines() if l.startswith("INSPECT:")]
    return json.loads(line[len("INSPECT:"):])


@pytest.fixture(scope="module")
def loader_config(module_dir):
    return write_loader_config(module_dir, "127.0.0.1:9")


@pytest.fixture(scope="module")
def dagbag(module_dir, loader_config):
    airflow = local_airflow(module_dir, loader_config)
    airflow.migrate()
    return _inspect(airflow)


def test_dags_import_without_errors(dagbag):
    assert dagbag["import_errors"] == {}
    assert set(dagbag["dags"]) == {"pylog_load", "pylog_backfill"}


def test_load_dag_maps_one_spark_submit_per_topic_then_audits_and_registers(dagbag, module_dir):
    dag = dagbag["dags"]["pylog_load"]
    tasks = dag["tasks"]
    assert dag["schedule"] == "@hourly"  # the default
    load = tasks["load"]
    assert load["mapped"] and load["operator"] == "PylogSparkSubmitOperator"
    assert load["application"].endswith("jobs/load_log.py")
    assert tasks["load"]["upstream"] == ["plan_loads"]
    assert tasks["audit"]["upstream"] == ["load"]
    assert tasks["audit"]["retries"] == 0
    assert tasks["register_partitions"]["upstream"] == ["audit"]
    assert tasks["register_partitions"]["outlets"] == [(module_dir / "warehouse" / "page_views").as_uri()]


def test_backfill_dag_takes_since_until_topics(dagbag):
    dag = dagbag["dags"]["pylog_backfill"]
    assert dag["schedule"] == "None"
    assert dag["params"] == ["since", "topics", "until"]
    assert dag["tasks"]["backfill"]["operator"] == "PylogSparkSubmitOperator"
    assert dag["tasks"]["backfill"]["upstream"] == ["backfill_arguments"]
    assert dag["tasks"]["register_partitions"]["outlets"]


def test_schedule_comes_from_the_environment(module_dir, loader_config):
    airflow = local_airflow(module_dir, loader_config, PYLOG_LOAD_SCHEDULE="*/15 * * * *")
    assert _inspect(airflow)["dags"]["pylog_load"]["schedule"] == "*/15 * * * *"


def test_a_bad_setting_is_an_import_error_naming_it(module_dir, loader_config, tmp_path):
    airflow = local_airflow(module_dir, loader_config, PYLOG_MAX_LAG="lots")
    errors = _inspect(airflow)["import_errors"]
    assert len(errors) == 2 and all("PYLOG_MAX_LAG" in e for e in errors.values())
    broken = tmp_path / "loader.yaml"
    broken.write_text(loader_config.read_text().replace('"format": "json"', '"format": "xml"'))
    errors = _inspect(local_airflow(module_dir, broken))["import_errors"]
    assert len(errors) == 2 and all("topics.page_views.format" in e for e in errors.values())
