"""Small frozen value types that pass between layers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


class TopicPartition(NamedTuple):
    """A partition of a topic. A named tuple, not a dataclass: the broker builds and
    hashes one per partition of every request, and a tuple does both in C."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True, slots=True)
class ListenerEndpoint:
    """One listener of a broker as others reach it: its name (``CLIENT``), the advertised
    host and port, and its security protocol (one of ``SECURITY_PROTOCOLS``)."""

    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    """A broker as clients see it: id, one host and port, rack, and every listener.

    ``host``/``port`` are one listener's address (a client-side endpoint learnt from
    Metadata has no ``listeners``; a broker's own has them all). ``on_listener(name)``
    gives the same broker at the address of another of its listeners.
    """

    broker_id: int
    host: str
    port: int
    rack: str | None = None
    listeners: tuple[ListenerEndpoint, ...] = ()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def listener(self, name: str) -> ListenerEndpoint | None:
        return next((ep for ep in self.listeners if ep.name == name), None)

    def on_listener(self, name: str) -> "BrokerEndpoint | None":
        """This broker at the address of listener ``name``; None if it has no such
        listener. An endpoint that lists no listeners is returned unchanged."""
        if not self.listeners:
            return self
        found = self.listener(name)
        if found is None:
            return None
        return BrokerEndpoint(self.broker_id, found.host, found.port, self.rack, self.listeners)
