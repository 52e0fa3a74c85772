"""kafka-python with default settings: producer, assign + seek, offsets_for_times."""

import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic


def read_to_end(consumer, partitions):
    """Records up to the end offsets of ``partitions`` (at most 5 s without one): no waiting
    out consumer_timeout_ms once everything is read."""
    ends = consumer.end_offsets(partitions)
    records = []
    for record in consumer:
        records.append(record)
        if all(consumer.position(tp) >= ends[tp] for tp in partitions):
            break
    return records


def test_produce_and_consume_with_defaults(broker):
    topic = "kp-defaults"
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
    admin.close()
    base = 1_760_000_000_000
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    futures = [producer.send(topic, key=b"k%d" % i, value=b"value %d" % i, partition=i % 2,
                             headers=[("i", b"%d" % i)], timestamp_ms=base + i * 10)
               for i in range(300)]
    producer.flush()
    assert all(f.get(timeout=10).offset == i // 2 for i, f in enumerate(futures))
    producer.close()

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, consumer_timeout_ms=5000)
    partitions = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    consumer.assign(partitions)
    consumer.seek_to_beginning()
    records = read_to_end(consumer, partitions)
    for p in (0, 1):
        mine = [r for r in records if r.partition == p]
        assert [r.key for r in mine] == [b"k%d" % i for i in range(p, 300, 2)]
        assert [r.value for r in mine] == [b"value %d" % i for i in range(p, 300, 2)]
        assert [r.headers for r in mine] == [[("i", b"%d" % i)] for i in range(p, 300, 2)]
        assert [r.timestamp for r in mine] == [base + i * 10 for i in range(p, 300, 2)]

    assert consumer.beginning_offsets(partitions) == {partitions[0]: 0, partitions[1]: 0}
    assert consumer.end_offsets(partitions) == {partitions[0]: 150, partitions[1]: 150}
    found = consumer.offsets_for_times({partitions[0]: base + 1005, partitions[1]: base + 10**9})
    assert found[partitions[0]].offset == 51 and found[partitions[0]].timestamp == base + 1020
    assert found[partitions[1]] is None

    consumer.seek(partitions[1], 140)
    consumer.pause(partitions[0])
    tail = read_to_end(consumer, [partitions[1]])
    assert [r.offset for r in tail] == list(range(140, 150))
    assert consumer.poll(timeout_ms=500) == {}  # nothing from the paused partition
    consumer.close()


def test_describe_log_dirs_gives_each_partitions_size(broker):
    """DescribeLogDirs, as kafka-log-dirs.sh and kafka-python's describe_log_dirs ask."""
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic("sized", 2, 1)])
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    for i in range(20):
        producer.send("sized", b"x" * 100, partition=i % 2)
    producer.flush()
    [answer] = admin.describe_log_dirs({"sized": [0, 1]})
    [log_dir] = answer["log_dirs"]
    assert (answer["broker"], log_dir["error_code"]) == (0, 0)
    assert log_dir["log_dir"] == str(broker.log_dir.absolute())
    assert 0 < log_dir["usable_bytes"] <= log_dir["total_bytes"]
    [topic] = log_dir["topics"]
    sizes = {p["partition_index"]: p["partition_size"] for p in topic["partitions"]}
    on_disk = {p: sum(f.stat().st_size for f in (broker.log_dir / f"sized-{p}").glob("*.log"))
               for p in (0, 1)}
    assert sizes == on_disk and all(sizes.values())
    assert [p["offset_lag"] for p in topic["partitions"]] == [0, 0]
    [only] = admin.describe_log_dirs({"sized": [1]})[0]["log_dirs"][0]["topics"]
    assert [p["partition_index"] for p in only["partitions"]] == [1]
    admin.close()


def test_describe_producers_shows_an_open_transaction(broker):
    """DescribeProducers (KIP-664), as kafka-python's describe_producers asks: the producer
    of an open transaction, with where it started, until it commits."""
    from confluent_kafka import Producer as CkProducer

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic("described-producers", 1, 1)])
    idempotent = CkProducer({"bootstrap.servers": broker.bootstrap,
                             "enable.idempotence": True, "linger.ms": 0})
    for i in range(3):
        idempotent.produce("described-producers", b"plain %d" % i, partition=0)
        idempotent.flush(15)
    transactional = CkProducer({"bootstrap.servers": broker.bootstrap,
                                "transactional.id": "described", "linger.ms": 0})
    transactional.init_transactions(15)
    transactional.begin_transaction()
    transactional.produce("described-producers", b"in a transaction", partition=0)
    transactional.flush(15)
    partition = TopicPartition("described-producers", 0)

    def producers() -> dict[int, tuple[int, int, int]]:
        state = admin.describe_producers([partition])[partition]
        return {p.producer_id: (p.producer_epoch, p.last_sequence,
                                p.current_transaction_start_offset)
                for p in state.active_producers}

    described = producers()
    assert len(described) == 2
    assert sorted(described.values()) == [(0, 0, 3), (0, 2, -1)]
    transactional.commit_transaction(15)
    # The coordinator writes the commit marker after it answers: until then it is open.
    deadline = time.monotonic() + 15
    while sorted(v[2] for v in producers().values()) != [-1, -1]:
        assert time.monotonic() < deadline, producers()
        time.sleep(0.05)
    admin.close()


def test_partition_reassignments_on_a_standalone_broker(broker):
    """A standalone broker answers as a one-broker cluster: its own id is a valid target
    (nothing to move), another broker is not registered, nothing is moving to cancel."""
    from kafka.errors import (InvalidReplicationAssignmentError, NoReassignmentInProgressError,
                              UnknownTopicOrPartitionError)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic("kp-reassigned", num_partitions=1, replication_factor=1)])
        [described] = admin.describe_topics(["kp-reassigned"])
        [own] = described["partitions"][0]["replica_nodes"]
        here, missing = TopicPartition("kp-reassigned", 0), TopicPartition("kp-reassigned", 5)
        assert admin.alter_partition_reassignments({here: [own]}) == {here: None}
        assert admin.alter_partition_reassignments({here: [own + 1]}) == {
            here: InvalidReplicationAssignmentError}
        assert admin.alter_partition_reassignments({here: [own, own]}) == {
            here: InvalidReplicationAssignmentError}
        assert admin.alter_partition_reassignments({here: None, missing: [own]}) == {
            here: NoReassignmentInProgressError, missing: UnknownTopicOrPartitionError}
        assert admin.list_partition_reassignments() == {}
    finally:
        admin.close()


def test_describe_cluster(broker):
    """kafka-python reads DescribeCluster v1+ (it expects the endpoint type v1 added)."""
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        cluster = admin.describe_cluster()
    finally:
        admin.close()
    [only] = cluster["brokers"]
    assert (only["host"], only["port"]) == (broker.host, broker.port)
    assert cluster["controller_id"] == only["broker_id"] and cluster["cluster_id"]
    assert only["is_fenced"] is False


def test_describe_topic_partitions_pages_through_every_partition(broker):
    """DescribeTopicPartitions (KIP-966) as kafka-python sends it: topics by name, at most
    ``response_partition_limit`` partitions an answer, the next page from ``next_cursor``."""
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic("kp-paged-a", num_partitions=5, replication_factor=1),
                             NewTopic("kp-paged-b", num_partitions=3, replication_factor=1)])
        wanted = ["kp-paged-b", "kp-missing", "kp-paged-a"]
        pages, cursor = [], None
        while True:
            answer = admin.describe_topic_partitions(wanted, response_partition_limit=3,
                                                     cursor=cursor)
            pages.append([(t["name"], t["error_code"],
                           [p["partition_index"] for p in t["partitions"]])
                          for t in answer["topics"]])
            cursor = answer["next_cursor"]
            if cursor is None:
                break
        assert pages == [[("kp-missing", 3, []), ("kp-paged-a", 0, [0, 1, 2])],
                         [("kp-paged-a", 0, [3, 4]), ("kp-paged-b", 0, [0])],
                         [("kp-paged-b", 0, [1, 2])]]
        [first] = admin.describe_topic_partitions(["kp-paged-b"])["topics"]
        [described] = admin.describe_topics(["kp-paged-b"])
        assert str(first["topic_id"]) == str(described["topic_id"])  # the id Metadata gives
        assert [p["leader_id"] for p in first["partitions"]] == [
            p["leader_id"] for p in described["partitions"]]
        everything = admin.describe_topic_partitions([])["topics"]
        assert {"kp-paged-a", "kp-paged-b"} <= {t["name"] for t in everything}
        assert [t["name"] for t in everything] == sorted(t["name"] for t in everything)
    finally:
        admin.close()


def test_the_broker_caps_partitions_per_describe_topic_partitions_answer(tmp_path):
    from pylog.testing.broker import BrokerProcess
    with BrokerProcess(tmp_path, {"max.request.partition.size.limit": 2}) as capped:
        admin = KafkaAdminClient(bootstrap_servers=capped.bootstrap)
        try:
            admin.create_topics([NewTopic("kp-capped", num_partitions=3, replication_factor=1)])
            answer = admin.describe_topic_partitions(["kp-capped"], response_partition_limit=100)
        finally:
            admin.close()
    assert [p["partition_index"] for p in answer["topics"][0]["partitions"]] == [0, 1]
    assert answer["next_cursor"] == {"topic_name": "kp-capped", "partition_index": 2}
