"""A cluster of real broker processes (``pylog broker``) on loopback for cluster tests."""

from __future__ import annotations

from pathlib import Path

from pylog.client.metadata import ClusterSnapshot
from pylog.testing.broker import BrokerProcess, broker_metadata  # noqa: F401 -- re-exported
from tests.cluster.conftest import wait_until

BROKER_SESSION_TIMEOUT_MS = 3000


class LocalCluster:
    """Brokers ``broker_ids`` (BrokerProcess children) registered in ``zk_connect``.

    A broker keeps its port and log dir across restarts, so a restarted broker serves the
    data it had.
    """

    def __init__(self, base_dir: Path, zk_connect: str, broker_ids=(1, 2, 3),
                 session_timeout_ms: int = BROKER_SESSION_TIMEOUT_MS,
                 extra: dict[str, object] | None = None) -> None:
        self.brokers = {broker_id: BrokerProcess(Path(base_dir) / f"broker-{broker_id}", {
            "broker.id": broker_id, "zookeeper.connect": zk_connect,
            "zookeeper.session.timeout.ms": session_timeout_ms, "num.partitions": 3,
            **(extra or {})}) for broker_id in broker_ids}
        self.ports = {broker_id: broker.port for broker_id, broker in self.brokers.items()}

    def start(self) -> "LocalCluster":
        """Start every broker side by side and wait until each lists them all."""
        try:
            for broker in self.brokers.values():
                broker.launch()
            for broker in self.brokers.values():
                broker.wait_listening()
            self.wait_for_brokers(sorted(self.brokers))
        except BaseException:
            self.close()
            raise
        return self

    def move(self, broker_id: int) -> None:
        """Crash a broker and start it again with the same id and logs on a new port."""
        old = self.brokers[broker_id]
        old.kill()
        overrides = {k: v for k, v in old.overrides.items() if k != "listeners"}
        self.brokers[broker_id] = BrokerProcess(old.base_dir, overrides).start()
        self.ports[broker_id] = self.brokers[broker_id].port

    def bootstrap(self, *broker_ids: int) -> str:
        return ",".join(self.brokers[b].bootstrap for b in (broker_ids or self.brokers))

    def metadata(self, broker_id: int, topics: list[str] | None = None) -> ClusterSnapshot:
        return broker_metadata(self.ports[broker_id], topics)

    def live(self) -> list[int]:
        return [b for b, broker in self.brokers.items() if broker.alive()]

    def wait_for_brokers(self, expected: list[int], via: list[int] | None = None) -> None:
        """Until every broker in ``via`` (default: all running) lists exactly ``expected``."""
        for broker_id in via or self.live():
            wait_until(lambda: sorted(self.metadata(broker_id).brokers) == expected,
                       timeout=60, message=f"broker {broker_id} to list brokers {expected}")

    def leaders(self, broker_id: int, topic: str) -> dict[int, int]:
        found = self.metadata(broker_id, [topic]).topics.get(topic)
        return {} if found is None else {p: m.leader for p, m in found.partitions.items()}

    def controller(self, broker_id: int) -> int:
        return self.metadata(broker_id).controller_id

    def close(self) -> None:
        for broker in self.brokers.values():
            broker.resume()
            broker.stop()
