"""auto.create.topics.enable=false: unknown topics stay unknown until CreateTopics."""

import subprocess

from pylog.protocol import ApiKey
from pylog.testing.broker import broker_fixture
from tests.broker.wire import WireClient, batch, create_body, produce_body

UNKNOWN_TOPIC = 3

no_auto_create = broker_fixture(scope="module", overrides={
    "auto.create.topics.enable": "false", "num.partitions": 3})


def test_metadata_does_not_create_topics(no_auto_create):
    with WireClient(no_auto_create.bootstrap) as wire:
        for version in (1, 4, 9, 12):
            body = {"topics": [{"name": "never-made"}], "allow_auto_topic_creation": True}
            meta = wire.call(ApiKey.METADATA, version, body)
            assert meta["topics"][0]["error_code"] == UNKNOWN_TOPIC
        produced = wire.call(ApiKey.PRODUCE, 8, produce_body("never-made", {0: batch([b"x"])}))
        assert produced["responses"][0]["partition_responses"][0]["error_code"] == UNKNOWN_TOPIC
        assert wire.call(ApiKey.METADATA, 1, {"topics": None})["topics"] == []


def test_create_topics_with_default_partitions(no_auto_create):
    with WireClient(no_auto_create.bootstrap) as wire:
        created = wire.call(ApiKey.CREATE_TOPICS, 5, create_body("made", -1))
        assert created["topics"][0]["error_code"] == 0
        assert created["topics"][0]["num_partitions"] == 3
    listing = subprocess.run(["kcat", "-b", no_auto_create.bootstrap, "-L", "-t", "made"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    assert 'topic "made" with 3 partitions' in listing
