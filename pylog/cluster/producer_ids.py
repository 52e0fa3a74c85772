"""Producer ids unique across the cluster, handed out in blocks of 1000.

In cluster mode a broker takes a block by a conditional write of ZooKeeper's
``/latest_producer_id_block`` (Kafka's format, ends inclusive, numbers as strings)::

    {"version": 1, "broker": 2, "block_start": "1000", "block_end": "1999"}

The write names the version read, so two brokers taking a block at once cannot get the
same one: the loser reads again and takes the next. Standalone, the broker keeps the
same JSON in ``producer-id-block`` in its first log dir (temp file, then rename). Either
way a restarted broker takes a fresh block: ids of an unfinished block are skipped,
never reused.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from pylog.log.checkpoint import write_text_atomically

BLOCK_SIZE = 1000
ZK_PATH = "/latest_producer_id_block"
STANDALONE_FILE = "producer-id-block"
_VERSION = 1


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    """Producer ids ``first`` to ``last`` (inclusive), taken by ``broker_id``."""

    broker_id: int
    first: int
    last: int

    def encode(self) -> bytes:
        return json.dumps({"version": _VERSION, "broker": self.broker_id,
                           "block_start": str(self.first), "block_end": str(self.last)}).encode()

    @classmethod
    def decode(cls, data: bytes) -> "ProducerIdBlock":
        value = json.loads(data)
        if value.get("version") != _VERSION:
            raise ValueError(f"unknown producer id block version {value.get('version')!r}")
        return cls(int(value["broker"]), int(value["block_start"]), int(value["block_end"]))

    def following(self, broker_id: int) -> "ProducerIdBlock":
        return ProducerIdBlock(broker_id, self.last + 1, self.last + BLOCK_SIZE)


def _first_block(broker_id: int) -> ProducerIdBlock:
    return ProducerIdBlock(broker_id, 0, BLOCK_SIZE - 1)


def allocate_zk_block(client: KazooClient, broker_id: int) -> ProducerIdBlock:
    """Take the next block through ``/latest_producer_id_block`` (see the module doc)."""
    while True:
        try:
            data, stat = client.get(ZK_PATH)
        except NoNodeError:
            block = _first_block(broker_id)
            try:
                client.create(ZK_PATH, block.encode(), makepath=True)
                return block
            except NodeExistsError:
                continue
        block = ProducerIdBlock.decode(data).following(broker_id) if data else _first_block(broker_id)
        try:
            client.set(ZK_PATH, block.encode(), version=stat.version)
            return block
        except BadVersionError:
            continue  # another broker took one meanwhile


def allocate_file_block(log_dir: Path, broker_id: int) -> ProducerIdBlock:
    """Take the next block of a standalone broker, recorded in ``<log_dir>/producer-id-block``."""
    path = Path(log_dir) / STANDALONE_FILE
    try:
        block = ProducerIdBlock.decode(path.read_bytes()).following(broker_id)
    except FileNotFoundError:
        block = _first_block(broker_id)
    write_text_atomically(path, block.encode().decode())
    return block


class ProducerIdManager:
    """Hands out producer ids from blocks taken with ``allocate`` (one of the functions
    above, bound to its client or directory). Thread-safe.

    Example::

        ids = ProducerIdManager(lambda: allocate_file_block(Path("/data"), 0))
        ids.next_id()    # 0, then 1, ...; a new block after 999
    """

    def __init__(self, allocate: Callable[[], ProducerIdBlock]) -> None:
        self._allocate = allocate
        self._lock = threading.Lock()
        self._block: ProducerIdBlock | None = None
        self._next = 0

    def next_id(self) -> int:
        """The next unused producer id; may take a new block (ZooKeeper or file I/O),
        whose errors propagate."""
        with self._lock:
            if self._block is None or self._next > self._block.last:
                self._block = self._allocate()
                self._next = self._block.first
            producer_id = self._next
            self._next += 1
            return producer_id
