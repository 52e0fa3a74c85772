"""ZooKeeper access for the tools that work on the cluster's nodes directly, as Kafka's
ZooKeeper-era tools do (``pylog partitions reassign``, ``pylog leader-election``).

kazoo is imported inside the functions so that ``pylog --help`` does not load it.
"""

from __future__ import annotations

import argparse
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator

from pylog.cluster import layout
from pylog.errors import ConfigError, PylogError

if TYPE_CHECKING:
    from kazoo.client import KazooClient

SESSION_TIMEOUT_S = 10.0
CONNECTION_TIMEOUT_S = 15.0


class ZooKeeperCommandError(PylogError):
    """A ZooKeeper request of an admin tool failed (connection lost, no permission...)."""


def add_zookeeper_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--zookeeper", required=True, metavar="HOST:PORT[,...][/chroot]",
                        help="the cluster's zookeeper.connect")


def check_connect(connect: str) -> None:
    """ConfigError naming --zookeeper unless ``connect`` is ``host:port[,...][/chroot]``."""
    from pylog.cluster.session import split_connect

    try:
        split_connect(connect)
    except ConfigError as exc:
        raise ConfigError("--zookeeper", exc.problem) from None


@contextmanager
def zookeeper_session(connect: str) -> Iterator[KazooClient]:
    """A started kazoo client on ``connect`` (``--zookeeper``), closed after the block.

    Raises ConfigError naming --zookeeper for a malformed connect string,
    ZooKeeperUnavailableError when no server answers, and ZooKeeperCommandError for a
    ZooKeeper request that fails inside the block.
    """
    from kazoo.exceptions import KazooException
    from kazoo.handlers.threading import KazooTimeoutError

    from pylog.cluster.session import close_client, connect_client

    check_connect(connect)
    client = connect_client(connect, SESSION_TIMEOUT_S, CONNECTION_TIMEOUT_S)
    try:
        yield client
    except (KazooException, KazooTimeoutError) as exc:
        detail = f": {exc}" if str(exc) else ""
        raise ZooKeeperCommandError(f"ZooKeeper request failed: {type(exc).__name__}{detail}") \
            from None
    finally:
        close_client(client)


def read_assignment(client: KazooClient, topic: str) -> dict[int, tuple[int, ...]] | None:
    """Partition -> replicas of ``topic`` from ``/brokers/topics/<topic>``; None if absent."""
    from kazoo.exceptions import NoNodeError

    try:
        data, _ = client.get(layout.topic_path(topic))
    except NoNodeError:
        return None
    return layout.decode_assignment(data)


def read_assignments(client: KazooClient, topics: list[str] | None = None,
                     ) -> dict[str, dict[int, tuple[int, ...]]]:
    """Topic -> partition -> replicas of ``topics`` (None: every topic) that exist."""
    if topics is None:
        topics = sorted(children(client, layout.BROKER_TOPICS))
    assignments = {}
    for topic in topics:
        assignment = read_assignment(client, topic)
        if assignment is not None:
            assignments[topic] = assignment
    return assignments


def registered_brokers(client: KazooClient) -> list[int]:
    """Ids of the brokers registered under ``/brokers/ids``, ascending."""
    return sorted(int(child) for child in children(client, layout.BROKER_IDS) if child.isdigit())


def children(client: KazooClient, path: str) -> list[str]:
    """Children of ``path``; none if the node does not exist."""
    from kazoo.exceptions import NoNodeError

    try:
        return client.get_children(path)
    except NoNodeError:
        return []


def read_node(client: KazooClient, path: str) -> bytes | None:
    """The data of ``path``, or None if the node does not exist."""
    from kazoo.exceptions import NoNodeError

    try:
        data, _ = client.get(path)
    except NoNodeError:
        return None
    return data
