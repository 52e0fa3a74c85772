"""A minimal blocking Kafka-protocol connection for tests, built on pylog.protocol."""

from __future__ import annotations

import socket
import struct
import time

from pylog.protocol import decode_response, encode_request
from pylog.records import build_batch


class WireClient:
    def __init__(self, bootstrap: str, timeout: float = 30.0, source: str | None = None) -> None:
        """``source``: the local address to connect from (``127.0.0.2``...)."""
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout,
                                             source_address=(source, 0) if source else None)
        self.correlation_id = 0

    def send(self, api_key: int, version: int, body: dict) -> int:
        self.correlation_id += 1
        self.sock.sendall(encode_request(api_key, version, self.correlation_id, "wire-test", body))
        return self.correlation_id

    def send_raw(self, frame: bytes) -> None:
        self.sock.sendall(frame)

    def read_frame(self) -> bytes:
        size = struct.unpack(">i", self._exactly(4))[0]
        return self._exactly(size)

    def receive(self, api_key: int, version: int) -> tuple[int, dict]:
        return decode_response(api_key, version, self.read_frame())

    def call(self, api_key: int, version: int, body: dict) -> dict:
        sent = self.send(api_key, version, body)
        correlation_id, response = self.receive(api_key, version)
        assert correlation_id == sent
        return response

    def is_closed_by_peer(self) -> bool:
        """True once the broker has closed this connection (EOF or reset)."""
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True

    def _exactly(self, n: int) -> bytes:
        chunks, got = [], 0
        while got < n:
            chunk = self.sock.recv(n - got)
            if not chunk:
                raise ConnectionError("broker closed the connection")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "WireClient":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def batch(values: list[bytes], timestamp: int | None = None, key: bytes | None = None) -> bytes:
    ts = int(time.time() * 1000) if timestamp is None else timestamp
    return build_batch([(key, v, (), ts) for v in values])


def produce_body(topic: str, partitions: dict[int, bytes | None], acks: int = 1) -> dict:
    return {"transactional_id": None, "acks": acks, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": p, "records": r}
                                           for p, r in partitions.items()]}]}


def fetch_body(topic: str, offsets: dict[int, int], max_wait_ms: int = 0, min_bytes: int = 1,
               max_bytes: int = 50 << 20, partition_max_bytes: int = 1 << 20) -> dict:
    return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes,
            "max_bytes": max_bytes, "isolation_level": 0, "session_id": 0,
            "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
                {"partition": p, "fetch_offset": o, "partition_max_bytes": partition_max_bytes,
                 "current_leader_epoch": -1, "log_start_offset": -1}
                for p, o in offsets.items()]}], "forgotten_topics_data": [], "rack_id": ""}


def create_body(name: str, partitions: int = 1, configs: dict | None = None) -> dict:
    return {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                        "assignments": [], "configs": [{"name": k, "value": v}
                                                       for k, v in (configs or {}).items()]}],
            "timeout_ms": 5000, "validate_only": False}
