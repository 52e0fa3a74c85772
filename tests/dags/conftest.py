"""Airflow for the DAG tests: a private AIRFLOW_HOME with SQLite, migrated once per module."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pylog.orchestration.local_airflow import LocalAirflow

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"


def write_loader_config(directory: Path, bootstrap: str, source: dict | None = None) -> Path:
    """conf/loader.yaml's topics with this test's broker, warehouse and state (``source``:
    settings that replace the source section, e.g. an Airflow connection id)."""
    import yaml

    raw = yaml.safe_load((REPO / "conf" / "loader.yaml").read_text())
    raw["source"]["bootstrap_servers"] = bootstrap
    if source is not None:
        raw["source"] = {k: v for k, v in raw["source"].items()
                         if k not in ("bootstrap_servers",)} | source
    raw["warehouse"] = (directory / "warehouse").as_uri()
    raw["state"] = (directory / "state").as_uri()
    path = directory / "loader.yaml"
    path.write_text(json.dumps(raw, indent=1))
    return path


def local_airflow(directory: Path, loader_config: Path, **extra_env: str) -> LocalAirflow:
    env = {"PYLOG_LOADER_CONFIG": str(loader_config),
           "PYLOG_METASTORE_DIR": str(directory / "metastore")}
    env.update(extra_env)
    return LocalAirflow(directory / "airflow", DAGS, env)


@pytest.fixture(scope="module")
def module_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("dags")
