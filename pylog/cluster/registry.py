"""Broker registration: the ephemeral ``/brokers/ids/<id>`` node (layout in ``layout``).

The node lives as long as the broker's ZooKeeper session. After the session expires
the broker registers again under its new session. A node left by a crashed earlier run
of the same broker disappears when that run's session expires, so registration waits up
to one session timeout for it before refusing; a node that outlives that belongs to a
live broker with the same id, and the broker is refused with BrokerIdInUseError.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from pylog.cluster import layout
from pylog.cluster.layout import BrokerRegistration
from pylog.errors import PylogError

log = logging.getLogger(__name__)


class BrokerIdInUseError(PylogError):
    """Another live broker is registered in ZooKeeper with this ``broker.id``."""

    def __init__(self, broker_id: int, holder: str) -> None:
        super().__init__(f"broker.id {broker_id} is already registered in ZooKeeper by "
                         f"another live broker ({holder}); give each broker its own broker.id")
        self.broker_id = broker_id


class BrokerRegistry:
    def __init__(self, client: KazooClient, registration: BrokerRegistration,
                 wall_clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self.registration = registration
        self._wall_clock_ms = wall_clock_ms
        self._clock = clock
        self.path = layout.broker_path(registration.broker_id)

    def is_registered(self) -> bool:
        """True if the node exists and belongs to the current session (one round trip)."""
        stat = self._client.exists(self.path)
        return stat is not None and stat.ephemeralOwner == self._client.client_id[0]

    def register(self, stale_wait: float) -> None:
        """Create the ephemeral node for the current session.

        Waits up to ``stale_wait`` seconds for a node held by another session to go away.
        Raises BrokerIdInUseError if it is still there.
        """
        deadline = self._clock() + stale_wait
        while True:
            session_id = self._client.client_id[0]
            try:
                self._client.create(self.path, self.registration.encode(self._wall_clock_ms()),
                                    ephemeral=True, makepath=True)
                log.info("registered broker %d at %s", self.registration.broker_id, self.path)
                return
            except NodeExistsError:
                pass
            gone = threading.Event()
            try:
                data, stat = self._client.get(self.path)
            except NoNodeError:
                continue
            if stat.ephemeralOwner == session_id:
                return
            if self._client.exists(self.path, watch=lambda event: gone.set()) is None:
                continue
            remaining = deadline - self._clock()
            if remaining <= 0 or not gone.wait(remaining):
                raise BrokerIdInUseError(self.registration.broker_id, _describe(data))


def registered_brokers(client: KazooClient) -> list[BrokerRegistration]:
    """The brokers registered right now, by id (a few direct reads, no watch)."""
    found = []
    for child in sorted(client.get_children(layout.BROKER_IDS), key=int):
        try:
            found.append(BrokerRegistration.decode(int(child), client.get(
                layout.broker_path(int(child)))[0]))
        except NoNodeError:
            continue
    return found


def _describe(data: bytes) -> str:
    try:
        endpoint = BrokerRegistration.decode(-1, data)
        return f"{endpoint.host}:{endpoint.port}"
    except (ValueError, KeyError, TypeError):
        return "unknown address"
