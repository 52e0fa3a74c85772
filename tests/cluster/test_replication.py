"""Replication across real broker processes: acks=all through a leader's SIGKILL, truncation
of a former leader's tail, ISR shrink and expansion, unclean election, controlled shutdown.

One ZooKeeper per module, a fresh chroot and three fresh brokers per test. Sessions are
short (3 s) and ``replica.lag.time.max.ms`` small so that failover and ISR changes show
within seconds.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from confluent_kafka import ElectionType, KafkaError, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pylog.client.admin import Admin
from pylog.client.connection import BrokerConnection
from pylog.errors import NotLeaderOrFollowerError, OffsetNotAvailableError
from pylog.protocol import ApiKey
from pylog.records import iter_batch_headers
from pylog.records.compression import Compression
from tests.cluster.clients import kafka_python_consume
from tests.cluster.cluster_helpers import LocalCluster
from tests.cluster.conftest import wait_until

pytestmark = pytest.mark.slow(minutes=2)

TOPIC = "replicated"


def make_cluster(tmp_path, zk_connect, **extra) -> LocalCluster:
    settings = {"replica.lag.time.max.ms": 2000, "replica.fetch.wait.max.ms": 200,
                "default.replication.factor": 3, "min.insync.replicas": 2,
                "auto.leader.rebalance.enable": "false", "controlled.shutdown.timeout.ms": 15000}
    settings.update(extra)
    return LocalCluster(tmp_path, zk_connect, extra=settings).start()


@pytest.fixture
def cluster(tmp_path, zk_connect):
    cluster = make_cluster(tmp_path, zk_connect)
    try:
        yield cluster
    finally:
        cluster.close()


def create_topic(cluster: LocalCluster, partitions: int = 1, replication: int = 3,
                 configs: dict | None = None) -> None:
    with Admin(cluster.bootstrap()) as admin:
        admin.create_topic(TOPIC, partitions, replication, configs or {})
    wait_until(lambda: all_in_sync(cluster, partitions, replication),
               message="every replica in the ISR")


def all_in_sync(cluster: LocalCluster, partitions: int, replication: int) -> bool:
    """Whether the topic's ``partitions`` are all listed, each with ``replication`` replicas
    in its ISR (a broker lists none until it knows the topic)."""
    found = partition_meta(cluster)
    return len(found) == partitions and all(len(p.isr) == replication for p in found.values())


def partition_meta(cluster: LocalCluster, via: int | None = None):
    via = via if via is not None else cluster.live()[0]
    topic = cluster.metadata(via, [TOPIC]).topics.get(TOPIC)
    return {} if topic is None else topic.partitions


def leader_of(cluster: LocalCluster, partition: int = 0, via: int | None = None) -> int:
    return partition_meta(cluster, via)[partition].leader


class AcksAllProducer:
    """confluent-kafka with acks=all; records which values were acknowledged, and errors."""

    def __init__(self, bootstrap: str, **settings) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                  "message.timeout.ms": 60000, "retry.backoff.ms": 100,
                                  "topic.metadata.refresh.interval.ms": 1000, **settings})
        self.acked: list[tuple[int, int, str]] = []  # (partition, offset, value)
        self.errors: list[KafkaError] = []

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.errors.append(err)
        else:
            self.acked.append((msg.partition(), msg.offset(), msg.value().decode()))

    def produce(self, value: str, partition: int = 0) -> None:
        self.producer.produce(TOPIC, value=value.encode(), partition=partition,
                              on_delivery=self._delivered)
        self.producer.poll(0)

    def flush(self, timeout: float = 90) -> None:
        assert self.producer.flush(timeout) == 0, "messages still in flight"


@contextlib.contextmanager
def producing(producer: AcksAllProducer, prefix: str, partitions: int = 1):
    """Produce ``<prefix>-<n>`` round-robin over the partitions from a thread while the
    block runs."""
    stop = threading.Event()

    def produce_until() -> None:
        n = 0
        while not stop.is_set():
            producer.produce(f"{prefix}-{n}", n % partitions)
            n += 1
            time.sleep(0.003)

    thread = threading.Thread(target=produce_until)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def read_all(cluster: LocalCluster, partitions: list[int]) -> list[tuple[int, str]]:
    """Every (partition, value) through kcat from the live brokers, in log order."""
    found = []
    for partition in partitions:
        result = subprocess.run(
            ["kcat", "-b", cluster.bootstrap(*cluster.live()), "-C", "-t", TOPIC, "-p",
             str(partition), "-o", "beginning", "-e", "-f", "%o %s\\n"],
            capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        records = sorted((int(offset), value) for offset, value in
                         (line.split(" ", 1) for line in result.stdout.splitlines() if line))
        offsets = [offset for offset, _ in records]
        assert len(set(offsets)) == len(offsets), "an offset was delivered twice"
        found += [(partition, value) for _, value in records]
    return found


def segment_bytes(cluster: LocalCluster, broker_id: int, partition: int = 0) -> bytes:
    directory = cluster.brokers[broker_id].log_dir / f"{TOPIC}-{partition}"
    return b"".join(path.read_bytes() for path in sorted(directory.glob("*.log")))


def test_acks_all_survives_the_leader_being_killed(cluster):
    create_topic(cluster)
    leader = leader_of(cluster)
    producer = AcksAllProducer(cluster.bootstrap())
    with producing(producer, "v"):
        wait_until(lambda: len(producer.acked) > 200, message="acknowledged messages")
        cluster.brokers[leader].kill()
        wait_until(lambda: leader_of(cluster) not in (-1, leader), timeout=30,
                   message="a new leader")
        acked_before = len(producer.acked)
        wait_until(lambda: len(producer.acked) > acked_before + 200, timeout=60,
                   message="acknowledgements from the new leader")
    producer.flush()
    assert not [e for e in producer.errors if not e.retriable()], producer.errors
    acked = {value for _, _, value in producer.acked}
    offsets = {}
    for _, offset, value in producer.acked:
        assert offsets.setdefault(offset, value) == value, f"offset {offset} acked twice"
    found = [value for _, value in read_all(cluster, [0])]
    assert acked <= set(found), f"lost {len(acked - set(found))} acknowledged messages"
    new_leader = leader_of(cluster)
    assert new_leader != leader and new_leader in partition_meta(cluster)[0].isr


def test_former_leader_truncates_its_unreplicated_tail_and_rejoins(cluster):
    create_topic(cluster)
    leader = leader_of(cluster)
    followers = [b for b in cluster.brokers if b != leader]
    producer = AcksAllProducer(cluster.bootstrap(), acks="all")
    for n in range(50):
        producer.produce(f"replicated-{n}")
    producer.flush()
    # Followers paused: whatever the leader appends now, past the one response already
    # owed to their parked fetches, reaches no follower.
    for broker_id in followers:
        cluster.brokers[broker_id].pause()
    one = AcksAllProducer(cluster.brokers[leader].bootstrap, acks="1")
    one.produce("maybe-replicated")
    one.flush(10)
    time.sleep(0.3)
    for n in range(20):
        one.produce(f"tail-{n}")
    one.flush(10)
    cluster.brokers[leader].kill()
    for broker_id in followers:
        cluster.brokers[broker_id].resume()
    wait_until(lambda: leader_of(cluster, via=followers[0]) in followers, timeout=30,
               message="a follower to take over")
    after = AcksAllProducer(cluster.bootstrap(*followers))
    for n in range(30):
        after.produce(f"after-{n}")
    after.flush()
    cluster.brokers[leader].start()
    wait_until(lambda: len(partition_meta(cluster)[0].isr) == 3, timeout=30,
               message="the former leader back in the ISR")
    values = [value for _, value in read_all(cluster, [0])]
    assert not [v for v in values if v.startswith("tail-")]
    assert [v for v in values if v.startswith("after-")] == [f"after-{n}" for n in range(30)]
    wait_until(lambda: len({segment_bytes(cluster, b) for b in cluster.brokers}) == 1,
               timeout=20, message="byte-identical replicas")
    assert "truncating" in cluster.brokers[leader].log_text()


def test_batches_the_leader_rewrites_reach_the_followers_as_written(cluster):
    """LogAppendTime and compression.type change batches on the leader (stamp, recompress);
    the followers copy the leader's bytes, so every replica holds the same log."""
    create_topic(cluster, configs={"message.timestamp.type": "LogAppendTime",
                                   "compression.type": "zstd"})
    producer = AcksAllProducer(cluster.bootstrap(), **{"compression.type": "gzip",
                                                       "linger.ms": 20})
    before = int(time.time() * 1000)
    for n in range(200):
        producer.produce(f"rewritten-{n}")
    producer.flush()
    assert producer.errors == [] and len(producer.acked) == 200
    wait_until(lambda: len({segment_bytes(cluster, b) for b in cluster.brokers}) == 1,
               message="the same log on every replica")
    headers = [h for _, h in iter_batch_headers(segment_bytes(cluster, leader_of(cluster)))]
    assert sum(h.records_count for h in headers) == 200
    assert {(h.compression, h.timestamp_type) for h in headers} == {(Compression.ZSTD, 1)}
    assert all(h.max_timestamp >= before for h in headers)
    assert sorted(v for _, v in read_all(cluster, [0])) == sorted(f"rewritten-{n}"
                                                                  for n in range(200))


def test_paused_follower_leaves_the_isr_and_acks_all_needs_min_insync(cluster):
    create_topic(cluster)
    leader = leader_of(cluster)
    followers = [b for b in cluster.brokers if b != leader]
    cluster.brokers[followers[0]].pause()
    try:
        wait_until(lambda: followers[0] not in partition_meta(cluster, leader)[0].isr,
                   timeout=20, message="the paused follower out of the ISR")
        producer = AcksAllProducer(cluster.brokers[leader].bootstrap)
        producer.produce("two-in-sync")
        producer.flush()
        assert producer.errors == []
        cluster.brokers[followers[1]].pause()
        wait_until(lambda: partition_meta(cluster, leader)[0].isr == (leader,), timeout=20,
                   message="only the leader in the ISR")
        lonely = AcksAllProducer(cluster.brokers[leader].bootstrap, **{
            "message.timeout.ms": 3000, "retries": 0})
        lonely.produce("refused")
        lonely.producer.flush(10)
        assert [e.code() for e in lonely.errors] == [KafkaError.NOT_ENOUGH_REPLICAS]
    finally:
        for broker_id in followers:
            cluster.brokers[broker_id].resume()
    wait_until(lambda: len(partition_meta(cluster, leader)[0].isr) == 3, timeout=30,
               message="both followers back in the ISR")
    values = [value for _, value in read_all(cluster, [0])]
    assert values == ["two-in-sync"]


@pytest.mark.parametrize("unclean", [False, True, "elect-leaders"])
def test_unclean_leader_election(tmp_path, zk_connect, unclean):
    """Off, nobody out of sync may lead; on, the follower takes over; off but asked for
    through ElectLeaders (confluent-kafka's elect_leaders, UNCLEAN), the follower too."""
    cluster = make_cluster(tmp_path, zk_connect, **{
        "unclean.leader.election.enable": str(unclean is True).lower(),
        "min.insync.replicas": 1})
    try:
        create_topic(cluster, replication=2)
        replicas = partition_meta(cluster)[0].replicas
        leader, follower = replicas[0], replicas[1]
        producer = AcksAllProducer(cluster.bootstrap())
        producer.produce("both-have-it")
        producer.flush()
        cluster.brokers[follower].kill()
        wait_until(lambda: partition_meta(cluster, leader)[0].isr == (leader,), timeout=20,
                   message="the ISR down to the leader")
        only_leader = AcksAllProducer(cluster.brokers[leader].bootstrap)
        only_leader.produce("only-the-leader-has-it")
        only_leader.flush()
        cluster.brokers[leader].kill()
        cluster.brokers[follower].start()
        other = next(b for b in cluster.brokers if b not in replicas)
        if not unclean:
            time.sleep(4)  # several session timeouts: still nobody may lead
            assert leader_of(cluster, via=other) == -1
            cluster.brokers[leader].start()
            wait_until(lambda: leader_of(cluster, via=other) == leader, timeout=30,
                       message="the old leader back")
            expected = ["both-have-it", "only-the-leader-has-it"]
        else:
            if unclean == "elect-leaders":
                wait_until(lambda: leader_of(cluster, via=other) == -1, timeout=20,
                           message="the old leader's session to expire")
                admin = AdminClient({"bootstrap.servers": cluster.bootstrap(other)})
                elected = admin.elect_leaders(ElectionType.UNCLEAN, [
                    KafkaTopicPartition(TOPIC, 0)]).result(30)
                assert elected == {KafkaTopicPartition(TOPIC, 0): None}
                # Answered once the controller (which librdkafka asked) has the new leader.
                assert leader_of(cluster, via=cluster.controller(other)) == follower
            wait_until(lambda: leader_of(cluster, via=other) == follower, timeout=30,
                       message="the out-of-sync replica to lead")
            expected = ["both-have-it"]
        assert [value for _, value in read_all(cluster, [0])] == expected
    finally:
        cluster.close()


def test_rolling_controlled_shutdown_under_acks_all_load(cluster):
    create_topic(cluster, partitions=3)
    producer = AcksAllProducer(cluster.bootstrap())
    with producing(producer, "r", 3):
        for broker_id in sorted(cluster.brokers):
            wait_until(lambda: len(producer.acked) > 50, message="acknowledged messages")
            assert cluster.brokers[broker_id].stop(timeout=60) == 0
            text = cluster.brokers[broker_id].log_text()
            assert "controlled shutdown: no leaderships left to move" in text
            cluster.brokers[broker_id].start()
            wait_until(lambda: all_in_sync(cluster, 3, 3), timeout=30,
                       message="every replica back in sync")
    producer.flush()
    assert not [e for e in producer.errors if not e.retriable()], producer.errors
    acked = {(p, value) for p, _, value in producer.acked}
    found = read_all(cluster, [0, 1, 2])
    assert acked <= set(found), f"lost {len(acked - set(found))} acknowledged messages"


def latest_offset(connection: BrokerConnection) -> tuple[int, int]:
    """(error code, offset) of a consumer's ListOffsets for the latest offset of partition 0."""
    response = connection.request(ApiKey.LIST_OFFSETS, {
        "replica_id": -1, "isolation_level": 0, "topics": [{"name": TOPIC, "partitions": [{
            "partition_index": 0, "current_leader_epoch": -1, "timestamp": -1,
            "max_num_offsets": 1}]}]})
    answer = response["topics"][0]["partitions"][0]
    return answer["error_code"], answer["offset"]


def test_latest_offset_never_goes_back_through_a_failover(tmp_path, zk_connect):
    """KIP-207: a new leader starts with the high watermark its replica last heard, which
    can be below the acknowledged end (followers learn it on their next fetch; here long
    polls make that late). Until the other follower has fetched from it, it answers a
    consumer's ListOffsets OFFSET_NOT_AVAILABLE, never an end below what was acknowledged
    (which would send a consumer back, or make an end-offset check pass on nothing)."""
    cluster = make_cluster(tmp_path, zk_connect, **{
        "replica.fetch.wait.max.ms": 4000, "replica.lag.time.max.ms": 10000})
    try:
        create_topic(cluster)
        producer = AcksAllProducer(cluster.bootstrap())
        for n in range(100):
            producer.produce(f"v-{n}")
        producer.flush()
        assert len(producer.acked) == 100
        leader = leader_of(cluster)
        survivors = [b for b in cluster.brokers if b != leader]
        connections = [BrokerConnection("127.0.0.1", cluster.ports[b]) for b in survivors]
        for connection in connections:
            connection.connect()
        cluster.brokers[leader].kill()
        answers, refused = [], 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (answers and answers[-1] == 100):
            for connection in connections:
                error, offset = latest_offset(connection)
                if error == 0:
                    answers.append(offset)
                elif error == OffsetNotAvailableError.errno:
                    refused += 1
                else:  # a survivor not elected (yet)
                    assert error == NotLeaderOrFollowerError.errno, error
        for connection in connections:
            connection.close()
        assert answers and answers[-1] == 100, (answers[-5:], refused)
        assert refused, "the new leader's high watermark was never behind: nothing was tested"
        assert min(answers) == 100, f"a latest offset below the acknowledged 100: {answers}"
    finally:
        cluster.close()


def test_kafka_python_reads_through_a_failover(cluster):
    create_topic(cluster)
    producer = AcksAllProducer(cluster.bootstrap())
    for n in range(100):
        producer.produce(f"kp-{n}")
    producer.flush()
    cluster.brokers[leader_of(cluster)].kill()
    survivors = cluster.live()
    wait_until(lambda: leader_of(cluster, via=survivors[0]) in survivors, timeout=30,
               message="a new leader")
    values = kafka_python_consume(cluster.bootstrap(*survivors), TOPIC, [0])
    assert values == {(0, f"kp-{n}") for n in range(100)}


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pylog.cli.main", *args],
                          capture_output=True, text=True, timeout=timeout)


def test_reassignment_under_load_survives_a_controller_failover(tmp_path, zk_connect):
    cluster = make_cluster(tmp_path, zk_connect, **{"min.insync.replicas": 1})
    try:
        create_topic(cluster, replication=2)
        assert partition_meta(cluster)[0].replicas == (1, 2)
        producer = AcksAllProducer(cluster.bootstrap())
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": TOPIC, "partition": 0, "replicas": [2, 3]}]}))
        with producing(producer, "m"):
            wait_until(lambda: len(producer.acked) > 100, message="acknowledged messages")
            controller = cluster.controller(1)
            result = run_cli("partitions", "reassign", "--zookeeper", zk_connect,
                             "--execute", "--reassignment-json-file", str(plan))
            assert result.returncode == 0, result.stderr
            cluster.brokers[controller].kill()
            time.sleep(1)
            cluster.brokers[controller].start()

            def verified() -> bool:
                check = run_cli("partitions", "reassign", "--zookeeper", zk_connect,
                                "--verify", "--reassignment-json-file", str(plan))
                return check.returncode == 0 and "is completed" in check.stdout
            wait_until(verified, timeout=60, message="the reassignment to complete")
            acked_before = len(producer.acked)
            wait_until(lambda: len(producer.acked) > acked_before + 50, timeout=60,
                       message="acknowledgements after the move")
        producer.flush()
        meta = partition_meta(cluster)[0]
        assert meta.replicas == (2, 3) and set(meta.isr) <= {2, 3} and meta.leader in (2, 3)
        acked = {value for _, _, value in producer.acked}
        found = {value for _, value in read_all(cluster, [0])}
        assert acked <= found, f"lost {len(acked - found)} acknowledged messages"
        wait_until(lambda: not (cluster.brokers[1].log_dir / f"{TOPIC}-0").exists(),
                   message="broker 1 to delete its replica")
        wait_until(lambda: segment_bytes(cluster, 2) == segment_bytes(cluster, 3),
                   message="identical replicas on brokers 2 and 3")
    finally:
        cluster.close()


def test_reassignment_naming_an_unknown_broker_changes_nothing(cluster, tmp_path, zk_connect):
    create_topic(cluster, replication=2)
    plan = tmp_path / "bad.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": TOPIC, "partition": 0, "replicas": [2, 9]}]}))
    result = run_cli("partitions", "reassign", "--zookeeper", zk_connect, "--execute",
                     "--reassignment-json-file", str(plan))
    assert result.returncode != 0 and len(result.stderr.strip().splitlines()) == 1
    assert "9" in result.stderr
    assert partition_meta(cluster)[0].replicas == (1, 2)


def preferred_replica_back_in_sync_but_not_leading(cluster) -> int:
    """A new topic whose preferred replica was killed and started again: it is in sync and
    another replica leads (auto.leader.rebalance.enable is off). Returns its id."""
    create_topic(cluster)
    preferred = partition_meta(cluster)[0].replicas[0]
    cluster.brokers[preferred].kill()
    wait_until(lambda: leader_of(cluster, via=cluster.live()[0]) not in (-1, preferred),
               timeout=30, message="a new leader")
    cluster.brokers[preferred].start()
    wait_until(lambda: len(partition_meta(cluster)[0].isr) == 3, timeout=30,
               message="the preferred replica back in sync")
    return preferred


def test_preferred_leader_election_moves_leadership_back(cluster, zk_connect):
    preferred = preferred_replica_back_in_sync_but_not_leading(cluster)
    assert leader_of(cluster) != preferred  # auto.leader.rebalance.enable is off here
    result = run_cli("leader-election", "--zookeeper", zk_connect, "--election-type",
                     "preferred", "--topic", TOPIC, "--partition", "0")
    assert result.returncode == 0, result.stderr
    wait_until(lambda: leader_of(cluster) == preferred, message="the preferred leader back")


def test_elect_leaders_through_the_admin_api(cluster):
    """ElectLeaders (KIP-460) as confluent-kafka's elect_leaders sends it."""
    preferred = preferred_replica_back_in_sync_but_not_leading(cluster)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    ours, missing = KafkaTopicPartition(TOPIC, 0), KafkaTopicPartition(TOPIC, 7)

    def elect(kind, partitions):
        return {tp: None if error is None else error.code()
                for tp, error in admin.elect_leaders(kind, partitions).result(30).items()}

    assert elect(ElectionType.PREFERRED, [ours, missing]) == {
        ours: None, missing: KafkaError.UNKNOWN_TOPIC_OR_PART}
    # The answer comes once the broker that answered (the controller, where librdkafka
    # sends ElectLeaders) has the new leader in its view; the others follow shortly.
    answered = cluster.controller(cluster.live()[0])
    assert leader_of(cluster, via=answered) == preferred
    wait_until(lambda: {leader_of(cluster, via=b) for b in cluster.live()} == {preferred},
               message="every broker's view of the new leader")
    assert elect(ElectionType.PREFERRED, [ours]) == {ours: KafkaError.ELECTION_NOT_NEEDED}
    assert elect(ElectionType.UNCLEAN, [ours]) == {ours: KafkaError.ELECTION_NOT_NEEDED}
    assert elect(ElectionType.PREFERRED, None) == {}  # every partition: none to change
    result = run_cli("leader-election", "--bootstrap-server", cluster.bootstrap(),
                     "--election-type", "preferred", "--topic", TOPIC, "--partition", "0")
    assert (result.returncode, result.stdout) == (
        0, f"Valid replica already elected for partitions {TOPIC}-0\n"), result.stderr


def test_auto_leader_rebalance_restores_the_preferred_leader(tmp_path, zk_connect):
    cluster = make_cluster(tmp_path, zk_connect, **{
        "auto.leader.rebalance.enable": "true", "leader.imbalance.check.interval.seconds": 1})
    try:
        create_topic(cluster)
        preferred = partition_meta(cluster)[0].replicas[0]
        cluster.brokers[preferred].kill()
        wait_until(lambda: leader_of(cluster, via=cluster.live()[0]) not in (-1, preferred),
                   timeout=30, message="a new leader")
        cluster.brokers[preferred].start()
        wait_until(lambda: leader_of(cluster) == preferred, timeout=30,
                   message="leadership back on the preferred replica")
    finally:
        cluster.close()


def fetch_partition_error(port: int, replica_id: int, leader_epoch: int) -> int:
    connection = BrokerConnection("127.0.0.1", port, timeout_s=10)
    try:
        response = connection.request(ApiKey.FETCH, {
            "replica_id": replica_id, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": TOPIC, "partitions": [{
                "partition": 0, "current_leader_epoch": leader_epoch, "fetch_offset": 0,
                "last_fetched_epoch": -1, "log_start_offset": -1,
                "partition_max_bytes": 1 << 20}]}]})
        return response["responses"][0]["partitions"][0]["error_code"]
    finally:
        connection.close()


def offset_for_epoch(port: int, epoch: int, current_epoch: int = -1) -> dict:
    connection = BrokerConnection("127.0.0.1", port, timeout_s=10)
    try:
        response = connection.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, {
            "replica_id": -2, "topics": [{"topic": TOPIC, "partitions": [{
                "partition": 0, "current_leader_epoch": current_epoch, "leader_epoch": epoch}]}]})
        return response["topics"][0]["partitions"][0]
    finally:
        connection.close()


def test_fetches_naming_the_wrong_replica_or_epoch_get_kafkas_errors(cluster):
    create_topic(cluster, replication=2)
    first_leader = leader_of(cluster)
    cluster.brokers[first_leader].stop()  # controlled: leadership moves, epoch 1
    cluster.brokers[first_leader].start()
    wait_until(lambda: len(partition_meta(cluster)[0].isr) == 2, message="both in sync")
    meta = partition_meta(cluster)[0]
    leader, port = meta.leader, cluster.ports[meta.leader]
    outsider = next(b for b in cluster.brokers if b not in meta.replicas)
    epoch = cluster.metadata(leader, [TOPIC]).topics[TOPIC].partitions[0]
    leader_epoch = leader_epoch_of(cluster, leader)
    assert fetch_partition_error(port, outsider, leader_epoch) == 6  # NOT_LEADER_OR_FOLLOWER
    assert fetch_partition_error(port, -1, leader_epoch + 5) == 75  # UNKNOWN_LEADER_EPOCH
    follower = next(r for r in meta.replicas if r != leader)
    assert fetch_partition_error(cluster.ports[follower], -1, -1) == 6
    assert leader != first_leader and leader_epoch >= 1
    assert fetch_partition_error(port, -1, leader_epoch - 1) == 74  # FENCED_LEADER_EPOCH
    assert fetch_partition_error(port, follower, leader_epoch) == 0
    assert epoch.leader == leader
    producer = AcksAllProducer(cluster.bootstrap())
    for n in range(10):
        producer.produce(f"e-{n}")
    producer.flush()
    answer = offset_for_epoch(port, leader_epoch)
    assert (answer["error_code"], answer["leader_epoch"], answer["end_offset"]) == (
        0, leader_epoch, 10)
    assert offset_for_epoch(port, leader_epoch - 1)["end_offset"] == 0  # epoch 1 starts at 0
    assert offset_for_epoch(port, leader_epoch, leader_epoch + 1)["error_code"] == 75
    assert offset_for_epoch(cluster.ports[follower], leader_epoch)["error_code"] == 6
    # Nothing changed in the cluster.
    assert partition_meta(cluster)[0] == meta


def leader_epoch_of(cluster: LocalCluster, broker_id: int) -> int:
    connection = BrokerConnection("127.0.0.1", cluster.ports[broker_id], timeout_s=10)
    try:
        response = connection.request(ApiKey.METADATA, {
            "topics": [{"name": TOPIC}], "allow_auto_topic_creation": False})
        return response["topics"][0]["partitions"][0]["leader_epoch"]
    finally:
        connection.close()


def test_a_leader_paused_past_its_lease_but_not_its_session_writes_nothing_twice(cluster):
    """A 2.35 s SIGSTOP outlasts the session lease (2/3 of the 3 s session) but not the
    session (the lease's round trips, every 0.3 s, leave at most 2.65 s unheard): leadership stays, and acks=all requests parked across the pause must not be
    answered NOT_LEADER_OR_FOLLOWER for batches the log kept (librdkafka would resend
    them and, without idempotence, write them twice)."""
    create_topic(cluster)
    leader = leader_of(cluster)
    producer = AcksAllProducer(cluster.bootstrap(), **{"enable.idempotence": False})
    with producing(producer, "p"):
        wait_until(lambda: len(producer.acked) > 100, message="acknowledged messages")
        epoch = leader_epoch_of(cluster, leader)
        cluster.brokers[leader].pause()
        time.sleep(2.35)
        cluster.brokers[leader].resume()
        acked_before = len(producer.acked)
        wait_until(lambda: len(producer.acked) > acked_before + 100, timeout=30,
                   message="acknowledgements after the pause")
    producer.flush()
    assert leader_epoch_of(cluster, leader) == epoch, "the pause cost the leader its session"
    values = [value for _, value in read_all(cluster, [0])]
    assert len(values) == len(set(values)), "a value was written twice"
    assert {value for _, _, value in producer.acked} <= set(values)


def test_metrics_show_under_replication_and_isr_changes(tmp_path, zk_connect):
    from prometheus_client.parser import text_string_to_metric_families

    from pylog.testing.process import free_port, wait_for_port

    cluster = LocalCluster(tmp_path, zk_connect, extra={
        "replica.lag.time.max.ms": 2000, "replica.fetch.wait.max.ms": 200,
        "default.replication.factor": 3, "auto.leader.rebalance.enable": "false"})
    ports = {}
    for broker_id, broker in cluster.brokers.items():
        ports[broker_id] = free_port()
        broker.overrides["metrics.listener"] = f"127.0.0.1:{ports[broker_id]}"

    def gauge(broker_id: int, name: str) -> float:
        url = f"http://127.0.0.1:{ports[broker_id]}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
        return next(sample.value for family in text_string_to_metric_families(text)
                    for sample in family.samples if sample.name == name and not sample.labels)

    cluster.start()
    try:
        for broker_id, broker in cluster.brokers.items():  # bound after the client port
            wait_for_port("127.0.0.1", ports[broker_id], 30, broker.process.process,
                          broker.log_path)
        create_topic(cluster)
        assert sum(gauge(b, "pylog_active_controller") for b in cluster.brokers) == 1
        leader = leader_of(cluster)
        follower = next(b for b in cluster.brokers if b != leader)
        assert gauge(leader, "pylog_under_replicated_partitions") == 0
        cluster.brokers[follower].pause()
        try:
            wait_until(lambda: gauge(leader, "pylog_under_replicated_partitions") == 1,
                       timeout=20, message="the leader reporting an under-replicated partition")
            assert gauge(leader, "pylog_isr_shrinks_total") >= 1
        finally:
            cluster.brokers[follower].resume()
        wait_until(lambda: gauge(leader, "pylog_under_replicated_partitions") == 0,
                   timeout=30, message="the follower back in the ISR")
        assert gauge(leader, "pylog_isr_expands_total") >= 1
        assert sum(gauge(b, "pylog_offline_partitions") for b in cluster.brokers) == 0
    finally:
        cluster.close()


def test_reassignment_through_the_admin_api_lists_and_cancels(cluster, tmp_path):
    """AlterPartitionReassignments and ListPartitionReassignments (KIP-455) as kafka-python
    sends them: a move that cannot finish (its new replica was killed; still registered
    for a few seconds, so the move is accepted) is listed with what it adds and removes,
    then cancelled back; a move that can finish, finishes."""
    from kafka import TopicPartition as KpPartition
    from kafka.admin import KafkaAdminClient
    from kafka.errors import (InvalidReplicationAssignmentError, KafkaConnectionError,
                              NoReassignmentInProgressError, UnknownTopicOrPartitionError)

    # The broker to kill must not be the controller, which kafka-python sends these to.
    first = cluster.controller(cluster.live()[0])
    second, third = sorted(b for b in cluster.brokers if b != first)
    creator = AdminClient({"bootstrap.servers": cluster.bootstrap(first)})
    creator.create_topics([NewTopic(TOPIC, 2, -1, replica_assignment=[
        [first, second], [first, second]])])[TOPIC].result(30)
    wait_until(lambda: all_in_sync(cluster, 2, 2), message="every replica in the ISR")
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap(first))
    p0, p1, missing = KpPartition(TOPIC, 0), KpPartition(TOPIC, 1), KpPartition(TOPIC, 9)

    def retrying(call):
        """kafka-python may refresh its metadata from the killed broker first: an
        application would try again."""
        deadline = time.monotonic() + 20
        while True:
            try:
                return call()
            except KafkaConnectionError:
                assert time.monotonic() < deadline
                time.sleep(0.2)

    try:
        cluster.brokers[third].kill()
        try:
            assert retrying(lambda: admin.alter_partition_reassignments({
                p0: [third, first], missing: [first], p1: None})) == {
                p0: None, missing: UnknownTopicOrPartitionError,
                p1: NoReassignmentInProgressError}
            wait_until(lambda: partition_meta(cluster, first)[0].replicas ==
                       (third, first, second), message="the new replica added")
            assert retrying(admin.list_partition_reassignments) == {p0: {
                "replicas": [third, first, second], "adding_replicas": [third],
                "removing_replicas": [second]}}
            assert retrying(lambda: admin.alter_partition_reassignments({p0: None})) == {
                p0: None}
            wait_until(lambda: partition_meta(cluster, first)[0].replicas == (first, second),
                       message="the cancelled move undone")
            wait_until(lambda: retrying(admin.list_partition_reassignments) == {},
                       message="nothing left to move")
        finally:
            cluster.brokers[third].start()
        wait_until(lambda: third in cluster.metadata(first).brokers,
                   timeout=30, message="the killed broker back")
        assert admin.alter_partition_reassignments({p1: [third, first, first]}) == {
            p1: InvalidReplicationAssignmentError}
        assert admin.alter_partition_reassignments({p1: [third]}) == {p1: None}
        wait_until(lambda: partition_meta(cluster, first)[1].replicas == (third,), timeout=30,
                   message="partition 1 moved to the third broker")
        wait_until(lambda: leader_of(cluster, 1, via=first) == third,
                   message="the third broker leading partition 1")
    finally:
        admin.close()
    # The same through pylog's tool, as kafka-reassign-partitions.sh --bootstrap-server.
    plan = tmp_path / "back.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": TOPIC, "partition": 1, "replicas": [first, second]}]}))
    tool = ("partitions", "reassign", "--bootstrap-server", cluster.bootstrap(first),
            "--reassignment-json-file", str(plan))
    started = run_cli(*tool, "--execute")
    assert started.returncode == 0, started.stderr
    assert f"Successfully started reassignment of partitions {TOPIC}-1" in started.stdout
    wait_until(lambda: run_cli(*tool, "--verify").returncode == 0, timeout=30,
               message="the tool's move verified")
    assert partition_meta(cluster, first)[1].replicas == (first, second)
