"""docker-compose.yml is valid and points at this repository's real files.

There is no Docker engine where the tests run, so the deployment is checked statically:
Compose itself validates the file (`docker-compose config -q`), and every path it takes
from the checkout -- build contexts, Dockerfiles, env files, bind-mounted files and
directories, and the files the Dockerfile copies -- must exist.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"


def _compose(*args: str) -> subprocess.CompletedProcess:
    docker_compose = shutil.which("docker-compose")
    assert docker_compose, "docker-compose is not installed (Debian package docker-compose)"
    return subprocess.run([docker_compose, "-f", str(COMPOSE_FILE), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def resolved() -> dict:
    """The file as Compose resolves it: anchors merged, relative paths made absolute."""
    result = _compose("config")
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


def test_compose_config_is_valid():
    result = _compose("config", "-q")
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""


def test_every_service_of_the_deployment_is_there(resolved):
    services = resolved["services"]
    expected = {"zookeeper", "broker-1", "broker-2", "broker-3", "namenode", "datanode",
                "spark-master", "spark-worker", "postgres", "airflow-apiserver",
                "airflow-scheduler", "airflow-dag-processor"}
    assert expected <= services.keys()
    commands = {name: " ".join(map(str, s.get("command") or [])) for name, s in services.items()}
    assert "airflow api-server" in commands["airflow-apiserver"]
    assert "airflow scheduler" in commands["airflow-scheduler"]
    assert "airflow dag-processor" in commands["airflow-dag-processor"]
    assert "deploy.master.Master" in commands["spark-master"]
    assert "spark://spark-master:7077" in commands["spark-worker"]
    for broker_id in (1, 2, 3):
        assert f"broker.id={broker_id}" in commands[f"broker-{broker_id}"]


def test_brokers_run_in_cluster_mode(resolved):
    properties = _read_properties(REPO / "docker" / "conf" / "server.properties")
    assert properties["zookeeper.connect"] == "zookeeper:2181"
    for broker_id in (1, 2, 3):
        mounts = _bind_mounts(resolved["services"][f"broker-{broker_id}"])
        assert REPO / "docker" / "conf" / "server.properties" in mounts


def test_airflow_gets_the_dags_the_spark_connection_and_the_loader_config(resolved):
    for name in ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor"):
        service = resolved["services"][name]
        mounts = _bind_mounts(service)
        assert mounts.get(REPO / "dags") == service["environment"]["AIRFLOW__CORE__DAGS_FOLDER"]
        assert REPO / "docker" / "conf" in mounts
        spark = yaml.safe_load(service["environment"]["AIRFLOW_CONN_SPARK_DEFAULT"])
        assert spark["conn_type"] == "spark"
        assert f"{spark['host']}:{spark['port']}" == "spark://spark-master:7077"


def test_every_repository_path_it_references_exists(resolved):
    referenced: list[Path] = []
    for name, service in resolved["services"].items():
        build = service.get("build")
        if build:
            context = Path(build["context"])
            referenced += [context, context / build.get("dockerfile", "Dockerfile")]
        env_files = service.get("env_file") or []
        referenced += [Path(p) for p in ([env_files] if isinstance(env_files, str) else env_files)]
        referenced += list(_bind_mounts(service))
    assert referenced, "no repository paths found in docker-compose.yml"
    for path in referenced:
        assert path.is_relative_to(REPO), f"{path} is outside the repository"
        assert path.exists(), f"docker-compose.yml references {path.relative_to(REPO)}, which does not exist"


def test_every_file_the_dockerfile_copies_exists():
    dockerfile = REPO / "docker" / "Dockerfile"
    copies = [shlex.split(line)[1:] for line in dockerfile.read_text().splitlines()
              if line.startswith("COPY ") and "--from=" not in line]
    assert copies
    for *sources, _target in copies:
        for source in sources:
            assert (REPO / source).exists(), f"docker/Dockerfile copies {source}, which does not exist"
    entrypoint = REPO / "docker" / "entrypoint.sh"
    assert os.access(entrypoint, os.X_OK)
    assert "entrypoint.sh" in dockerfile.read_text()


def _bind_mounts(service: dict) -> dict[Path, str]:
    """Host path -> container path for the service's bind mounts (named volumes skipped)."""
    mounts = {}
    for volume in service.get("volumes") or []:
        if isinstance(volume, str):
            source, target = volume.split(":")[:2]
            kind = "bind" if source.startswith("/") else "volume"
        else:
            source, target, kind = volume.get("source", ""), volume["target"], volume.get("type")
        if kind == "bind":
            mounts[Path(source)] = target
    return mounts


def _read_properties(path: Path) -> dict[str, str]:
    properties = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            properties[key.strip()] = value.strip()
    return properties


def test_the_brokers_configuration_is_valid_for_each_broker(resolved):
    from pylog.broker.config import BrokerConfig

    for broker_id in (1, 2, 3):
        command = [str(part) for part in resolved["services"][f"broker-{broker_id}"]["command"]]
        assert command[:2] == ["pylog", "broker"]
        overrides = [command[i + 1] for i, part in enumerate(command) if part == "--override"]
        config = BrokerConfig.load(REPO / "docker" / "conf" / "server.properties", overrides)
        assert config["broker.id"] == broker_id
        assert config["zookeeper.connect"] == "zookeeper:2181"


def test_the_loader_writes_to_hdfs_and_reads_the_three_brokers():
    from pylog.etl.config import load_config

    config = load_config(REPO / "docker" / "conf" / "loader.yaml")
    assert config.warehouse.startswith("hdfs://namenode:8020/")
    assert config.state.startswith("hdfs://namenode:8020/")
    assert config.source.bootstrap_servers == ("broker-1:9092", "broker-2:9092", "broker-3:9092")
    shipped = load_config(REPO / "conf" / "loader.yaml")
    assert [t.topic for t in config.topics] == [t.topic for t in shipped.topics]
