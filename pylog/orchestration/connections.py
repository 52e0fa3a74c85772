"""The source's Airflow connection, handed to the loader without a secret on a command line.

When ``loader.yaml`` says ``source.airflow_conn_id: ID``, the loader reads the connection
from ``AIRFLOW_CONN_<ID>`` (see :mod:`pylog.etl.source`). Airflow 3 keeps tasks away from
its metadata database, so the connection is resolved where Airflow allows it, in the
task at execute time (``BaseHook.get_connection``: the API server, a secrets backend, or
an ``AIRFLOW_CONN_<ID>`` variable of the deployment), and then given:

* to spark-submit through its environment
  (:class:`pylog.orchestration.operators.PylogSparkSubmitOperator`), never its
  arguments; the operator's templated ``env_vars``, which Airflow stores as rendered
  fields, never hold it;
* to the in-task steps that ask the brokers (the audit's lag check) through this
  process's environment (:func:`source_environment`).

The Spark driver then hands it to executors on a cluster master through
``spark.executorEnv`` (:func:`pylog.etl.source.executor_spark_conf`). On YARN and
Kubernetes the Spark provider would put spark-submit's environment on its command line
(``--conf spark.yarn.appMasterEnv...``), so the operator refuses: use
``sasl.password_file`` with a mounted secret there.
"""

from __future__ import annotations

import json
import os
from typing import Any

from pylog.etl.config import load_config
from pylog.etl.source import connection_variable


def connection_environment(config_path: str) -> dict[str, str]:
    """``{AIRFLOW_CONN_<ID>: connection JSON}`` for the config's ``source.airflow_conn_id``
    (empty without one). Raises Airflow's error when the connection does not exist."""
    conn_id = load_config(config_path).source.security.airflow_conn_id
    if not conn_id:
        return {}
    from airflow.sdk import BaseHook

    connection = BaseHook.get_connection(conn_id)
    fields: dict[str, Any] = {"conn_type": connection.conn_type, "host": connection.host,
                              "port": connection.port, "login": connection.login,
                              "password": connection.password,
                              "extra": connection.extra_dejson}
    return {connection_variable(conn_id): json.dumps({k: v for k, v in fields.items() if v})}


def source_environment(config_path: str) -> None:
    """Put the source's connection in this task process's environment (see the module doc)."""
    os.environ.update(connection_environment(config_path))
