"""The lines of ``pylog topics describe`` from metadata values, without a broker."""

from pylog.cli.topics import describe_lines, partition_line, topic_line
from pylog.client.metadata import PartitionMetadata, TopicMetadata

HEALTHY = PartitionMetadata(0, 1, (1, 2, 3), (1, 2, 3))
UNDER_REPLICATED = PartitionMetadata(1, 2, (2, 3, 1), (2, 1), offline_replicas=(3,))
LEADERLESS = PartitionMetadata(2, -1, (3, 1, 2), (3,), error_code=5, offline_replicas=(3,))
EVENTS = TopicMetadata("events", 0, {p.partition: p for p in (LEADERLESS, HEALTHY, UNDER_REPLICATED)})
AUDIT = TopicMetadata("audit", 0, {0: PartitionMetadata(0, 3, (3,), (3,))})


def test_partition_lines():
    assert partition_line("events", HEALTHY) == (
        "\tTopic: events\tPartition: 0\tLeader: 1\tReplicas: 1,2,3\tIsr: 1,2,3")
    assert partition_line("events", UNDER_REPLICATED) == (
        "\tTopic: events\tPartition: 1\tLeader: 2\tReplicas: 2,3,1\tIsr: 2,1\tOffline: 3")
    assert partition_line("events", LEADERLESS) == (
        "\tTopic: events\tPartition: 2\tLeader: none\tReplicas: 3,1,2\tIsr: 3\tOffline: 3")


def test_topic_line():
    assert topic_line(EVENTS) == "Topic: events\tPartitionCount: 3\tReplicationFactor: 3"
    assert topic_line(TopicMetadata("empty", 0, {})) == (
        "Topic: empty\tPartitionCount: 0\tReplicationFactor: 0")
    assert topic_line(EVENTS, {"retention.ms": "60000", "cleanup.policy": "delete"}) == (
        "Topic: events\tPartitionCount: 3\tReplicationFactor: 3"
        "\tConfigs: cleanup.policy=delete,retention.ms=60000")
    assert topic_line(EVENTS, {}).endswith("\tConfigs: ")
    identified = TopicMetadata("events", 0, EVENTS.partitions, topic_id="6Zp4X2mXTpqbuYVv7AzG0w")
    assert topic_line(identified) == (
        "Topic: events\tTopicId: 6Zp4X2mXTpqbuYVv7AzG0w\tPartitionCount: 3\tReplicationFactor: 3")


def test_describe_lists_partitions_in_order_under_each_topic():
    assert describe_lines([AUDIT, EVENTS]) == [
        topic_line(AUDIT), partition_line("audit", AUDIT.partitions[0]),
        topic_line(EVENTS), partition_line("events", HEALTHY),
        partition_line("events", UNDER_REPLICATED), partition_line("events", LEADERLESS)]


def test_filters_keep_only_matching_partition_lines():
    topics = [AUDIT, EVENTS]
    # The leaderless partition has fewer in-sync replicas than replicas too.
    assert describe_lines(topics, under_replicated=True) == [
        partition_line("events", UNDER_REPLICATED), partition_line("events", LEADERLESS)]
    assert describe_lines(topics, unavailable=True) == [partition_line("events", LEADERLESS)]
    assert describe_lines(topics, under_replicated=True, unavailable=True) == (
        describe_lines(topics, under_replicated=True))
    assert describe_lines([AUDIT], under_replicated=True, unavailable=True) == []
