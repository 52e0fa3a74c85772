"""confluent-kafka (librdkafka) producers with acks 0/1/all and consumers with assign()."""

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def produce(bootstrap, topic, messages, **config):
    producer = Producer({"bootstrap.servers": bootstrap, **config})
    errors = []

    def delivered(err, _msg):
        if err is not None:
            errors.append(err)

    for partition, key, value, headers, timestamp in messages:
        producer.produce(topic, value=value, key=key, partition=partition, headers=headers,
                         timestamp=timestamp, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert errors == []


def consume(bootstrap, topic, start: dict[int, int], expected: int):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "assign-only",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, o) for p, o in start.items()])
    messages, eof = [], set()
    while len(eof) < len(start) or len(messages) < expected:
        message = consumer.poll(10)
        assert message is not None, f"stalled after {len(messages)} messages"
        if message.error():
            assert message.error().code() == -191, message.error()  # partition EOF
            eof.add(message.partition())
            continue
        messages.append(message)
    consumer.close()
    return messages


def create_topic(bootstrap, topic, partitions):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions)])
    futures[topic].result(30)


def sample(partitions, count, size=100):
    base = 1_750_000_000_000
    return [(i % partitions, b"k%d" % i, b"%d-" % i + b"v" * size,
             [("n", b"%d" % i), ("src", b"ck")], base + i) for i in range(count)]


def check(messages, sent, partitions):
    assert len(messages) == len(sent)
    for p in range(partitions):
        got = [(m.key(), m.value(), m.headers(), m.timestamp()[1]) for m in messages
               if m.partition() == p]
        want = [(k, v, h, t) for (q, k, v, h, t) in sent if q == p]
        assert got == want
        offsets = [m.offset() for m in messages if m.partition() == p]
        assert offsets == list(range(len(offsets)))


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_acks_levels(broker, acks):
    topic = f"ck-acks-{acks}"
    create_topic(broker.bootstrap, topic, 4)
    sent = sample(4, 2000)
    produce(broker.bootstrap, topic, sent, acks=acks, **{"linger.ms": 5})
    check(consume(broker.bootstrap, topic, {p: 0 for p in range(4)}, len(sent)), sent, 4)


def test_large_batches_and_compression(broker):
    topic = "ck-large"
    sent = sample(1, 20000, size=1000)
    produce(broker.bootstrap, topic, sent, acks="all", **{
        "linger.ms": 50, "batch.size": 900000, "compression.type": "lz4"})
    check(consume(broker.bootstrap, topic, {0: 0}, len(sent)), sent, 1)


def test_idempotent_producer(broker):
    topic = "ck-idempotent"
    sent = sample(1, 500)
    produce(broker.bootstrap, topic, sent, **{"enable.idempotence": True})
    check(consume(broker.bootstrap, topic, {0: 0}, len(sent)), sent, 1)


def test_assign_from_explicit_offsets(broker):
    topic = "ck-offsets"
    create_topic(broker.bootstrap, topic, 2)
    sent = sample(2, 400)
    produce(broker.bootstrap, topic, sent, acks="1")
    messages = consume(broker.bootstrap, topic, {0: 150, 1: 10}, 50 + 190)
    by_partition = {p: [m.offset() for m in messages if m.partition() == p] for p in (0, 1)}
    assert by_partition[0] == list(range(150, 200))
    assert by_partition[1] == list(range(10, 200))
    assert [m.value() for m in messages if m.partition() == 0] == \
        [v for (p, _, v, _, _) in sent if p == 0][150:]


def test_a_replica_assignment_on_one_broker(broker):
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewPartitions

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("assigned", 2, -1, replica_assignment=[[0], [0]])])[
        "assigned"].result(30)
    admin.create_partitions([NewPartitions("assigned", 3, replica_assignment=[[0]])])[
        "assigned"].result(30)
    topic = admin.list_topics("assigned", timeout=10).topics["assigned"]
    assert {p: list(m.replicas) for p, m in topic.partitions.items()} == {0: [0], 1: [0], 2: [0]}
    for bad in (NewTopic("elsewhere", 1, -1, replica_assignment=[[4]]),
                NewTopic("doubled", 1, -1, replica_assignment=[[0, 0]])):
        with pytest.raises(KafkaException) as error:
            admin.create_topics([bad])[bad.topic].result(30)
        assert error.value.args[0].code() == KafkaError.INVALID_REPLICA_ASSIGNMENT


def test_fetch_max_bytes_bounds_the_whole_response(broker):
    # librdkafka's fetch.max.bytes test, scaled to this broker's message.max.bytes: three
    # partitions of batches near the response limit, a partition limit far above it. Only
    # the first partition with records may exceed max_bytes (one batch, for progress);
    # the others fit in what is left, so the response stays within the client's
    # receive.message.max.bytes, which librdkafka enforces by closing the connection.
    create_topic(broker.bootstrap, "fetch-bounded", 3)
    produce(broker.bootstrap, "fetch-bounded",
            [(p, None, b"%d-%d-" % (p, i) + b"x" * 150_000, None, 0)
             for p in range(3) for i in range(4)], **{"linger.ms": 0, "batch.num.messages": 1})
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "fetch-bounded",
                         "auto.offset.reset": "earliest",
                         "max.partition.fetch.bytes": 20_000_000,
                         "fetch.max.bytes": 200_000, "message.max.bytes": 200_000,
                         "receive.message.max.bytes": 200_512})
    consumer.subscribe(["fetch-bounded"])
    got = []
    for _ in range(120):
        message = consumer.poll(0.5)
        if message is None:
            if len(got) == 12:
                break
            continue
        assert message.error() is None, message.error()
        got.append(message.value()[:4])
    consumer.close()
    assert sorted(got) == sorted(b"%d-%d-" % (p, i) for p in range(3) for i in range(4))


def test_describe_cluster_topics_and_groups_without_an_authorizer(broker):
    """DescribeCluster (KIP-700) and authorized operations (KIP-430): with no authorizer
    every operation is allowed, as in Kafka."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation

    create_topic(broker.bootstrap, "described", 2)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    cluster = admin.describe_cluster(include_authorized_operations=True).result(15)
    assert [(n.id, n.port) for n in cluster.nodes] == [(0, broker.port)]
    assert cluster.controller.id == 0 and cluster.cluster_id
    assert set(cluster.authorized_operations) == {
        AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
        AclOperation.DESCRIBE}
    assert admin.describe_cluster().result(15).authorized_operations is None
    topic = admin.describe_topics(TopicCollection(["described"]),
                                  include_authorized_operations=True)["described"].result(15)
    assert len(topic.partitions) == 2 and len(topic.authorized_operations) == 8
    assert str(topic.topic_id) not in ("", "AAAAAAAAAAAAAAAAAAAAAA")  # a real id (KIP-516)
    assert str(admin.describe_topics(TopicCollection(["described"]))["described"].result(
        15).topic_id) == str(topic.topic_id)
    group = admin.describe_consumer_groups(["nobody"], include_authorized_operations=True)[
        "nobody"].result(15)
    assert set(group.authorized_operations) == {
        AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE}


def test_list_offsets_max_timestamp_is_the_first_record_with_the_newest_time(broker):
    """OffsetSpec.max_timestamp (KIP-734): the record inside its batch, not the batch."""
    from confluent_kafka import IsolationLevel
    from confluent_kafka.admin import OffsetSpec

    create_topic(broker.bootstrap, "newest", 1)
    base = 10_000_000
    # One batch of three (the newest in the middle), then a later batch tying it.
    produce(broker.bootstrap, "newest", [(0, None, b"v", None, base + t)
                                         for t in (100, 400, 250)], **{"linger.ms": 200})
    produce(broker.bootstrap, "newest", [(0, None, b"v", None, base + 400)])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    partition = TopicPartition("newest", 0)
    answers = {}
    for name, spec in (("max", OffsetSpec.max_timestamp()), ("latest", OffsetSpec.latest()),
                       ("after 300", OffsetSpec.for_timestamp(base + 300))):
        for level in (IsolationLevel.READ_UNCOMMITTED, IsolationLevel.READ_COMMITTED):
            info = admin.list_offsets({partition: spec}, isolation_level=level)[
                partition].result(15)
            answers.setdefault(name, set()).add((info.offset, info.timestamp))
    assert answers == {"max": {(1, base + 400)}, "latest": {(4, -1)},
                       "after 300": {(1, base + 400)}}

    # Records deleted up to offset 2, the newest record among them: the newest of what is
    # left (the later batch), not the new log start (GetOffsetShell --time -3 found that).
    admin.delete_records([TopicPartition("newest", 0, 2)])[TopicPartition("newest", 0, 2)].result(15)
    info = admin.list_offsets({partition: OffsetSpec.max_timestamp()})[partition].result(15)
    assert (info.offset, info.timestamp) == (3, base + 400)


def test_elect_leaders_on_one_broker_is_never_needed(broker):
    from confluent_kafka import ElectionType, KafkaError

    create_topic(broker.bootstrap, "elected", 1)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    ours, missing = TopicPartition("elected", 0), TopicPartition("elected", 3)
    for kind in (ElectionType.PREFERRED, ElectionType.UNCLEAN):
        results = admin.elect_leaders(kind, [ours, missing]).result(15)
        assert {tp: error.code() for tp, error in results.items()} == {
            ours: KafkaError.ELECTION_NOT_NEEDED, missing: KafkaError.UNKNOWN_TOPIC_OR_PART}
