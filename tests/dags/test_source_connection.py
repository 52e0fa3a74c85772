"""The DAGs' spark-submit gets the source's Airflow connection in its environment, never
on its command line nor in the operator's rendered fields; real Airflow classes (the
Spark provider's hook builds the command), no scheduler."""

from __future__ import annotations

import json

import pytest
import yaml

from pylog.errors import ConfigError
from pylog.etl.source import connection_settings
from pylog.orchestration.connections import connection_environment
from pylog.orchestration.operators import PylogSparkSubmitOperator

PASSWORD = "conn-Pa55-d41c"
SOURCE = "kafka://loader:conn-Pa55-d41c@/?bootstrap.servers=b1%3A9093%2Cb2%3A9093" \
         "&security.protocol=SASL_SSL&sasl.mechanism=SCRAM-SHA-512"


@pytest.fixture
def loader_yaml(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_PYLOG_SOURCE", SOURCE)  # URI form, as Airflow writes it
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark",
                                                                 "host": "local[2]"}))
    path = tmp_path / "loader.yaml"
    path.write_text(yaml.safe_dump({
        "source": {"airflow_conn_id": "pylog_source"}, "warehouse": "file:///w",
        "state": "file:///s", "topics": {"events": {"format": "raw"}}}))
    return str(path)


def operator(loader_yaml: str, **kwargs) -> PylogSparkSubmitOperator:
    return PylogSparkSubmitOperator(
        task_id="load", application="jobs/load_log.py", name="pylog-load",
        env_vars={"SPARK_CONF_DIR": "/opt/conf"},
        application_args=["--config", loader_yaml, "--run-id", "r1"], **kwargs)


def test_the_connection_reaches_spark_submit_through_its_environment(loader_yaml):
    task = operator(loader_yaml)
    hook = task._get_hook()
    command = hook._build_spark_submit_command("jobs/load_log.py")
    assert PASSWORD not in " ".join(command)
    assert task.env_vars == {"SPARK_CONF_DIR": "/opt/conf"}  # what Airflow renders and stores
    environment = hook._env
    assert environment["SPARK_CONF_DIR"] == "/opt/conf"
    # What the loader reads back from that environment.
    settings = connection_settings("pylog_source", environment)
    assert settings == {"bootstrap.servers": "b1:9093,b2:9093", "security.protocol": "SASL_SSL",
                        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "loader",
                        "sasl.password": PASSWORD}


def test_on_yarn_the_operator_refuses_to_put_it_on_a_command_line(loader_yaml, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_YARN", json.dumps({"conn_type": "spark",
                                                              "host": "yarn"}))
    with pytest.raises(ConfigError, match="sasl.password_file"):
        operator(loader_yaml, conn_id="spark_yarn")._get_hook()


def test_no_connection_no_extra_environment(tmp_path):
    path = tmp_path / "loader.yaml"
    path.write_text(yaml.safe_dump({
        "source": {"bootstrap_servers": "b1:9092"}, "warehouse": "file:///w",
        "state": "file:///s", "topics": {"events": {"format": "raw"}}}))
    assert connection_environment(str(path)) == {}
