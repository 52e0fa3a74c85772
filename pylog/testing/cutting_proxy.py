"""A TCP proxy in front of one broker that makes producers retry batches the broker
already wrote: once ``cut_after`` bytes of Produce requests have passed on a connection,
it forwards the next Produce request, swallows the broker's answer and closes the
connection. Frames are read whole (``int32`` size, then the request header)::

    size            int32
    api_key         int16
    api_version     int16
    correlation_id  int32    the response starts with it (after its own size)

The broker must advertise the proxy's address, so clients keep coming back through it.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from pathlib import Path
from typing import Iterator

from pylog.protocol import ApiKey
from pylog.testing.broker import BrokerProcess
from pylog.testing.process import free_port
from pylog.testing.sockets import close_sockets, read_exactly

_SIZE = struct.Struct(">i")
_REQUEST_HEADER = struct.Struct(">hhi")


class CuttingProxy:
    """Forwards whole requests to the broker; once ``cut_after`` bytes of Produce requests
    have passed on a connection, it forwards the next Produce, swallows its response (the
    broker has written the batch) and closes the connection, ``cuts`` times in all."""

    def __init__(self, port: int, target_port: int, cut_after: int = 20_000, cuts: int = 6) -> None:
        self.target_port = target_port
        self.cut_after = cut_after
        self.cuts_left = cuts
        self.cuts_done = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", port))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            broker = socket.create_connection(("127.0.0.1", self.target_port))
            state = {"produced": 0, "doomed": None}
            threading.Thread(target=self._requests, args=(client, broker, state), daemon=True).start()
            threading.Thread(target=self._responses, args=(broker, client, state), daemon=True).start()

    def _requests(self, client: socket.socket, broker: socket.socket, state: dict) -> None:
        try:
            while True:
                frame = _read_frame(client)
                api_key, _, correlation_id = _REQUEST_HEADER.unpack_from(frame, 4)
                if api_key == ApiKey.PRODUCE and state["doomed"] is None:
                    state["produced"] += len(frame)
                    if state["produced"] >= self.cut_after and self._take_cut():
                        state["doomed"] = correlation_id
                broker.sendall(frame)
        except OSError:
            close_sockets(client, broker)

    def _responses(self, broker: socket.socket, client: socket.socket, state: dict) -> None:
        try:
            while True:
                frame = _read_frame(broker)
                if _SIZE.unpack_from(frame, 4)[0] == state["doomed"]:
                    break  # written by the broker, never acknowledged: the client must retry
                client.sendall(frame)
        except OSError:
            pass
        close_sockets(client, broker)

    def _take_cut(self) -> bool:
        with self._lock:
            if self.cuts_left == 0:
                return False
            self.cuts_left -= 1
            self.cuts_done += 1
            return True

    def rearm(self, cuts: int) -> None:
        with self._lock:
            self.cuts_left, self.cuts_done = cuts, 0

    def close(self) -> None:
        self._listener.close()


def _read_frame(sock: socket.socket) -> bytes:
    head = read_exactly(sock, 4)
    return head + read_exactly(sock, _SIZE.unpack(head)[0])


@contextlib.contextmanager
def proxied_broker(base_dir: Path, cuts: int = 6) -> Iterator[tuple[BrokerProcess, CuttingProxy]]:
    """A one-partition broker that advertises a CuttingProxy in front of it, so clients
    reach it only through the proxy: ``(broker, proxy)``."""
    proxy_port = free_port("127.0.0.1")
    broker = BrokerProcess(base_dir, {
        "num.partitions": 1, "advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy_port}"})
    broker.start()
    proxy = CuttingProxy(proxy_port, broker.port, cuts=cuts)
    try:
        yield broker, proxy
    finally:
        proxy.close()
        broker.stop()
