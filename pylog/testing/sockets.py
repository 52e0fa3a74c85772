"""Blocking socket helpers shared by the test proxies (counting, cutting)."""

from __future__ import annotations

import socket


def read_exactly(sock: socket.socket, size: int) -> bytes:
    """``size`` bytes from ``sock``; ConnectionResetError if it closes first."""
    buf = bytearray()
    while len(buf) < size:
        chunk = sock.recv(size - len(buf))
        if not chunk:
            raise ConnectionResetError("closed")
        buf += chunk
    return bytes(buf)


def close_sockets(*sockets: socket.socket) -> None:
    """Shut down and close each socket, ignoring ones already gone."""
    for sock in sockets:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()
