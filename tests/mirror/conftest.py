"""Two pylog clusters for the mirror tests (one source broker, one target broker), shared
by the package's modules, and the mirror's settings for tests (short sessions and intervals)."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from pylog.testing.broker import BrokerProcess

ALIAS = "dc1"
GROUP = f"pylog-mirror.{ALIAS}"
BROKER_SETTINGS = {"num.partitions": 1, "group.min.session.timeout.ms": 1000,
                   "group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 3,
                   "transaction.state.log.num.partitions": 3}
# Short sessions: a killed mirror's place in the source group frees within seconds.
MIRROR_YAML = """
source:
  client:
    session.timeout.ms: 3000
    heartbeat.interval.ms: 300
transaction_interval_ms: 200
transaction_timeout_ms: 10000
checkpoint_interval_ms: 500
progress_interval_ms: 1000
topic_refresh_interval_ms: 2000
"""


@pytest.fixture(scope="package")
def source(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("source"), BROKER_SETTINGS) as broker:
        yield broker


@pytest.fixture(scope="package")
def target(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("target"), BROKER_SETTINGS) as broker:
        yield broker


def create_topic(bootstrap: str, topic: str, partitions: int, configs: dict | None = None,
                 security: dict | None = None) -> None:
    admin = AdminClient({**(security or {}), "bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=configs or {})])[topic].result(30)


def mirror_args(tmp_path, source_bootstrap: str, target_bootstrap: str, topics: str) -> list[str]:
    config = tmp_path / "mirror.yaml"
    config.write_text(MIRROR_YAML)
    return ["--source-bootstrap-server", source_bootstrap, "--target-bootstrap-server",
            target_bootstrap, "--topics", topics, "--source-alias", ALIAS, "--config", str(config)]


