"""CreateTopics partition counts are bounded by max.partitions.per.topic."""

from pylog.protocol import ApiKey
from pylog.testing.broker import broker_fixture
from tests.broker.wire import WireClient, create_body

INVALID_PARTITIONS = 37

limited = broker_fixture(scope="module", overrides={"max.partitions.per.topic": 8})


def test_a_huge_partition_count_is_refused_without_building_it(limited):
    with WireClient(limited.bootstrap) as wire:
        for version in (2, 4, 5):
            for count in (9, 0, -5, 2_000_000_000):
                body = wire.call(ApiKey.CREATE_TOPICS, version, create_body("huge", count))
                result = body["topics"][0]
                assert result["error_code"] == INVALID_PARTITIONS, (version, count)
                assert "max.partitions.per.topic" in result["error_message"]
        body = wire.call(ApiKey.CREATE_TOPICS, 4, dict(create_body("huge", 2_000_000_000),
                                                       validate_only=True))
        assert body["topics"][0]["error_code"] == INVALID_PARTITIONS
        meta = wire.call(ApiKey.METADATA, 4, {"topics": [{"name": "huge"}],
                                              "allow_auto_topic_creation": False})
        assert meta["topics"][0]["error_code"] == 3  # UNKNOWN_TOPIC_OR_PARTITION
        body = wire.call(ApiKey.CREATE_TOPICS, 4, create_body("huge", 8))
        assert body["topics"][0]["error_code"] == 0
        meta = wire.call(ApiKey.METADATA, 1, {"topics": [{"name": "huge"}]})
        assert len(meta["topics"][0]["partitions"]) == 8
    assert limited.alive()
