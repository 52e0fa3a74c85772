"""``pylog mirror`` between real clusters: SIGKILLed at random points while producers write
to the source, it still copies every source record exactly once, in order, with its key,
value, timestamp, headers and partition (read back with a read_committed consumer)."""

from __future__ import annotations

import random
import signal
import time

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions

from pylog.testing.zookeeper import zookeeper_fixture
from tests.cluster.cluster_helpers import LocalCluster
from tests.mirror.conftest import ALIAS, BROKER_SETTINGS, create_topic, mirror_args
from tests.mirror.helpers import (
    MirrorProcess,
    MockCluster,
    check_exactly_once,
    produce,
    read_all,
    wait_for_commit,
)

pytestmark = pytest.mark.slow

zookeeper = zookeeper_fixture()

CLUSTER_SETTINGS = {**BROKER_SETTINGS, "transaction.state.log.replication.factor": 3,
                    "transaction.state.log.min.isr": 2, "offsets.topic.replication.factor": 3,
                    "default.replication.factor": 3, "min.insync.replicas": 2}


@pytest.fixture(scope="module")
def target_cluster(tmp_path_factory, zookeeper):
    """Three brokers in ZooKeeper: the aggregate cluster."""
    cluster = LocalCluster(tmp_path_factory.mktemp("aggregate"),
                           f"{zookeeper.connect_string}/aggregate", extra=CLUSTER_SETTINGS)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.close()


def kill_and_restart_while_producing(mirror: MirrorProcess, source_bootstrap: str,
                                     target_bootstrap: str, topic: str, partitions: int,
                                     rng: random.Random, kills: int = 3,
                                     between_rounds=lambda round_number: None) -> list:
    """Produce in rounds; in each the mirror commits something, then is SIGKILLed at a
    random moment (often inside a transaction) and started again."""
    sent = []
    progress = 0
    for round_number in range(kills):
        between_rounds(round_number)
        transactional = f"producer-{topic}" if round_number % 2 else None
        sent += produce(source_bootstrap, topic, len(sent), 400, partitions, transactional,
                        batches=4)
        progress = wait_for_commit(mirror, target_bootstrap, f"{ALIAS}.{topic}", partitions,
                                   progress)
        time.sleep(rng.uniform(0.0, 0.6))
        mirror.kill()
        sent += produce(source_bootstrap, topic, len(sent), 100, partitions)
        mirror.start()
    sent += produce(source_bootstrap, topic, len(sent), 300, partitions, f"producer-{topic}",
                    batches=3)
    return sent


def test_sigkilled_mirror_copies_each_record_once(source, target_cluster, tmp_path):
    """A standalone source broker, a three-broker target; a topic matching the regex
    appears while the mirror runs, and then grows a partition."""
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    target = target_cluster.bootstrap()
    create_topic(source.bootstrap, "orders", 3, {"retention.ms": "86400000",
                                                 "cleanup.policy": "delete"})
    payments: list = []
    source_admin = AdminClient({"bootstrap.servers": source.bootstrap})

    def new_topic_then_growth(round_number: int) -> None:
        if round_number == 1:
            create_topic(source.bootstrap, "payments", 2)
            payments.extend(produce(source.bootstrap, "payments", 0, 100, 2))
        elif round_number == 2:
            source_admin.create_partitions([NewPartitions("payments", 3)])["payments"].result(30)
            payments.extend(produce(source.bootstrap, "payments", 100, 150, 3))

    mirror = MirrorProcess(tmp_path, mirror_args(tmp_path, source.bootstrap, target,
                                                 "orders|payments"))
    mirror.start()
    try:
        sent = kill_and_restart_while_producing(mirror, source.bootstrap, target, "orders", 3,
                                                rng, between_rounds=new_topic_then_growth)
        mirrored = read_all(target, f"{ALIAS}.orders", 3, len(sent))
        check_exactly_once(sent, mirrored, ALIAS)
        check_exactly_once(payments, read_all(target, f"{ALIAS}.payments", 3, len(payments)),
                           ALIAS)
        assert mirror.stop() == 0, mirror.logs()[-3000:]     # SIGTERM: a clean stop
    finally:
        mirror.kill()
    admin = AdminClient({"bootstrap.servers": target})
    assert len(admin.list_topics(timeout=30).topics[f"{ALIAS}.payments"].partitions) == 3
    configs = admin.describe_configs([ConfigResource("topic", f"{ALIAS}.orders")])
    entries = next(iter(configs.values())).result(30)
    assert entries["retention.ms"].value == "86400000"
    # One line per interval when not on a terminal: records/s, bytes/s and lag per topic.
    assert "orders" in mirror.logs() and "rec/s" in mirror.logs() and "lag" in mirror.logs()


def test_sigkilled_mirror_from_the_mock_cluster(target, tmp_path):
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    mock = MockCluster()     # its topics have 4 partitions
    try:
        ck.Producer({"bootstrap.servers": mock.bootstrap}).list_topics("events", timeout=10)
        mirror = MirrorProcess(tmp_path, mirror_args(tmp_path, mock.bootstrap, target.bootstrap,
                                                     "events"))
        mirror.start()
        try:
            sent = kill_and_restart_while_producing(mirror, mock.bootstrap, target.bootstrap,
                                                    "events", 4, rng, kills=2)
            mirrored = read_all(target.bootstrap, f"{ALIAS}.events", 4, len(sent))
            check_exactly_once(sent, mirrored, ALIAS)
        finally:
            mirror.kill()
    finally:
        mock.close()


def wait_for_log(mirror: MirrorProcess, text: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in mirror.logs():
        assert mirror.alive(), mirror.logs()[-3000:]
        assert time.monotonic() < deadline, f"no {text!r} in:\n" + mirror.logs()[-3000:]
        time.sleep(0.2)


def test_two_members_share_the_partitions_and_hand_them_over(source, target, tmp_path):
    """A second process with the same settings takes some partitions; when the first
    stops (SIGTERM) the second takes them all; every record once."""
    create_topic(source.bootstrap, "shared", 4)
    args = mirror_args(tmp_path, source.bootstrap, target.bootstrap, "shared")
    first = MirrorProcess(tmp_path / "first", args).start()
    second = MirrorProcess(tmp_path / "second", args)
    try:
        sent = produce(source.bootstrap, "shared", 0, 400, 4)
        wait_for_commit(first, target.bootstrap, f"{ALIAS}.shared", 4, 0)
        second.start()
        wait_for_log(second, "assigned shared")
        sent += produce(source.bootstrap, "shared", len(sent), 400, 4, "shared-producer", batches=4)
        wait_for_commit(second, target.bootstrap, f"{ALIAS}.shared", 4, 400)
        assert first.stop() == 0, first.logs()[-3000:]
        sent += produce(source.bootstrap, "shared", len(sent), 400, 4)
        check_exactly_once(sent, read_all(target.bootstrap, f"{ALIAS}.shared", 4, len(sent)),
                           ALIAS)
        assert second.alive()
        # Both took part: each wrote some of the records.
        assert "assigned shared" in first.logs()
    finally:
        first.kill()
        second.kill()


def test_a_stalled_mirror_is_fenced_by_the_member_that_took_over(source, target, tmp_path):
    """SIGSTOP one member (its session expires, another takes its partitions and fences
    its transactional ids), then SIGCONT it: what it still had open can never commit."""
    create_topic(source.bootstrap, "stalled", 2)
    args = mirror_args(tmp_path, source.bootstrap, target.bootstrap, "stalled")
    first = MirrorProcess(tmp_path / "first", args).start()
    second = MirrorProcess(tmp_path / "second", args)
    try:
        sent = produce(source.bootstrap, "stalled", 0, 300, 2)
        progress = wait_for_commit(first, target.bootstrap, f"{ALIAS}.stalled", 2, 0)
        sent += produce(source.bootstrap, "stalled", len(sent), 300, 2)
        first.process.signal(signal.SIGSTOP)         # likely inside a transaction
        second.start()
        wait_for_log(second, "assigned stalled")
        sent += produce(source.bootstrap, "stalled", len(sent), 300, 2)
        wait_for_commit(second, target.bootstrap, f"{ALIAS}.stalled", 2, progress)
        first.process.signal(signal.SIGCONT)
        sent += produce(source.bootstrap, "stalled", len(sent), 300, 2, "stalled-producer")
        check_exactly_once(sent, read_all(target.bootstrap, f"{ALIAS}.stalled", 2, len(sent)),
                           ALIAS)
        assert second.alive()
    finally:
        first.process.signal(signal.SIGCONT)
        first.kill()
        second.kill()
