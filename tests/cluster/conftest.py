"""Fixtures for cluster tests: one real ZooKeeper per module, a fresh chroot per test."""

from __future__ import annotations


import pytest

from pylog.cluster.zk import ZkClusterMetadata
from pylog.testing.waiting import wait_until  # noqa: F401 (the tests import it from here)
from pylog.testing.zookeeper import zk_chroot_fixture, zookeeper_fixture

zookeeper = zookeeper_fixture()
zk_connect = zk_chroot_fixture()

# Short sessions so expiry-driven behaviour shows within a couple of seconds.
SESSION_TIMEOUT_MS = 3000


@pytest.fixture
def start_broker(zk_connect):
    """``start_broker(broker_id, **kw)`` -> a ZkClusterMetadata, closed after the test."""
    started: list[ZkClusterMetadata] = []

    def start(broker_id: int, port: int | None = None, **kwargs) -> ZkClusterMetadata:
        kwargs.setdefault("session_timeout_ms", SESSION_TIMEOUT_MS)
        kwargs.setdefault("admin_timeout", 15.0)
        metadata = ZkClusterMetadata(kwargs.pop("connect", zk_connect), broker_id, "127.0.0.1",
                                     port or 9000 + broker_id, **kwargs)
        started.append(metadata)
        return metadata

    yield start
    for metadata in started:
        metadata.close()


@pytest.fixture
def zk_client(zk_connect):
    """A plain kazoo client on the test's chroot, for looking at what brokers wrote."""
    from pylog.cluster.session import close_client, connect_client

    client = connect_client(zk_connect, session_timeout=5.0, connection_timeout=10.0)
    yield client
    close_client(client)


@pytest.fixture
def zk_client_for():
    """``zk_client_for(connect)`` -> a plain kazoo client on that chroot, closed after."""
    from pylog.cluster.session import close_client, connect_client

    opened = []

    def open_client(connect: str):
        client = connect_client(connect, session_timeout=5.0, connection_timeout=10.0)
        opened.append(client)
        return client

    yield open_client
    for client in opened:
        close_client(client)
