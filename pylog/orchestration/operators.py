"""Operators of the DAGs: SparkSubmitOperator with the loader's source connection."""

from __future__ import annotations

from typing import Sequence

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from pylog.errors import ConfigError
from pylog.orchestration.connections import connection_environment


class PylogSparkSubmitOperator(SparkSubmitOperator):
    """SparkSubmitOperator for ``jobs/load_log.py`` that gives spark-submit the loader's
    source connection in its environment. Its arguments are SparkSubmitOperator's; the
    loader config is the one named by ``--config`` in ``application_args``.

    Raises ConfigError when the Spark connection's master is YARN or Kubernetes and the
    source needs an Airflow connection (see the module docstring).
    """

    def _get_hook(self):
        extra = connection_environment(_config_argument(self.application_args))
        if not extra:
            return super()._get_hook()
        rendered = self.env_vars
        self.env_vars = {**(rendered or {}), **extra}  # only for the hook, never rendered
        try:
            hook = super()._get_hook()
        finally:
            self.env_vars = rendered
        if hook._is_yarn or hook._is_kubernetes:
            raise ConfigError("source.airflow_conn_id", "on YARN and Kubernetes spark-submit's "
                              "environment goes on its command line; give the source's "
                              "password as sasl.password_file (a mounted secret) instead")
        return hook


def _config_argument(arguments: Sequence[str] | None) -> str:
    arguments = list(arguments or [])
    try:
        return arguments[arguments.index("--config") + 1]
    except (ValueError, IndexError):
        raise ConfigError("application_args", "no --config <loader.yaml> among them") from None
