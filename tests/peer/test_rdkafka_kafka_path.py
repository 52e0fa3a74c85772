"""librdkafka's own tests that call Kafka's command-line tools, against a pylog broker.

Some of librdkafka's integration tests set up their topics and ACLs with the scripts of a
Kafka distribution (``$KAFKA_PATH/bin/kafka-topics.sh``, ``kafka-acls.sh``) rather than
through the client: 0052 creates a topic with ``message.timestamp.type`` and checks the
timestamps the broker gives, 0077 creates a compacted topic with ``kafka-topics.sh`` and
waits for the cleaner to remove the superseded keys, 0109 denies a topic with
``kafka-acls.sh`` and checks that auto-creation and metadata honour it. 0081, the Admin API
test, runs alongside them as librdkafka's CI runs it. Here the suite (librdkafka 2.15.1's
tests, built once by :mod:`pylog.testing.rdkafka_suite`) runs them against one pylog broker
configured as librdkafka's CI configures Kafka, with ``KAFKA_PATH`` pointing at Kafka 4.4's
real tools (:mod:`pylog.testing.kafka_bin`). Each must pass, and each that uses a tool must
have run it: the test-runner prints every command it executes.
"""

from __future__ import annotations

import pytest

from pylog.testing import rdkafka_suite
from pylog.testing.broker import broker_fixture
from pylog.testing.kafka_bin import write_kafka_bin

broker = broker_fixture(scope="module", overrides=rdkafka_suite.BROKER_SETTINGS)

# test -> the tool it must have executed (None: the test calls none)
TESTS = {
    "0052": "kafka-topics.sh",
    "0077": "kafka-topics.sh",
    "0081": None,
    "0109": "kafka-acls.sh",
}


@pytest.fixture(scope="module")
def suite():
    return rdkafka_suite.build()


@pytest.fixture(scope="module")
def kafka_path(tmp_path_factory):
    return write_kafka_bin(tmp_path_factory.mktemp("kafka"))


@pytest.mark.slow(minutes=8)  # building the suite is 3 of them
@pytest.mark.parametrize("number", sorted(TESTS))
def test_librdkafka_test_with_kafka_tools(suite, broker, kafka_path, number):
    [name] = rdkafka_suite.test_names(suite, int(number), int(number), {number})
    outcome = rdkafka_suite.run_test(suite, name, broker.bootstrap, kafka_path, timeout_s=300)
    assert outcome.result == "PASSED", (
        f"{name}: {outcome.result} {outcome.why}\n" + "\n".join(outcome.output.splitlines()[-40:]))
    tool = TESTS[number]
    if tool is not None:
        assert f"Executing: {kafka_path}/bin/{tool}" in outcome.output, (
            f"{name} passed without running {tool}")
