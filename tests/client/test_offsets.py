"""SimpleConsumer.list_offsets and offset_bounds: one request per leader and kind of
offset, for partitions of many topics, against two real brokers behind counting proxies."""

from __future__ import annotations

import uuid

import pytest

from pylog.client import SimpleConsumer
from pylog.client.offsets import EARLIEST, LATEST, OffsetBounds
from pylog.errors import UnknownTopicOrPartitionError
from pylog.protocol import ApiKey
from pylog.testing.zookeeper import zookeeper_fixture
from pylog.types import TopicPartition
from pylog.testing.counting_proxy import ProxiedCluster
from tests.etl.helpers import produce

zookeeper = zookeeper_fixture()

TOPICS = ["oa", "ob", "oc"]
PARTITIONS = 4
T0 = 1_763_625_600_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    local = ProxiedCluster(tmp_path_factory.mktemp("brokers"),
                           f"{zookeeper.connect_string}/offsets-{uuid.uuid4().hex[:8]}",
                           broker_ids=(1, 2)).start()
    try:
        local.create_topics(TOPICS, PARTITIONS)
        for i, topic in enumerate(TOPICS):
            count = 8 * (i + 1)  # record n to partition n % 4 at T0 + n seconds
            produce(local.bootstrap, topic, [b"x"] * count, PARTITIONS, [T0 + n * 1000 for n in range(count)])
        yield local
    finally:
        local.close()


def test_offsets_of_many_topics_in_one_request_per_leader(cluster):
    everything = [TopicPartition(t, p) for t in TOPICS for p in range(PARTITIONS)]
    with SimpleConsumer(cluster.bootstrap, client_id="lister") as consumer:
        cluster.reset_counts()
        bounds = consumer.offset_bounds(everything)
        assert sum(cluster.requests(ApiKey.METADATA, "lister").values()) == 1
        assert cluster.requests(ApiKey.LIST_OFFSETS, "lister") == {1: 2, 2: 2}
        assert bounds == {tp: OffsetBounds(0, 2 * (TOPICS.index(tp.topic) + 1)) for tp in everything}

        cluster.reset_counts()
        found = consumer.list_offsets({TopicPartition("oc", 1): T0 + 9000, TopicPartition("oa", 3): LATEST,
                                       TopicPartition("ob", 0): EARLIEST, TopicPartition("ob", 2): T0 + 99_000})
        assert found == {TopicPartition("oc", 1): 2, TopicPartition("oa", 3): 2,
                         TopicPartition("ob", 0): 0, TopicPartition("ob", 2): -1}
        assert sum(cluster.requests(ApiKey.LIST_OFFSETS, "lister").values()) <= 2  # one per leader asked
        assert consumer.offsets_for_times("oc", {1: T0 + 9000, 2: T0 + 99_000}) == {1: 2, 2: None}
        assert consumer.earliest_offset("oa", 0) == 0 and consumer.latest_offset("ob", 1) == 4


def test_an_unknown_topic_fails_after_the_retries(cluster):
    with SimpleConsumer(cluster.bootstrap, client_id="unknown", retries=2, retry_backoff_ms=10) as consumer:
        with pytest.raises(UnknownTopicOrPartitionError):
            consumer.offset_bounds([TopicPartition("oa", 0), TopicPartition("nosuch", 0)])
        with pytest.raises(UnknownTopicOrPartitionError):
            consumer.list_offsets({TopicPartition("oa", PARTITIONS): EARLIEST})  # no such partition
