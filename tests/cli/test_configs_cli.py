"""``pylog configs``: describe, alter and delete topic, broker and group configs on a real
standalone broker, with kafka-configs.sh's output, and mistakes as one line."""

import pytest

from pylog.client import Admin
from pylog.testing.broker import broker_fixture
from tests.cli.helpers import pylog
from tests.cli.test_cli_mistakes import one_error_line

broker = broker_fixture(scope="module")


@pytest.fixture(scope="module")
def topics(broker):
    """The module's topics, created in-process (faster than a pylog command each)."""
    with Admin(broker.bootstrap) as admin:
        for name in ("cli-configs", "cli-mistakes"):
            admin.create_topic(name)


def configs(broker, *args: str) -> str:
    result = pylog("configs", "--bootstrap-server", broker.bootstrap, *args)
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode()


def test_alter_describe_and_delete_topic_configs(broker, topics):
    topic = ("--entity-type", "topics", "--entity-name", "cli-configs")
    assert configs(broker, "--alter", *topic, "--add-config",
                   "retention.ms=3600000,cleanup.policy=[compact,delete]") == (
        "Completed updating config for topic cli-configs.\n")
    assert configs(broker, "--describe", *topic).splitlines() == [
        "Dynamic configs for topic cli-configs are:",
        "  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"
        "cleanup.policy=compact,delete, DEFAULT_CONFIG:log.cleanup.policy=delete}",
        "  retention.ms=3600000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"
        "retention.ms=3600000, DEFAULT_CONFIG:log.retention.hours=168}",
    ]
    configs(broker, "--alter", *topic, "--delete-config", "cleanup.policy")
    assert configs(broker, "--describe", *topic).splitlines()[1:] == [
        "  retention.ms=3600000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"
        "retention.ms=3600000, DEFAULT_CONFIG:log.retention.hours=168}"]
    every = configs(broker, "--describe", "--all", *topic).splitlines()
    assert every[0] == "All configs for topic cli-configs are:"
    assert ("  cleanup.policy=delete sensitive=false synonyms={DEFAULT_CONFIG:"
            "log.cleanup.policy=delete}") in every


def test_describe_all_of_a_broker(broker):
    lines = configs(broker, "--describe", "--all", "--entity-type", "brokers",
                    "--entity-name", "0").splitlines()
    assert lines[0] == "All configs for broker 0 are:"
    assert ("  log.retention.hours=168 sensitive=false synonyms={DEFAULT_CONFIG:"
            "log.retention.hours=168}") in lines


def test_group_configs_survive_a_restart(broker):
    group = ("--entity-type", "groups", "--entity-name", "cli-group")
    assert configs(broker, "--alter", *group, "--add-config",
                   "consumer.session.timeout.ms=50000") == (
        "Completed updating config for group cli-group.\n")
    expected = [
        "Dynamic configs for group cli-group are:",
        "  consumer.session.timeout.ms=50000 sensitive=false synonyms={GROUP_CONFIG:"
        "consumer.session.timeout.ms=50000, DEFAULT_CONFIG:group.consumer.session.timeout.ms=45000}"]
    assert configs(broker, "--describe", *group).splitlines() == expected
    broker.stop()
    broker.start()
    assert configs(broker, "--describe", *group).splitlines() == expected
    configs(broker, "--alter", *group, "--delete-config", "consumer.session.timeout.ms")
    assert configs(broker, "--describe", *group).splitlines() == expected[:1]


@pytest.mark.parametrize("args, needles", [
    (("--alter", "--entity-type", "groups", "--entity-name", "cli-mistakes",
      "--add-config", "consumer.session.timeout.ms=5"),
     ("INVALID_CONFIG", "consumer.session.timeout.ms", "45000 to 60000")),
    (("--alter", "--entity-type", "topics", "--entity-name", "cli-mistakes",
      "--add-config", "retention.ms=soon"), ("INVALID_CONFIG", "retention.ms", "soon")),
    (("--alter", "--entity-type", "topics", "--entity-name", "cli-mistakes",
      "--add-config", "retention.mss=1"), ("INVALID_CONFIG", "retention.mss")),
    (("--alter", "--entity-type", "brokers", "--entity-name", "0",
      "--add-config", "num.partitions=3"), ("INVALID_REQUEST", "num.partitions")),
    (("--alter", "--entity-type", "topics", "--entity-name", "cli-mistakes"), ("--alter",)),
    (("--describe", "--entity-type", "topic", "--entity-name", "t"), ("--entity-type",)),
    (("--alter", "--entity-type", "topics", "--entity-name", "cli-mistakes",
      "--add-config", "retention.ms"), ("--add-config", "KEY=VALUE")),
    (("--describe", "--entity-type", "topics", "--entity-name", "no-such-topic"),
     ("UNKNOWN_TOPIC_OR_PARTITION", "no-such-topic")),
])
def test_mistakes_are_one_line_naming_the_problem(broker, topics, args, needles):
    result = pylog("configs", "--bootstrap-server", broker.bootstrap, *args)
    one_error_line(result, "configs", *needles)
