"""A broker's connection to another broker, for the requests brokers send each other
outside replication (transaction markers, transaction verification).

``BrokerLink`` connects on first use over the inter-broker listener with the current
security settings (read at each connect, so a certificate rotated by a dynamic config is
presented on the next one), keeps the connection while it works and drops it on failure,
so the next request connects again. ``broker_address`` finds a registered broker's
endpoint on a listener.
"""

from __future__ import annotations

from typing import Callable

from pylog.client.connection import BrokerConnection
from pylog.cluster.metadata import ClusterMetadata
from pylog.errors import PylogError


def broker_address(metadata: ClusterMetadata, listener: str | None, broker_id: int):
    """The endpoint of broker ``broker_id`` on ``listener`` (its first without one), None
    if it is not registered."""
    for broker in metadata.brokers():
        if broker.broker_id == broker_id:
            return broker.on_listener(listener) if listener else broker
    return None


class BrokerLink:
    """One connection to broker ``broker_id`` (see the module doc); not thread-safe except
    :meth:`close`, which another thread may call to interrupt a request."""

    def __init__(self, broker_id: int, address_of: Callable[[int], object],
                 security_of: Callable[[], object], client_id: str, timeout_s: float) -> None:
        self.broker_id = broker_id
        self.address_of = address_of
        self.security_of = security_of
        self.client_id = client_id
        self.timeout_s = timeout_s
        self._connection: BrokerConnection | None = None

    def connect(self) -> BrokerConnection:
        """The open connection, or a new one; PylogError if the broker is not registered,
        OSError or KafkaError if it cannot be reached."""
        if self._connection is not None and self._connection.connected:
            return self._connection
        endpoint = self.address_of(self.broker_id)
        if endpoint is None:
            raise PylogError(f"broker {self.broker_id} is not registered")
        self._connection = BrokerConnection(endpoint.host, endpoint.port,
                                            client_id=self.client_id, timeout_s=self.timeout_s,
                                            security=self.security_of())
        self._connection.connect()
        return self._connection

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()
