"""A TCP proxy in front of one real broker that counts the requests passing through it.

Brokers advertise the proxy's address (``advertised.listeners``), so every client
connection -- bootstrap and leader connections alike -- goes through a proxy, and a test
can see how many requests of each API a client sent to each broker. Requests are counted
per (API key, client id) from the request header::

    size            int32    bytes that follow
    api_key         int16
    api_version     int16
    correlation_id  int32
    client_id       int16 length, then that many bytes (-1: null)

Responses are copied back unparsed.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections import Counter
from pathlib import Path

from pylog.client.connection import BrokerConnection
from pylog.client.metadata import ClusterSnapshot
from pylog.protocol import ApiKey
from pylog.testing.broker import BrokerProcess, broker_metadata
from pylog.testing.sockets import close_sockets, read_exactly

_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhih")


class CountingProxy:
    """Listens on 127.0.0.1 (a free port unless given) and forwards to ``target_port``."""

    def __init__(self, target_port: int, port: int = 0) -> None:
        self.target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", port))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._counts: Counter[tuple[int, str]] = Counter()
        self._sockets: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, name=f"proxy-{self.port}", daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def count(self, api_key: int, client_id: str) -> int:
        """Requests of ``api_key`` from ``client_id`` since the last :meth:`reset`."""
        with self._lock:
            return self._counts[(int(api_key), client_id)]

    def counts(self, client_id: str) -> dict[int, int]:
        """{api key: requests} from ``client_id`` since the last :meth:`reset`."""
        with self._lock:
            return {key: n for (key, client), n in self._counts.items() if client == client_id}

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=10)
            except OSError:
                client.close()  # the broker is down: the client sees a dead connection
                continue
            upstream.settimeout(None)
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sockets += [client, upstream]
            threading.Thread(target=self._requests, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._responses, args=(upstream, client), daemon=True).start()

    def _requests(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                size_bytes = read_exactly(source, 4)
                payload = read_exactly(source, _SIZE.unpack(size_bytes)[0])
                api_key, _, _, length = _HEADER.unpack_from(payload)
                client_id = payload[10:10 + length].decode() if length >= 0 else ""
                with self._lock:
                    self._counts[(api_key, client_id)] += 1
                sink.sendall(size_bytes + payload)
        except OSError:
            pass
        finally:
            close_sockets(source, sink)

    @staticmethod
    def _responses(source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(1 << 16):
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            close_sockets(source, sink)

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        close_sockets(*sockets)


class ProxiedCluster:
    """Real brokers ``broker_ids`` in ZooKeeper ``zk_connect``, each behind a CountingProxy
    that it advertises, so all client traffic is counted per broker.

    >>> cluster = ProxiedCluster(tmp_path, zk_connect).start()
    >>> cluster.create_topics([f"t{i}" for i in range(20)], partitions=50)
    >>> cluster.requests(ApiKey.LIST_OFFSETS, "planner")    # {broker id: count}
    """

    def __init__(self, base_dir: Path, zk_connect: str, broker_ids=(1, 2, 3),
                 extra: dict[str, object] | None = None) -> None:
        self.brokers: dict[int, BrokerProcess] = {}
        self.proxies: dict[int, CountingProxy] = {}
        for broker_id in broker_ids:
            broker = BrokerProcess(Path(base_dir) / f"broker-{broker_id}", {
                "broker.id": broker_id, "zookeeper.connect": zk_connect,
                "zookeeper.session.timeout.ms": 3000, "num.partitions": 1, **(extra or {})})
            proxy = CountingProxy(broker.port)
            broker.overrides["advertised.listeners"] = f"PLAINTEXT://{proxy.address}"
            self.brokers[broker_id], self.proxies[broker_id] = broker, proxy

    def start(self, timeout: float = 60.0) -> "ProxiedCluster":
        """Start the brokers side by side; return once each lists them all."""
        try:
            for broker in self.brokers.values():
                broker.launch()
            for broker in self.brokers.values():
                broker.wait_listening(timeout)
            expected = sorted(self.brokers)
            for broker_id in self.brokers:
                _wait(lambda: sorted(self.metadata(broker_id).brokers) == expected, timeout,
                      f"broker {broker_id} to list brokers {expected}")
        except BaseException:
            self.close()
            raise
        return self

    @property
    def bootstrap(self) -> str:
        return ",".join(proxy.address for proxy in self.proxies.values())

    def metadata(self, broker_id: int, topics: list[str] | None = None) -> ClusterSnapshot:
        """Metadata as ``broker_id`` answers it, asked past its proxy (not counted)."""
        return broker_metadata(self.brokers[broker_id].port, topics, timeout_s=60)

    def create_topics(self, names: list[str], partitions: int, batch: int = 20,
                      timeout: float = 900.0, replication_factor: int = 1) -> None:
        """Create ``names``, ``batch`` per CreateTopics request to the controller, and wait
        until every partition has a leader and all its replicas in sync."""
        first = next(iter(self.brokers))
        for i in range(0, len(names), batch):
            controller = self.metadata(first, []).controller_id
            connection = BrokerConnection("127.0.0.1", self.brokers[controller].port, timeout_s=timeout)
            try:
                response = connection.request(ApiKey.CREATE_TOPICS, {
                    "topics": [{"name": n, "num_partitions": partitions, "replication_factor": replication_factor,
                                "assignments": [], "configs": []} for n in names[i:i + batch]],
                    "timeout_ms": int(timeout * 1000), "validate_only": False})
            finally:
                connection.close()
            failed = [(t["name"], t["error_message"]) for t in response["topics"] if t["error_code"]]
            assert not failed, failed

        def led() -> bool:
            found = self.metadata(first, names).topics
            return all(n in found and len(found[n].partitions) == partitions
                       and all(p.leader >= 0 and len(p.isr) == replication_factor
                               for p in found[n].partitions.values()) for n in names)

        # Poll gently: a Metadata answer for thousands of partitions costs the broker time.
        _wait(led, timeout, f"leaders for {len(names)} topics", interval=min(0.05 + len(names) / 100, 1.0))

    def requests(self, api_key: int, client_id: str) -> dict[int, int]:
        """{broker id: requests of ``api_key`` from ``client_id``} since the last reset."""
        return {b: proxy.count(api_key, client_id) for b, proxy in self.proxies.items()}

    def reset_counts(self) -> None:
        for proxy in self.proxies.values():
            proxy.reset()

    def close(self) -> None:
        for broker in self.brokers.values():
            broker.stop()
        for proxy in self.proxies.values():
            proxy.close()


def _wait(condition, timeout: float, message: str, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {message}")
        time.sleep(interval)
