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
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"


# What `docker-compose up` is run with (README): the users' passwords, never in a file here.
PASSWORDS = {"PYLOG_ADMIN_PASSWORD": "compose-admin-Pa55", "PYLOG_LOADER_PASSWORD": "compose-loader-Pa55"}


def _compose(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    docker_compose = shutil.which("docker-compose")
    assert docker_compose, "docker-compose is not installed (Debian package docker-compose)"
    environment = {k: v for k, v in os.environ.items() if k not in PASSWORDS}
    environment.update(PASSWORDS if env is None else env)
    return subprocess.run([docker_compose, "-f", str(COMPOSE_FILE), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120, env=environment)


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


def test_the_loader_writes_to_hdfs_and_reads_the_three_brokers(resolved):
    from pylog.etl.config import load_config
    from pylog.etl.source import connection_settings

    config = load_config(REPO / "docker" / "conf" / "loader.yaml")
    assert config.warehouse.startswith("hdfs://namenode:8020/")
    assert config.state.startswith("hdfs://namenode:8020/")
    assert config.source.security.airflow_conn_id == "pylog_source"
    # The connection as the Airflow services hold it, read the way the loader reads it.
    environment = resolved["services"]["airflow-scheduler"]["environment"]
    settings = connection_settings("pylog_source", environment)
    assert settings == {"bootstrap.servers": "broker-1:9093,broker-2:9093,broker-3:9093",
                        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
                        "sasl.username": "loader",
                        "sasl.password": PASSWORDS["PYLOG_LOADER_PASSWORD"],
                        "ssl.ca.location": "/etc/pylog/certs/ca.pem"}
    shipped = load_config(REPO / "conf" / "loader.yaml")
    assert [t.topic for t in config.topics] == [t.topic for t in shipped.topics]


def test_clients_get_sasl_ssl_and_plaintext_stays_on_the_internal_network(resolved):
    from pylog.broker.config import BrokerConfig

    assert resolved["networks"]["brokers"].get("internal") is True
    properties = _read_properties(REPO / "docker" / "conf" / "server.properties")
    assert properties["listener.security.protocol.map"] == "INTERNAL:PLAINTEXT,CLIENT:SASL_SSL"
    assert properties["inter.broker.listener.name"] == "INTERNAL"
    assert properties["authorizer.class.name"] == "kafka.security.authorizer.AclAuthorizer"
    assert properties["allow.everyone.if.no.acl.found"] == "false"
    assert "User:admin" in properties["super.users"].split(";")
    for broker_id in (1, 2, 3):
        service = resolved["services"][f"broker-{broker_id}"]
        command = [str(part) for part in service["command"]]
        overrides = [command[i + 1] for i, part in enumerate(command) if part == "--override"]
        config = BrokerConfig.load(REPO / "docker" / "conf" / "server.properties", overrides)
        listeners = dict(item.split("://") for item in config["listeners"].split(","))
        assert listeners == {"INTERNAL": f"broker-{broker_id}.internal:9092",
                             "CLIENT": f"broker-{broker_id}:9093"}
        # The INTERNAL name exists only on the internal network.
        assert service["networks"]["brokers"]["aliases"] == [f"broker-{broker_id}.internal"]
        assert "ports" not in service
        assert any(isinstance(v, dict) and v["target"] == "/etc/pylog/certs" for v in service["volumes"])
        dependencies = service["depends_on"]
        assert dependencies["users-init"]["condition"] == "service_completed_successfully"
        assert dependencies["certs-init"]["condition"] == "service_completed_successfully"


def test_certificates_and_users_are_made_before_the_brokers_start(resolved):
    services = resolved["services"]
    shell, flag, certs = services["certs-init"]["command"]
    assert certs.startswith("test -f /etc/pylog/certs/broker.pem ||")  # first start only
    users = " ".join(services["users-init"]["command"])
    assert ("pylog users add --user admin --password-env PYLOG_ADMIN_PASSWORD "
            "--mechanism SCRAM-SHA-256 --zookeeper zookeeper:2181") in users
    assert services["users-init"]["depends_on"]["zookeeper"]["condition"] == "service_healthy"
    assert services["users-init"]["environment"]["PYLOG_ADMIN_PASSWORD"] == PASSWORDS["PYLOG_ADMIN_PASSWORD"]
    acls = " ".join(services["acls-init"]["command"])
    assert "--allow-principal User:loader --operation Read --operation Describe --topic '*'" in acls
    assert "--group pylog-loader. --resource-pattern-type prefixed" in acls
    for name in ("spark-worker", "airflow-scheduler"):  # executors and the driver trust the CA
        assert any(isinstance(v, dict) and v["target"] == "/etc/pylog/certs"
                   for v in services[name]["volumes"])


def test_the_certificate_command_writes_what_the_brokers_read(resolved, tmp_path):
    shell, flag, command = resolved["services"]["certs-init"]["command"]
    command = command.replace("/etc/pylog/certs", str(tmp_path)).replace("python ", f"{sys.executable} ")
    written = []
    for _ in range(2):  # the second start keeps the first certificates
        done = subprocess.run([shell, flag, command], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        written.append((tmp_path / "ca.pem").read_bytes())
    assert written[0] == written[1]
    properties = _read_properties(REPO / "docker" / "conf" / "server.properties")
    for key in ("ssl.keystore.location", "ssl.truststore.location"):
        assert (tmp_path / Path(properties[key]).name).is_file()


def test_no_password_is_written_in_the_repository_and_none_given_is_refused():
    for path in (COMPOSE_FILE, *sorted((REPO / "docker").rglob("*"))):
        if path.is_file():
            text = path.read_text(errors="replace")
            for password in PASSWORDS.values():
                assert password not in text
    missing = _compose("config", "-q", env={})
    assert missing.returncode != 0
    assert "set PYLOG_ADMIN_PASSWORD" in missing.stderr or "set PYLOG_LOADER_PASSWORD" in missing.stderr
