"""StandaloneMetadata: one broker leads everything; topics persist through temp + rename."""

import pytest

from pylog.cluster.standalone import STATE_FILE, StandaloneMetadata
from pylog.errors import (
    InvalidPartitionsError, InvalidReplicationFactorError, InvalidTopicError,
    TopicAlreadyExistsError, UnknownTopicOrPartitionError)
from pylog.types import BrokerEndpoint

ME = BrokerEndpoint(7, "127.0.0.1", 9999)


def test_topics_persist_and_every_partition_is_led_here(tmp_path):
    meta = StandaloneMetadata(tmp_path, ME, "cid")
    changes = []
    meta.add_listener(lambda: changes.append(1))
    meta.create_topic("events", 3, configs={"retention.ms": "1000"})
    meta.create_topic("other", 1)
    meta.delete_topic("other")
    assert len(changes) == 3
    reopened = StandaloneMetadata(tmp_path, ME, "cid")
    assert set(reopened.topics()) == {"events"}
    topic = reopened.topic("events")
    assert topic.num_partitions == 3 and dict(topic.configs) == {"retention.ms": "1000"}
    assert all(s.leader == 7 and s.replicas == (7,) for s in topic.partitions.values())
    assert reopened.brokers() == [ME] and reopened.controller_id() == 7
    assert not list(tmp_path.glob("*.tmp")) and (tmp_path / STATE_FILE).exists()


@pytest.mark.parametrize("args, error", [
    (("bad/name", 1), InvalidTopicError),
    (("t", 0), InvalidPartitionsError),
    (("t", 1, 3), InvalidReplicationFactorError),
])
def test_invalid_creates(tmp_path, args, error):
    with pytest.raises(error):
        StandaloneMetadata(tmp_path, ME, "cid").create_topic(*args)


def test_duplicates_and_unknown_deletes(tmp_path):
    meta = StandaloneMetadata(tmp_path, ME, "cid")
    meta.create_topic("t", 1)
    with pytest.raises(TopicAlreadyExistsError):
        meta.create_topic("t", 2)
    with pytest.raises(UnknownTopicOrPartitionError):
        meta.delete_topic("missing")


def test_topic_ids_are_kept_and_topics_of_an_older_state_get_one(tmp_path):
    import json

    meta = StandaloneMetadata(tmp_path, ME, "cid")
    first = meta.create_topic("events", 2).topic_id
    assert first is not None and meta.create_topic("other", 1).topic_id != first
    meta.add_partitions("events", 3)
    meta.alter_topic_configs("events", lambda current: {"retention.ms": "5"})
    assert meta.topic("events").topic_id == first
    assert StandaloneMetadata(tmp_path, ME, "cid").topic("events").topic_id == first
    # A topics.json written before topics had ids: each gets one at start, kept after.
    state = json.loads((tmp_path / STATE_FILE).read_text())
    for entry in state["topics"].values():
        del entry["topic_id"]
    (tmp_path / STATE_FILE).write_text(json.dumps(state))
    given = StandaloneMetadata(tmp_path, ME, "cid").topic("events").topic_id
    assert given not in (None, first)
    assert StandaloneMetadata(tmp_path, ME, "cid").topic("events").topic_id == given
