"""The loader against a secured pylog broker: SASL_SSL with SCRAM, ACLs on, the loader's
user allowed only to read its topic and commit its progress group.

``pylog load`` (spark-submit, local executors reading the secret themselves) runs a
scheduled load with the password in an environment variable named by ``loader.yaml``;
a backfill of the same table, and a load whose settings come from an Airflow connection
given as ``AIRFLOW_CONN_<ID>``, run on the shared SparkSession's executors. Afterwards every file under the test's directory (state store,
plans, audits, the warehouse, the configs, the broker's own log) and everything the
commands printed, ``pylog status`` included, is searched for the password.
"""

from __future__ import annotations

import json
import logging
import pickle
import subprocess
import sys
import time
from pathlib import Path

import confluent_kafka
import confluent_kafka.admin
import pytest
import yaml

from pylog.client.groups_admin import GroupsAdmin
from pylog.cli.main import main
from pylog.errors import ConfigError
from pylog.etl.config import load_config, parse_config
from pylog.etl.source import executor_spark_conf, resolve_source
from pylog.etl.job import LoadRequest, run_load
from pylog.etl.model import TaskRange
from pylog.etl.task import TaskSpec
from pylog.security.acls import AclOperation as Op, ResourceType
from pylog.testing.secured import SecuredBroker, allow
from pylog.testing.spark import spark_env
from tests.etl.helpers import SCHEMA, duckdb_keys, events

REPO = Path(__file__).resolve().parents[2]
LOADER_PASSWORD = "loader-Pa55-9f3c2e"  # distinctive, so a grep cannot match by chance
ADMIN_PASSWORD = "admin-Pa55-71ab04"
TOPIC = "secured_events"
RECORDS = 60


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    acls = (allow("loader", ResourceType.TOPIC, TOPIC, Op.READ, Op.DESCRIBE)
            + allow("loader", ResourceType.GROUP, "pylog-loader.", Op.READ, prefixed=True))
    with SecuredBroker(tmp_path_factory.mktemp("secured"),
                       {"admin": ADMIN_PASSWORD, "loader": LOADER_PASSWORD}, acls) as broker:
        admin_settings = {"bootstrap.servers": broker.bootstrap, **broker.client_settings("admin")}
        client = confluent_kafka.admin.AdminClient(admin_settings)
        client.create_topics([confluent_kafka.admin.NewTopic(TOPIC, 2, 1)])[TOPIC].result(20)
        producer = confluent_kafka.Producer({**admin_settings, "linger.ms": 5})
        for i, value in enumerate(events(0, RECORDS)):
            producer.produce(TOPIC, value, key=f"k{i}".encode(), partition=i % 2)
        assert producer.flush(30) == 0
        yield broker


def loader_yaml(tmp_path: Path, source: dict) -> Path:
    raw = {"source": {"request_timeout_ms": 10000, **source},
           "warehouse": (tmp_path / "warehouse").as_uri(), "state": (tmp_path / "state").as_uri(),
           "topics": {TOPIC: {"table": TOPIC, "format": "json", "schema": SCHEMA,
                              "event_time": "log_timestamp", "max_bad_records": 0,
                              "max_bad_ratio": 0.0}}}
    path = tmp_path / "loader.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def pylog(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    environment = spark_env()
    environment.update(SPARK_CONF_DIR=str(REPO / "conf"), **env)
    return subprocess.run([sys.executable, "-m", "pylog.cli.main", "--log-level", "INFO", *args],
                          env=environment, capture_output=True, text=True, timeout=300)


def expected_keys() -> set[tuple[str, int, int]]:
    return {(TOPIC, i % 2, i // 2) for i in range(RECORDS)}


def assert_no_secret(root: Path, outputs: list[str]) -> int:
    """No file under ``root`` and no output holds a password; returns the files searched."""
    files = [p for p in root.rglob("*") if p.is_file()]
    for path in files:
        data = path.read_bytes()
        for password in (LOADER_PASSWORD, ADMIN_PASSWORD):
            assert password.encode() not in data, f"{path} holds a password"
    for text in outputs:
        assert LOADER_PASSWORD not in text and ADMIN_PASSWORD not in text
    return len(files)


@pytest.fixture
def executors_env(spark, monkeypatch):
    """Put variables in the environment of the driver (this process) and of the shared
    session's executors, as a deployment does (``spark.executorEnv``): local executors
    otherwise see only the environment the session's JVM started with."""
    environment = spark.sparkContext.environment
    added = []

    def put(name: str, value: str) -> None:
        monkeypatch.setenv(name, value)
        environment[name] = value
        added.append(name)

    yield put
    for name in added:
        environment.pop(name, None)


def test_scheduled_load_and_backfill_with_the_password_from_the_environment(
        broker, tmp_path, spark, executors_env, caplog, capsys):
    config_path = loader_yaml(tmp_path, {
        "bootstrap_servers": broker.bootstrap, **broker.client_settings("loader", with_password=False),
        "sasl.password_env": "PYLOG_SOURCE_PASSWORD"})
    caplog.set_level(logging.INFO)

    # Scheduled, through spark-submit: its driver and executors read the variable themselves.
    scheduled = pylog("load", "--config", str(config_path), "--run-id", "secured-1",
                      "--master", "local[2]", env={"PYLOG_SOURCE_PASSWORD": LOADER_PASSWORD})
    assert scheduled.returncode == 0, scheduled.stderr[-3000:]
    assert sorted(duckdb_keys(tmp_path / "warehouse", TOPIC)) == sorted(expected_keys())
    # The group-offset publish went through the same secured client.
    with GroupsAdmin(broker.bootstrap, security=broker.security("admin")) as admin:
        committed = admin.committed_offsets(f"pylog-loader.{TOPIC}")
    assert {tp.partition: offset for tp, offset in committed.items()} == {0: RECORDS // 2,
                                                                          1: RECORDS // 2}

    # Without the variable nothing starts, and the error names the reference only.
    assert main(["status", "--config", str(config_path)]) == 1
    assert ("source.sasl.password_env: environment variable PYLOG_SOURCE_PASSWORD is not set"
            in capsys.readouterr().err)

    # A backfill (ListOffsets by timestamp) on the shared session's executors.
    executors_env("PYLOG_SOURCE_PASSWORD", LOADER_PASSWORD)
    now_ms = int(time.time() * 1000)
    audits = run_load(load_config(config_path), spark,
                      LoadRequest(since_ms=now_ms - 3_600_000, until_ms=now_ms + 3_600_000))
    assert sum(a.rows_written for a in audits) == RECORDS
    assert sorted(duckdb_keys(tmp_path / "warehouse", TOPIC)) == sorted(expected_keys())

    assert main(["status", "--config", str(config_path)]) == 0
    status = capsys.readouterr()
    assert TOPIC in status.out

    searched = assert_no_secret(tmp_path, [scheduled.stdout, scheduled.stderr, caplog.text,
                                           status.out, status.err])
    assert searched > 10  # plans, markers, audits, offsets, Parquet files ...
    assert_no_secret(broker.process.base_dir, [broker.process.log_text()])


def test_a_load_through_an_airflow_connection_in_the_environment(
        broker, tmp_path, spark, executors_env, caplog, capsys):
    config_path = loader_yaml(tmp_path, {"airflow_conn_id": "pylog_source"})
    connection = {"conn_type": "kafka", "extra": {
        "bootstrap.servers": broker.bootstrap, "group.id": "ignored",
        **broker.client_settings("loader")}}
    executors_env("AIRFLOW_CONN_PYLOG_SOURCE", json.dumps(connection))
    caplog.set_level(logging.INFO)
    audits = run_load(load_config(config_path), spark, LoadRequest(run_id="via-connection"))
    assert sum(a.rows_written for a in audits) == RECORDS
    assert sorted(duckdb_keys(tmp_path / "warehouse", TOPIC)) == sorted(expected_keys())
    assert main(["status", "--config", str(config_path)]) == 0
    status = capsys.readouterr()
    assert_no_secret(tmp_path, [caplog.text, status.out, status.err])


def test_secrets_stay_references_until_a_client_is_made(broker, tmp_path, monkeypatch):
    raw = {"source": {"bootstrap_servers": broker.bootstrap, **broker.client_settings("loader")},
           "warehouse": "file:///w", "state": "file:///s",
           "topics": {TOPIC: {"format": "raw"}}}
    with pytest.raises(ConfigError) as refused:
        parse_config(raw)
    assert str(refused.value).startswith("source.sasl.password: a secret is never written")
    assert LOADER_PASSWORD not in str(refused.value)

    source = dict(raw["source"], **{"sasl.password_file": str(tmp_path / "pw")})
    del source["sasl.password"]
    (tmp_path / "pw").write_text(LOADER_PASSWORD + "\n")
    config = parse_config(dict(raw, source=source))
    spec = TaskSpec("run", "scheduled", 0, TaskRange(TOPIC, 0, 0, 10), config.topics[0],
                    config.source, "file:///w", "file:///s")
    # What Spark pickles to the executors, and what a log line of the config shows.
    assert LOADER_PASSWORD.encode() not in pickle.dumps(spec)
    assert LOADER_PASSWORD not in repr(config)
    resolved = resolve_source(config.source, environ={})
    assert resolved.security.sasl_password == LOADER_PASSWORD
    assert LOADER_PASSWORD not in repr(resolved)

    by_env = parse_config(dict(raw, source={**{k: v for k, v in source.items()
                                               if k != "sasl.password_file"},
                                            "sasl.password_env": "LOADER_PW"}))
    assert executor_spark_conf(by_env.source, "local[2]", None, {"LOADER_PW": "x"}) == {}
    cluster = executor_spark_conf(by_env.source, "spark://m:7077", None, {"LOADER_PW": "x"})
    assert cluster["spark.executorEnv.LOADER_PW"] == "x"
    assert cluster["spark.redaction.regex"].endswith("|LOADER_PW")
