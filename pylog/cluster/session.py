"""A kazoo client for ``zookeeper.connect``, chroot included.

``zookeeper.connect`` is Kafka's ``host:port[,host:port...][/chroot]``. The chroot node is
created on first connect (as Kafka brokers do), through a short-lived client without the
chroot, because a chrooted client cannot create its own root.
"""

from __future__ import annotations

import logging

from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from pylog.errors import ConfigError, PylogError

log = logging.getLogger(__name__)


class ZooKeeperUnavailableError(PylogError):
    """No ZooKeeper server in ``zookeeper.connect`` could be reached in time."""


def split_connect(connect: str) -> tuple[str, str]:
    """``"h1:1,h2:2/kafka"`` -> ``("h1:1,h2:2", "/kafka")``; the chroot may be ``""``.

    Raises ConfigError (key ``zookeeper.connect``) for an empty host list.
    """
    hosts, slash, chroot = connect.strip().partition("/")
    if not hosts or any(not host.strip() for host in hosts.split(",")):
        raise ConfigError("zookeeper.connect", f"expected host:port[,host:port...][/chroot], "
                                               f"got {connect!r}")
    chroot = ("/" + chroot.strip("/")) if slash and chroot.strip("/") else ""
    return hosts, chroot


def _start(client: KazooClient, hosts: str, timeout: float) -> None:
    try:
        client.start(timeout=timeout)
    except KazooTimeoutError:
        client.close()
        raise ZooKeeperUnavailableError(
            f"could not connect to ZooKeeper at {hosts} within {timeout:.0f}s "
            "(zookeeper.connect)") from None


def connect_client(connect: str, session_timeout: float, connection_timeout: float,
                   ) -> KazooClient:
    """A started KazooClient rooted at the chroot of ``connect``.

    ``session_timeout`` is what the client asks for (the server clamps it to its bounds).
    Raises ZooKeeperUnavailableError if no server answers within ``connection_timeout``.
    """
    hosts, chroot = split_connect(connect)
    retry = {"max_tries": -1, "delay": 0.05, "backoff": 2, "max_delay": 1.0, "max_jitter": 0.2}
    if chroot:
        bootstrap = KazooClient(hosts=hosts, timeout=session_timeout, connection_retry=retry)
        _start(bootstrap, hosts, connection_timeout)
        try:
            bootstrap.ensure_path(chroot)
        finally:
            bootstrap.stop()
            bootstrap.close()
    client = KazooClient(hosts=hosts + chroot, timeout=session_timeout, connection_retry=retry,
                         command_retry={"max_tries": 3, "delay": 0.05, "max_delay": 0.5})
    _start(client, hosts, connection_timeout)
    return client


def close_client(client: KazooClient) -> None:
    """Stop and close, ignoring a client that is already stopped."""
    try:
        client.stop()
    finally:
        client.close()
