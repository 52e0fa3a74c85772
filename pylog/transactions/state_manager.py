"""The transactional ids of the ``__transaction_state`` partitions this broker leads:
loading them, writing their changes, and finding the ones to time out or expire.

Every broker is a transaction coordinator, as in Kafka. The coordinator of a
transactional id is the leader of partition ``abs(java hash) % N``. When this broker
becomes leader of such a partition (or at start, standalone) it reads the partition
back; the last value of each id wins and a tombstone removes it. Requests for those ids
get COORDINATOR_LOAD_IN_PROGRESS meanwhile. When leadership moves away the ids are
dropped (NOT_COORDINATOR). The partition's leader epoch is the coordinator epoch that
the markers carry.

A change is written with ``persist`` and applied to the in-memory state only once the
in-sync replicas have it; its callback runs then, with the lock held. One lock guards
all state: handlers hold it for microseconds.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from pylog.broker.partitions import AppendWaiters, PartitionLogs
from pylog.cluster.metadata import ClusterMetadata
from pylog.coordinator.internal_topic import AppendQueue
from pylog.coordinator.records import partition_for
from pylog.errors import KafkaError
from pylog.transactions.codes import (
    COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, coordinator_error)
from pylog.transactions.metadata import Transition, TxnMetadata
from pylog.transactions.records import (
    TxnState, decode_key, decode_value, encode_key, encode_value)
from pylog.transactions.store import TransactionLogStore, txn_tp

log = logging.getLogger(__name__)

# The callback of a write: the error code (0 once replicated), called with the lock held.
OnWritten = Callable[[int], None]


class TransactionStateManager:
    """Transactional ids of this broker's ``__transaction_state`` partitions."""

    def __init__(self, config, metadata: ClusterMetadata, logs: PartitionLogs,
                 waiters: AppendWaiters, clock: Callable[[], float] = time.monotonic,
                 wall_ms: Callable[[], int] | None = None) -> None:
        self.config = config
        self.clock = clock
        self.wall_ms = wall_ms or (lambda: int(time.time() * 1000))
        self.store = TransactionLogStore(logs, metadata, config, clock)
        self.lock = threading.RLock()
        self.appends = AppendQueue(self.store, waiters, self.lock, clock, coordinator_error)
        self.txns: dict[str, TxnMetadata] = {}
        self._loaded: dict[int, int] = {}  # partition -> the leader epoch it was loaded in
        self._loading: set[int] = set()
        self.kick: Callable[[], None] = lambda: None

    # -- who coordinates what -----------------------------------------------------------

    def num_partitions(self) -> int:
        return (self.store.num_partitions()
                or self.config["transaction.state.log.num.partitions"])

    def partition_of(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions())

    def coordinator_of(self, transactional_id: str):
        """The live broker leading the id's partition (creating the topic on first
        use), or None."""
        if not self.store.ensure_topic():
            return None
        self.kick()
        return self.store.leader_of(self.partition_of(transactional_id))

    def lookup(self, transactional_id: str) -> tuple[TxnMetadata | None, int, int]:
        """(the id's state or None, the coordinator epoch, 0), or (None, -1, the error
        saying why this broker cannot answer for it). Call with the lock held."""
        if self.store.num_partitions() is None:
            return None, -1, COORDINATOR_NOT_AVAILABLE
        partition = self.partition_of(transactional_id)
        if partition in self._loading:
            return None, -1, COORDINATOR_LOAD_IN_PROGRESS
        epoch = self._loaded.get(partition)
        if epoch is None:
            if partition in self.store.led_partitions():
                self.kick()
                return None, -1, COORDINATOR_LOAD_IN_PROGRESS
            return None, -1, NOT_COORDINATOR
        return self.txns.get(transactional_id), epoch, 0

    def coordinator_epoch(self, transactional_id: str) -> int | None:
        """The epoch the id's partition is loaded in, None if it is not."""
        return self._loaded.get(self.partition_of(transactional_id))

    def owned(self) -> list[TxnMetadata]:
        return [m for m in self.txns.values()
                if self.partition_of(m.transactional_id) in self._loaded]

    def loading(self) -> bool:
        return bool(self._loading)

    # -- loading and unloading ------------------------------------------------------------

    def follow_leadership(self, on_loaded: Callable[[int, int, list[TxnMetadata]], None],
                          on_unloaded: Callable[[int], None]) -> None:
        """Load newly led partitions and drop lost ones; ``on_loaded(partition, epoch,
        ids)`` and ``on_unloaded(partition)`` run with the lock held."""
        led = self.store.led_partitions()
        with self.lock:
            for partition in [p for p, e in self._loaded.items() if led.get(p) != e]:
                self._unload(partition)
                on_unloaded(partition)
            todo = [(p, e) for p, e in led.items() if p not in self._loaded]
            self._loading.update(p for p, _ in todo)
        for partition, epoch in todo:
            try:
                loaded = self._read(partition)
                with self.lock:
                    for txn in loaded:
                        self.txns[txn.transactional_id] = txn
                    self._loaded[partition] = epoch
                    on_loaded(partition, epoch, loaded)
            except Exception:  # noqa: BLE001 -- leave it unloaded; the next round retries
                log.exception("loading transactional ids of %s failed", txn_tp(partition))
            finally:
                with self.lock:
                    self._loading.discard(partition)

    def _read(self, partition: int) -> list[TxnMetadata]:
        started = self.clock()
        values = {}
        count = 0
        for record in self.store.read_partition(partition):
            count += 1
            if record.key is None:
                continue
            try:
                transactional_id = decode_key(record.key)
                values[transactional_id] = (None if record.value is None
                                            else decode_value(record.value))
            except KafkaError as error:
                log.warning("%s offset %d: skipping a record that does not decode: %s",
                            txn_tp(partition), record.offset, error)
        loaded = [TxnMetadata.restore(t, v) for t, v in values.items()
                  if v is not None and v.state is not TxnState.DEAD]
        log.info("loaded %s: %d records, %d transactional ids, in %.3f s", txn_tp(partition),
                 count, len(loaded), self.clock() - started)
        return loaded

    def _unload(self, partition: int) -> None:
        for transactional_id in [t for t in self.txns if self.partition_of(t) == partition]:
            del self.txns[transactional_id]
        self._loaded.pop(partition, None)
        self.appends.wake(partition)
        log.info("unloaded the transactional ids of %s", txn_tp(partition))

    def unload_all(self, on_unloaded: Callable[[int], None]) -> None:
        with self.lock:
            for partition in list(self._loaded):
                self._unload(partition)
                on_unloaded(partition)
        self.appends.flush_wakes()

    # -- writing changes ------------------------------------------------------------------

    def persist(self, txn: TxnMetadata, transition: Transition, coordinator_epoch: int,
                on_written: OnWritten) -> None:
        """Write ``transition`` of ``txn``; once the in-sync replicas have it (or it
        failed) apply it (or drop it) and call ``on_written(error)``. Lock held."""
        partition = self.partition_of(txn.transactional_id)
        value = None if transition.state is TxnState.DEAD else encode_value(transition.value)

        def done(error: int) -> None:
            current = self.txns.get(txn.transactional_id)
            if not error and (self._loaded.get(partition) != coordinator_epoch
                              or current is not txn):
                error = NOT_COORDINATOR  # unloaded (and maybe reloaded) meanwhile
            if error:
                txn.abandon(transition)
            else:
                txn.complete(transition)
                if transition.state is TxnState.DEAD:
                    del self.txns[txn.transactional_id]
            on_written(error)

        try:
            ticket = self.store.append(partition, [(encode_key(txn.transactional_id), value)],
                                       self.wall_ms())
        except KafkaError as error:
            self.appends.fail(partition, error, done)
            return
        self.appends.add(ticket, done)
