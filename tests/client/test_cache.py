"""shared_consumer: one consumer per process and settings, across tasks and threads,
that finds a moved leader by itself.

Two real brokers in a real ZooKeeper, each behind a counting proxy it advertises, so the
tests see the requests the shared consumer sent to each broker.
"""

from __future__ import annotations

import os
import threading
import uuid

import pytest

from pylog.client import SimpleConsumer
from pylog.client import cache
from pylog.client.cache import close_shared_consumers, shared_consumer
from pylog.protocol import ApiKey
from pylog.testing.zookeeper import zookeeper_fixture
from pylog.testing.counting_proxy import ProxiedCluster
from tests.etl.helpers import produce

zookeeper = zookeeper_fixture()

PARTITIONS = 4
RECORDS = 40  # record n to partition n % 4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    local = ProxiedCluster(tmp_path_factory.mktemp("brokers"),
                           f"{zookeeper.connect_string}/cache-{uuid.uuid4().hex[:8]}", broker_ids=(1, 2),
                           extra={"replica.fetch.wait.max.ms": 100}).start()
    try:
        local.create_topics(["shared"], PARTITIONS, replication_factor=2)
        produce(local.bootstrap, "shared", [f"v{n}".encode() for n in range(RECORDS)], PARTITIONS)
        yield local
    finally:
        local.close()


@pytest.fixture(autouse=True)
def fresh_cache():
    close_shared_consumers()
    yield
    close_shared_consumers()


def values(consumer, partition: int) -> list[bytes]:
    return [r.value for r in consumer.fetch("shared", partition, 0, max_wait_ms=0).records]


def expected(partition: int) -> list[bytes]:
    return [f"v{n}".encode() for n in range(partition, RECORDS, PARTITIONS)]


def test_tasks_share_connections_and_metadata(cluster):
    cluster.reset_counts()
    for task in range(12):
        consumer = shared_consumer(cluster.bootstrap, client_id="tasks", request_timeout_ms=10000)
        try:
            assert values(consumer, task % PARTITIONS) == expected(task % PARTITIONS)
        finally:
            consumer.close()  # a no-op for the shared consumer
    assert sum(cluster.requests(ApiKey.METADATA, "tasks").values()) == 1
    assert cluster.requests(ApiKey.API_VERSIONS, "tasks") == {1: 1, 2: 1}
    assert sum(cluster.requests(ApiKey.FETCH, "tasks").values()) == 12

    # Same servers (any spelling of the list) and settings: the same consumer.
    one = shared_consumer(cluster.bootstrap.split(","), request_timeout_ms=10000, client_id="tasks")
    assert one._consumer is consumer._consumer
    # Other settings: another consumer.
    other = shared_consumer(cluster.bootstrap, client_id="tasks", isolation_level="read_committed")
    assert other._consumer is not consumer._consumer


def test_threads_read_through_one_shared_consumer(cluster):
    cluster.reset_counts()
    results: dict[int, list] = {}
    errors: list[BaseException] = []

    def task(index: int) -> None:
        try:
            with shared_consumer(cluster.bootstrap, client_id="threads") as consumer:
                for _ in range(5):
                    results.setdefault(index, []).append(values(consumer, index % PARTITIONS))
        except BaseException as exc:  # noqa: BLE001 -- reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=task, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert all(got == [expected(i % PARTITIONS)] * 5 for i, got in results.items()) and len(results) == 8
    assert cluster.requests(ApiKey.API_VERSIONS, "threads") == {1: 1, 2: 1}
    assert sum(cluster.requests(ApiKey.FETCH, "threads").values()) == 40


def test_a_forked_child_starts_with_an_empty_cache(cluster):
    parent = shared_consumer(cluster.bootstrap, client_id="fork")
    assert values(parent, 0) == expected(0)
    pid = os.fork()
    if pid == 0:  # the child: no consumer of the parent's, and a working one of its own
        try:
            ok = not cache._consumers and values(shared_consumer(cluster.bootstrap, client_id="fork"), 1) == expected(1)
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert values(parent, 2) == expected(2)  # the parent's connections still work


def test_the_shared_consumer_follows_a_leader_that_moved(cluster):
    """The leader of partition 0 is SIGKILLed, another replica takes over, the old leader
    comes back as a follower: the cached metadata still names it, it answers
    NOT_LEADER_OR_FOLLOWER, and the shared consumer re-resolves the leader."""
    consumer = shared_consumer(cluster.bootstrap, client_id="moves", request_timeout_ms=5000,
                               retry_backoff_ms=200)
    assert values(consumer, 0) == expected(0)
    old = consumer.leader_for("shared", 0).broker_id
    other = 3 - old
    cluster.brokers[old].kill()
    wait = _poll(lambda: cluster.metadata(other, ["shared"]).topics["shared"].partitions[0].leader == other)
    assert wait, "no new leader for partition 0"
    cluster.brokers[old].start()
    assert _poll(lambda: set(cluster.metadata(old).brokers) == {1, 2}), "old leader not back"

    cluster.reset_counts()
    assert values(consumer, 0) == expected(0)
    assert consumer.leader_for("shared", 0).broker_id == other
    assert cluster.requests(ApiKey.FETCH, "moves")[old] >= 1  # asked the old leader first
    assert sum(cluster.requests(ApiKey.METADATA, "moves").values()) >= 1

    with SimpleConsumer(cluster.bootstrap) as fresh:  # what a new consumer would read
        assert values(fresh, 0) == expected(0)


def _poll(condition, timeout: float = 30.0) -> bool:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return True
        except Exception:  # noqa: BLE001 -- a broker still starting
            pass
        time.sleep(0.1)
    return False
