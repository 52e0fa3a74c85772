"""Three real brokers coordinated through a real ZooKeeper, used by third-party clients."""

from __future__ import annotations

import pytest

from pylog.client import Admin
from pylog.client.connection import BrokerConnection
from pylog.errors import InvalidRequestError, NotLeaderOrFollowerError
from pylog.protocol import ApiKey
from tests.cluster import clients
from tests.cluster.cluster_helpers import LocalCluster
from tests.cluster.conftest import wait_until

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(tmp_path, zk_connect):
    local = LocalCluster(tmp_path, zk_connect).start()
    yield local
    local.close()


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    with Admin(bootstrap) as admin:
        admin.create_topic(name, num_partitions=partitions)


def test_partitions_spread_and_every_client_works_through_any_broker(cluster):
    create_topic(cluster.bootstrap(2), "spread", 6)
    for broker_id in (1, 2, 3):
        wait_until(lambda: cluster.leaders(broker_id, "spread") == {
            p: 1 + p % 3 for p in range(6)}, message=f"leaders as broker {broker_id} sees them")
    sent = set()
    for partition in range(6):
        values = [f"kcat-{partition}-{i}" for i in range(5)]
        clients.kcat_produce(cluster.bootstrap(1), "spread", partition, values)
        sent |= {(partition, v) for v in values}
    confluent = [(p, f"ck-{p}-{i}") for p in range(6) for i in range(5)]
    clients.confluent_produce(cluster.bootstrap(2), "spread", confluent)
    kafka_python = [(p, f"kp-{p}-{i}") for p in range(6) for i in range(5)]
    clients.kafka_python_produce(cluster.bootstrap(3), "spread", kafka_python)
    sent |= set(confluent) | set(kafka_python)

    partitions = list(range(6))
    assert clients.kcat_consume(cluster.bootstrap(3), "spread", partitions) == sent
    assert clients.confluent_consume(cluster.bootstrap(1), "spread", partitions,
                                     len(sent)) == sent
    assert clients.kafka_python_consume(cluster.bootstrap(2), "spread", partitions) == sent
    # A broker asked for a partition it does not lead says so; the leader serves it.
    assert fetch_error(cluster.ports[2], "spread", 0) == NotLeaderOrFollowerError.errno
    assert fetch_error(cluster.ports[1], "spread", 0) == 0


def fetch_error(port: int, topic: str, partition: int) -> int:
    connection = BrokerConnection("127.0.0.1", port, timeout_s=10)
    try:
        response = connection.request(ApiKey.FETCH, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": topic, "partitions": [{
                "partition": partition, "fetch_offset": 0, "current_leader_epoch": -1,
                "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]})
    finally:
        connection.close()
    return response["responses"][0]["partitions"][0]["error_code"]


def offline(cluster, via: int, topic: str) -> set[int]:
    return {p for p, leader in cluster.leaders(via, topic).items() if leader == -1}


def test_killed_broker_takes_its_partitions_offline_and_back(cluster):
    create_topic(cluster.bootstrap(1), "crash", 6)
    wait_until(lambda: -1 not in cluster.leaders(1, "crash").values(), message="leaders")
    before = [(p, f"before-{p}") for p in range(6)]
    clients.confluent_produce(cluster.bootstrap(1), "crash", before)

    cluster.brokers[2].kill()
    for via in (1, 3):
        wait_until(lambda: offline(cluster, via, "crash") == {1, 4},
                   message=f"broker {via} to report partitions 1 and 4 offline")
    cluster.wait_for_brokers([1, 3])
    served = [0, 2, 3, 5]
    during = [(p, f"during-{p}") for p in served]
    clients.confluent_produce(cluster.bootstrap(3), "crash", during)
    assert clients.kcat_consume(cluster.bootstrap(1), "crash", served) == {
        item for item in before + during if item[0] in served}

    cluster.brokers[2].start()
    for via in (1, 2, 3):
        wait_until(lambda: offline(cluster, via, "crash") == set(), message="leaders back")
    assert clients.kafka_python_consume(cluster.bootstrap(3), "crash", [1, 4]) == {
        (1, "before-1"), (4, "before-4")}
    clients.kcat_produce(cluster.bootstrap(1), "crash", 4, ["after-4"])
    assert clients.kcat_consume(cluster.bootstrap(2), "crash", [4]) == {
        (4, "before-4"), (4, "after-4")}


def test_killing_the_controller_hands_control_to_another_broker(cluster):
    controller = wait_until(lambda: cluster.controller(1) if cluster.controller(1) in (1, 2, 3)
                            else None, message="a controller")
    assert {cluster.controller(b) for b in (1, 2, 3)} == {controller}
    cluster.brokers[controller].kill()
    survivors = [b for b in (1, 2, 3) if b != controller]
    for via in survivors:
        wait_until(lambda: cluster.controller(via) in survivors,
                   message=f"broker {via} to report a surviving controller")
    assert len({cluster.controller(b) for b in survivors}) == 1
    create_topic(cluster.bootstrap(survivors[0]), "after", 4)
    wait_until(lambda: sorted(cluster.leaders(survivors[1], "after").values()) == sorted(
        survivors * 2), message="the new controller to elect leaders on live brokers")
    items = [(p, f"after-{p}") for p in range(4)]
    clients.confluent_produce(cluster.bootstrap(survivors[1]), "after", items)
    assert clients.kcat_consume(cluster.bootstrap(survivors[0]), "after", list(range(4))) == set(items)


def test_paused_broker_loses_its_session_and_registers_again(cluster):
    create_topic(cluster.bootstrap(1), "paused", 3)
    wait_until(lambda: cluster.leaders(3, "paused") == {0: 1, 1: 2, 2: 3}, message="leaders")
    clients.kcat_produce(cluster.bootstrap(1), "paused", 1, ["kept"])
    paused = cluster.brokers[2]
    paused.pause()
    try:
        for via in (1, 3):
            wait_until(lambda: offline(cluster, via, "paused") == {1},
                       message="partition 1 offline while its leader is stopped")
    finally:
        paused.resume()
    # From the moment it runs again until it has registered under a new session, the
    # broker must not present itself as leader.
    def leads_again() -> bool:
        leader = cluster.leaders(2, "paused").get(1)
        if leader == 2:
            assert "registered again under a new ZooKeeper session" in paused.log_text()
        return leader == 2

    wait_until(leads_again, message="broker 2 to lead partition 1 again")
    for via in (1, 3):
        wait_until(lambda: cluster.leaders(via, "paused") == {0: 1, 1: 2, 2: 3},
                   message="partition 1 led by broker 2 again")
    assert clients.kcat_consume(cluster.bootstrap(3), "paused", [1]) == {(1, "kept")}


def test_auto_created_topic_is_placed_and_deletion_reaches_every_broker(cluster):
    clients.kcat_produce(cluster.bootstrap(3), "auto", 0, ["first"])
    for via in (1, 2, 3):
        wait_until(lambda: cluster.leaders(via, "auto") == {0: 1, 1: 2, 2: 3},
                   message=f"broker {via} to show the auto-created topic")
    clients.kcat_produce(cluster.bootstrap(3), "auto", 1, ["second"])
    assert any(cluster.brokers[2].log_dir.glob("auto-1"))

    with Admin(cluster.bootstrap(2)) as admin:
        admin.delete_topic("auto")
    for via in (1, 2, 3):
        wait_until(lambda: "auto" not in cluster.metadata(via).topics,
                   message=f"broker {via} to forget the topic")
    wait_until(lambda: not any(cluster.brokers[2].log_dir.glob("auto-*")),
               message="the deleted partition's log removed")

    create_topic(cluster.bootstrap(1), "auto", 2)
    wait_until(lambda: cluster.leaders(3, "auto") == {0: 1, 1: 2}, message="recreated")
    assert clients.kcat_consume(cluster.bootstrap(1), "auto", [0, 1]) == set()


def test_a_broker_with_a_taken_id_is_refused_with_one_line(cluster, tmp_path, zk_connect):
    from pylog.testing.broker import BrokerProcess

    duplicate = BrokerProcess(tmp_path / "duplicate", {
        "broker.id": 2, "zookeeper.connect": zk_connect, "zookeeper.session.timeout.ms": 1000})
    try:
        duplicate.start(timeout=60)  # it binds its port before it reaches ZooKeeper
    except RuntimeError:
        pass
    wait_until(lambda: not duplicate.alive(), message="the duplicate to exit")
    assert duplicate.stop() != 0
    output = duplicate.log_text()
    assert "broker.id 2 is already registered in ZooKeeper" in output
    assert "Traceback" not in output
    assert cluster.leaders(1, "spread") == {} and sorted(cluster.metadata(3).brokers) == [1, 2, 3]


def test_a_replica_assignment_places_partitions_where_it_says(cluster):
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap(1)})
    # confluent-kafka wants the partition count to match the assignment; on the wire it
    # sends -1 for both the count and the replication factor, as Kafka requires.
    admin.create_topics([NewTopic("placed", 2, -1, replica_assignment=[[3, 1], [2, 3]])])[
        "placed"].result(30)

    def replicas() -> dict[int, list[int]]:
        topic = admin.list_topics("placed", timeout=10).topics["placed"]
        return {p: list(m.replicas) for p, m in topic.partitions.items()}

    wait_until(lambda: replicas() == {0: [3, 1], 1: [2, 3]}, message="the given placement")
    for broker_id in (1, 2, 3):  # the first replica leads
        wait_until(lambda: cluster.leaders(broker_id, "placed") == {0: 3, 1: 2},
                   message=f"leaders as broker {broker_id} sees them")
    admin.create_partitions([NewPartitions("placed", 3, replica_assignment=[[1, 2]])])[
        "placed"].result(30)
    wait_until(lambda: replicas() == {0: [3, 1], 1: [2, 3], 2: [1, 2]},
               message="the added partition's placement")
    sent = [(p, f"v-{p}-{i}") for p in range(3) for i in range(5)]
    clients.confluent_produce(cluster.bootstrap(2), "placed", sent)
    assert clients.confluent_consume(cluster.bootstrap(3), "placed", [0, 1, 2],
                                     len(sent)) == set(sent)

    refused = {
        "unknown-broker": NewTopic("unknown-broker", 1, -1, replica_assignment=[[1, 9]]),
        "uneven": NewTopic("uneven", 2, -1, replica_assignment=[[1, 2], [3]]),
        "twice": NewTopic("twice", 1, -1, replica_assignment=[[2, 2]]),
    }
    for name, future in admin.create_topics(list(refused.values())).items():
        with pytest.raises(KafkaException) as error:
            future.result(30)
        assert error.value.args[0].code() == KafkaError.INVALID_REPLICA_ASSIGNMENT, name
    wrong_factor = admin.create_partitions(
        [NewPartitions("placed", 4, replica_assignment=[[1]])])["placed"]
    with pytest.raises(KafkaException) as error:
        wrong_factor.result(30)
    assert error.value.args[0].code() == KafkaError.INVALID_REPLICA_ASSIGNMENT
    assert set(admin.list_topics(timeout=10).topics) & set(refused) == set()


def test_dynamic_broker_configs_reach_every_broker_and_a_brokers_own_wins(cluster):
    """The cluster default written through one broker is watched by all; a broker's own
    value (sent to that broker) overrides it there only; both apply to the running logs."""
    from confluent_kafka import KafkaError, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from pylog.protocol.configs import ConfigSource

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap(1)})
    admin.create_topics([NewTopic("limited", 3, -1, replica_assignment=[[1], [2], [3]])])[
        "limited"].result(30)

    def setting(broker_id: int) -> tuple[str, ConfigSource]:
        with Admin(cluster.bootstrap(1)) as pylog_admin:
            [entry] = pylog_admin.describe_configs("broker", str(broker_id),
                                                   ["message.max.bytes"])
        return entry.value, entry.source

    default = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    with Admin(cluster.bootstrap(3)) as pylog_admin:
        pylog_admin.incremental_alter_configs("broker", "", set_configs={
            "message.max.bytes": "2000"})
        pylog_admin.incremental_alter_configs("broker", "2", set_configs={
            "message.max.bytes": "3000"})
    try:
        for broker_id, expected in ((1, ("2000", default)), (3, ("2000", default)),
                                    (2, ("3000", ConfigSource.DYNAMIC_BROKER_CONFIG))):
            wait_until(lambda: setting(broker_id) == expected,
                       message=f"message.max.bytes of broker {broker_id}")
        producer = Producer({"bootstrap.servers": cluster.bootstrap(1), "linger.ms": 0})
        outcomes = {}
        for partition in (0, 1, 2):  # led by brokers 1, 2 and 3
            producer.produce("limited", b"x" * 2500, partition=partition,
                             on_delivery=lambda err, msg: outcomes.__setitem__(
                                 msg.partition(), err and err.code()))
        assert producer.flush(30) == 0
        too_large = KafkaError.MSG_SIZE_TOO_LARGE
        assert outcomes == {0: too_large, 1: None, 2: too_large}
        # A password would be readable by anyone who can read ZooKeeper: not kept there.
        with Admin(cluster.bootstrap(1)) as pylog_admin, \
                pytest.raises(InvalidRequestError, match="passwords in ZooKeeper"):
            pylog_admin.incremental_alter_configs("broker", "1", set_configs={
                "listener.name.plaintext.ssl.key.password": "hunter2"})
    finally:
        with Admin(cluster.bootstrap(1)) as pylog_admin:
            pylog_admin.incremental_alter_configs("broker", "", delete_configs=[
                "message.max.bytes"])
            pylog_admin.incremental_alter_configs("broker", "2", delete_configs=[
                "message.max.bytes"])
    for broker_id in (1, 2, 3):
        wait_until(lambda: setting(broker_id)[1] == ConfigSource.DEFAULT_CONFIG,
                   message=f"broker {broker_id} back on its file's setting")
