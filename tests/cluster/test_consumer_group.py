"""Range assignment, subscription JSON and the group's ZooKeeper nodes (real ZooKeeper)."""

import json

import pytest
from hypothesis import given, strategies as st

from pylog.cluster.consumer_group import GroupStore, Subscription, range_assign
from pylog.cluster.session import close_client, connect_client
from pylog.types import TopicPartition


def test_range_assignment_gives_contiguous_ranges_with_the_extras_first():
    owned = range_assign({"t": [4, 0, 3, 1, 2], "u": [0]}, {"t": ["c2", "c1"], "u": ["c2"]})
    assert owned == {"c1": [TopicPartition("t", p) for p in (0, 1, 2)],
                     "c2": [TopicPartition("t", 3), TopicPartition("t", 4),
                            TopicPartition("u", 0)]}


def test_more_consumers_than_partitions_leaves_the_last_ones_idle():
    owned = range_assign({"t": [0, 1]}, {"t": ["a", "b", "c"]})
    assert owned == {"a": [TopicPartition("t", 0)], "b": [TopicPartition("t", 1)]}


@given(st.integers(0, 30), st.sets(st.text("abcdef", min_size=1, max_size=4), min_size=1,
                                    max_size=6))
def test_every_partition_has_exactly_one_owner(partitions, consumers):
    owned = range_assign({"t": range(partitions)}, {"t": consumers})
    flat = [tp.partition for tps in owned.values() for tp in tps]
    assert sorted(flat) == list(range(partitions))
    sizes = [len(owned.get(c, [])) for c in sorted(consumers)]
    assert sizes == sorted(sizes, reverse=True) and max(sizes) - min(sizes) <= 1


def test_subscription_json_in_the_seed_format():
    static = json.loads(Subscription(topics=("b", "a")).encode(now_ms=5))
    assert static == {"version": 1, "subscription": {"b": 1, "a": 1}, "pattern": "static",
                      "timestamp": "5"}
    whitelist = Subscription(pattern=r"events\..*")
    assert json.loads(whitelist.encode(now_ms=5))["pattern"] == "white_list"
    assert Subscription.decode(whitelist.encode(now_ms=5)) == whitelist
    assert whitelist.matches("events.clicks") and not whitelist.matches("other")
    assert Subscription.decode(Subscription(topics=("a", "b")).encode(1)).topics == ("a", "b")


@pytest.fixture
def two_clients(zk_connect):
    clients = [connect_client(zk_connect, 5.0, 10.0) for _ in range(2)]
    yield clients
    for client in clients:
        close_client(client)


def test_ownership_is_exclusive_until_released(two_clients):
    first, second = (GroupStore(client, "g") for client in two_clients)
    first.ensure_paths()
    tp = TopicPartition("t", 3)
    assert first.claim(tp, "c1")
    assert first.claim(tp, "c1")
    assert not second.claim(tp, "c2")
    second.release(tp, "c2")
    assert first.owner(tp) == "c1"
    first.release(tp, "c1")
    assert second.claim(tp, "c2")


def test_owner_nodes_vanish_with_the_session(two_clients, zk_connect):
    first, second = (GroupStore(client, "g") for client in two_clients)
    first.ensure_paths()
    first.register("c1", Subscription(topics=("t",)), now_ms=1)
    assert first.claim(TopicPartition("t", 0), "c1")
    assert set(second.members()) == {"c1"}
    close_client(two_clients[0])
    assert second.members() == {}
    assert second.claim(TopicPartition("t", 0), "c2")


def test_offsets_are_committed_only_for_owned_partitions(two_clients, zk_connect):
    store = GroupStore(two_clients[0], "g")
    store.ensure_paths()
    mine, theirs = TopicPartition("t", 0), TopicPartition("t", 1)
    store.claim(mine, "c1")
    GroupStore(two_clients[1], "g").claim(theirs, "c2")
    store.commit({mine: 42, theirs: 7}, "c1", owns=lambda tp: True)
    store.commit({mine: 43}, "c1", owns=lambda tp: True)
    assert store.committed(mine) == 43
    assert store.committed(theirs) is None
    assert two_clients[1].get("/consumers/g/offsets/t/0")[0] == b"43"


@pytest.mark.parametrize("kwargs, key", [
    ({"topics": ["a"], "topic_pattern": "a.*"}, "topics"),
    ({}, "topics"),
    ({"topic_pattern": "(unclosed"}, "topic_pattern"),
    ({"topics": ["a"], "auto_offset_reset": "smallest"}, "auto_offset_reset"),
])
def test_consumer_configuration_mistakes_name_the_parameter(kwargs, key, zk_connect):
    from pylog.client.zk_consumer import ZkConsumer
    from pylog.errors import ConfigError

    with pytest.raises(ConfigError) as raised:
        ZkConsumer(zk_connect, "g", **kwargs)
    assert raised.value.key == key
