"""``--command-config FILE`` against a SASL_SSL broker with SCRAM and ACLs: the installed
``pylog`` command, properties files as the kafka-*.sh tools take them (librdkafka names,
and Java's ``sasl.jaas.config`` with a PEM truststore), and the mistakes in such files."""

from __future__ import annotations

import pytest

from pylog.client import Admin
from pylog.security.acls import AclOperation as Op, ResourceType
from pylog.testing.secured import SecuredBroker, allow
from tests.cli.helpers import pylog

ADMIN_PASSWORD = "admin-Cli-5ecret"
READER_PASSWORD = "reader-Cli-5ecret"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    acls = (allow("reader", ResourceType.TOPIC, "visible", Op.DESCRIBE)
            + allow("reader", ResourceType.GROUP, "readers", Op.DESCRIBE))
    with SecuredBroker(tmp_path_factory.mktemp("cli-secured"),
                       {"admin": ADMIN_PASSWORD, "reader": READER_PASSWORD}, acls) as broker:
        with Admin(broker.bootstrap, security=broker.security("admin")) as admin:
            admin.create_topic("hidden", 1, 1, {})
        yield broker


def properties(path, settings: dict[str, str]):
    path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    return str(path)


@pytest.fixture(scope="module")
def admin_config(broker, tmp_path_factory):
    return properties(tmp_path_factory.mktemp("conf") / "admin.properties",
                      broker.client_settings("admin"))


def run(broker, *args: str, config: str) -> str:
    done = pylog(*args, "--bootstrap-server", broker.bootstrap, "--command-config", config)
    assert done.returncode == 0, done.stderr.decode()
    assert ADMIN_PASSWORD.encode() not in done.stdout + done.stderr
    return done.stdout.decode()


def test_topics_and_configs_as_a_super_user(broker, admin_config):
    run(broker, "topics", "create", "--topic", "visible", "--partitions", "2",
        "--config", "retention.ms=3600000", config=admin_config)
    assert run(broker, "topics", "list", config=admin_config).split() == ["hidden", "visible"]
    described = run(broker, "topics", "describe", "--topic", "visible", config=admin_config)
    assert "PartitionCount: 2" in described
    configs = run(broker, "configs", "--describe", "--entity-type", "topics", "--entity-name",
                  "visible", config=admin_config)
    assert "retention.ms=3600000" in configs


def test_a_java_style_file_and_what_its_acls_let_the_user_see(broker, admin_config, tmp_path):
    reader = properties(tmp_path / "reader.properties", {
        "security.protocol": "SASL_SSL", "sasl.mechanism": broker.mechanism,
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                            f'username="reader" password="{READER_PASSWORD}";',
        "ssl.truststore.type": "PEM", "ssl.truststore.location": broker.ca_location,
        "request.timeout.ms": "20000"})  # a Java client setting: not security, ignored
    assert run(broker, "topics", "list", config=reader).split() == ["visible"]
    assert run(broker, "groups", "list", config=reader) == ""  # no group exists yet

    refused = pylog("topics", "describe", "--topic", "hidden", "--bootstrap-server",
                    broker.bootstrap, "--command-config", reader)
    assert refused.returncode == 1
    assert b"hidden" in refused.stderr


def test_without_the_file_or_with_a_wrong_password_nothing_is_answered(broker, tmp_path):
    wrong = properties(tmp_path / "wrong.properties",
                       {**broker.client_settings("reader"), "sasl.password": "not-it"})
    done = pylog("topics", "list", "--bootstrap-server", broker.bootstrap, "--command-config",
                 wrong, "--request-timeout-ms", "5000")
    assert done.returncode == 1
    assert done.stdout == b""
    assert done.stderr.decode() == ("pylog topics: error: Authentication failed: invalid "
                                    "credentials with SASL mechanism SCRAM-SHA-256\n")

    plaintext = pylog("topics", "list", "--bootstrap-server", broker.bootstrap,
                      "--request-timeout-ms", "5000")
    assert plaintext.returncode == 1
    assert plaintext.stdout == b""


def test_a_bad_key_in_the_file_is_one_line_naming_it(broker, tmp_path):
    bad = properties(tmp_path / "bad.properties",
                     {**broker.client_settings("admin"), "sasl.mechansim": "SCRAM-SHA-256"})
    done = pylog("configs", "--describe", "--entity-type", "topics", "--entity-name", "visible",
                 "--bootstrap-server", broker.bootstrap, "--command-config", bad)
    assert done.returncode == 1
    message = done.stderr.decode()
    assert message.count("\n") == 1
    assert message.startswith(f"pylog configs: error: --command-config: {bad}: sasl.mechansim: "
                              "unknown security setting")
    assert ADMIN_PASSWORD not in message

    unreadable = pylog("groups", "list", "--bootstrap-server", broker.bootstrap,
                       "--command-config", str(tmp_path / "missing.properties"))
    assert unreadable.returncode == 1
    assert unreadable.stderr.decode().startswith("pylog groups: error: --command-config: cannot read")
