"""Writing a topic's config overrides at ``/config/topics/<topic>`` (Kafka's node)::

    {"version": 1, "config": {"cleanup.policy": "compact", "segment.ms": "100"}}

The node is the one place a topic's overrides live in cluster mode: CreateTopics writes it
with the assignment, AlterConfigs and IncrementalAlterConfigs rewrite it here. Every broker
watches it (``ClusterView``), so a change reaches leaders and followers alike without
Kafka's ``/config/changes`` sequence nodes.

A change is a read, then a write conditional on the node's version and on the topic's
assignment node still existing, so two brokers altering the same topic at once cannot lose
either change and a deleted topic does not get its config node back.
"""

from __future__ import annotations

import logging
from typing import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError

from pylog.cluster import layout
from pylog.errors import RequestTimedOutError, UnknownTopicOrPartitionError

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 10


def alter_topic_config(client: KazooClient, topic: str,
                       alter: Callable[[dict[str, str]], dict[str, str]]) -> dict[str, str]:
    """Replace the overrides of ``topic`` with ``alter(current)``; returns what was written.

    Raises UnknownTopicOrPartitionError if the topic does not exist, RequestTimedOutError
    after losing the race to other writers ``MAX_ATTEMPTS`` times, kazoo errors when
    ZooKeeper fails, and whatever ``alter`` raises (then nothing is written).
    """
    config_path = layout.topic_config_path(topic)
    for _ in range(MAX_ATTEMPTS):
        try:
            _, topic_stat = client.get(layout.topic_path(topic))
        except NoNodeError:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist") from None
        current, version = _read(client, config_path, topic)
        configs = dict(alter(dict(current)))
        txn = client.transaction()
        txn.check(layout.topic_path(topic), topic_stat.version)
        if version is None:
            txn.create(config_path, layout.encode_topic_config(configs))
        else:
            txn.set_data(config_path, layout.encode_topic_config(configs), version)
        results = txn.commit()
        failures = [r for r in results if isinstance(r, Exception)
                    and not isinstance(r, RolledBackError)]
        if not failures:
            return configs
        if isinstance(failures[0], (BadVersionError, NodeExistsError)):
            continue  # someone else wrote meanwhile: read again
        if isinstance(failures[0], NoNodeError):
            raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
        raise failures[0]
    raise RequestTimedOutError(f"the configs of topic {topic!r} kept changing meanwhile; "
                               "try again")


def _read(client: KazooClient, path: str, topic: str) -> tuple[dict[str, str], int | None]:
    """The current overrides and the node's version (None: no node yet)."""
    try:
        data, stat = client.get(path)
    except NoNodeError:
        return {}, None
    try:
        return (layout.decode_topic_config(data) if data else {}), stat.version
    except (ValueError, AttributeError):
        # Nothing could read it anyway; the alteration replaces it with a readable node.
        log.warning("replacing the unreadable config node of topic %s", topic)
        return {}, stat.version
