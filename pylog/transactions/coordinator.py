"""The transaction coordinator: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
EndTxn, DescribeTransactions and ListTransactions over the transactional ids this broker
owns (``TransactionStateManager``), with the markers sent by ``MarkerChannel``.

A transaction goes Empty -> Ongoing (partitions added) -> PrepareCommit or PrepareAbort
(EndTxn; answered once that is replicated) -> markers written to every partition ->
CompleteCommit or CompleteAbort. Every change is written to ``__transaction_state``
before it counts, so a new leader of the id's partition resumes where this one stopped:
a transaction found in PrepareCommit/PrepareAbort gets its markers again.

InitProducerId gives a transactional id its producer id and a new epoch, which fences
older producers of the same id. If an older producer left a transaction open, it is
aborted first (the epoch is bumped, then PrepareAbort written) and the caller told
CONCURRENT_TRANSACTIONS until it is complete. A transaction open longer than its timeout
is aborted the same way, checked every
``transaction.abort.timed.out.transaction.cleanup.interval.ms``; an id idle for
``transactional.id.expiration.ms`` is forgotten (a tombstone).

Calls return their answer, or a ``Pending`` that is completed once the write is
replicated. Errors are Kafka's (``pylog.transactions.codes``).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from typing import Callable

from pylog.broker.partitions import AppendWaiters, PartitionLogs
from pylog.client.security import SecurityConfig
from pylog.cluster.metadata import ClusterMetadata
from pylog.cluster.producer_ids import ProducerIdManager
from pylog.coordinator.group import Pending
from pylog.errors import KafkaError
from pylog.transactions.codes import (
    CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
    INVALID_PRODUCER_ID_MAPPING, INVALID_REQUEST, INVALID_TRANSACTION_TIMEOUT,
    INVALID_TXN_STATE, NOT_COORDINATOR, PRODUCER_FENCED, TRANSACTION_ABORTABLE,
    TRANSACTIONAL_ID_NOT_FOUND,
    error_name)
from pylog.transactions.markers import MarkerChannel, MarkerJob
from pylog.transactions.metadata import NO_PRODUCER_EPOCH, TxnMetadata, epoch_exhausted
from pylog.transactions.records import TxnState
from pylog.transactions.state_manager import TransactionStateManager
from pylog.types import TopicPartition

log = logging.getLogger(__name__)

TICK_S = 0.05
S = TxnState
_IDLE = (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
_PREPARED = (S.PREPARE_COMMIT, S.PREPARE_ABORT)


def _log_failed_abort(transactional_id: str, error: int) -> None:
    if error:  # the next round tries again
        log.info("%s: aborting the timed-out transaction failed with %s",
                 transactional_id, error_name(error))


def _answer(error: int, producer_id: int = -1, producer_epoch: int = -1) -> dict:
    return {"error_code": error, "producer_id": producer_id, "producer_epoch": producer_epoch}


class TransactionCoordinator:
    """See the module doc. ``clock`` gives monotonic seconds, ``wall_ms`` epoch
    milliseconds (transaction start and update times, timeouts, expiry)."""

    def __init__(self, config, metadata: ClusterMetadata, logs: PartitionLogs,
                 waiters: AppendWaiters, clock: Callable[[], float] = time.monotonic,
                 wall_ms: Callable[[], int] | None = None) -> None:
        self.config = config
        self.metadata = metadata
        self.clock = clock
        self.state = TransactionStateManager(config, metadata, logs, waiters, clock, wall_ms)
        self.state.kick = self._kick_soon
        self.wall_ms = self.state.wall_ms
        self.producer_ids = ProducerIdManager(metadata.allocate_producer_id_block)
        self.markers = MarkerChannel(
            metadata, config.inter_broker_listener_name,
            SecurityConfig.from_mapping(config.inter_broker_client_settings()),
            config["broker.id"], self._on_markers_written, clock)
        self._completions: list[MarkerJob] = []  # CompleteX writes to try again
        self._stopping = threading.Event()
        self._kick = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_abort = 0.0
        self._next_expiry = 0.0

    # -- life cycle -------------------------------------------------------------------------

    def start(self) -> "TransactionCoordinator":
        self._thread = threading.Thread(target=self._run, name="pylog-txn-coordinator",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._kick.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.markers.stop()
        self.state.unload_all(lambda partition: None)

    def _kick_soon(self) -> None:
        self._kick.set()

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._kick.wait(TICK_S)
            self._kick.clear()
            try:
                self.state.follow_leadership(self._on_loaded, self.markers.remove_partition)
                with self.state.lock:
                    self.state.appends.drain()
                    completions, self._completions = self._completions, []
                for job in completions:
                    self._on_markers_written(job)
                self.markers.retry_unrouted()
                now = self.clock()
                if now >= self._next_abort:
                    self._next_abort = now + self.config[
                        "transaction.abort.timed.out.transaction.cleanup.interval.ms"] / 1000
                    self.state.appends.run_locked(self._abort_timed_out)
                if now >= self._next_expiry:
                    self._next_expiry = now + self.config[
                        "transaction.remove.expired.transaction.cleanup.interval.ms"] / 1000
                    self.state.appends.run_locked(self._expire_ids)
            except Exception:  # noqa: BLE001 -- the timer thread must survive a bad round
                log.exception("transaction coordinator round failed")
            self.state.appends.flush_wakes()

    def _on_loaded(self, partition: int, epoch: int, loaded: list[TxnMetadata]) -> None:
        """A newly led partition: finish the transactions its old leader had prepared."""
        for txn in loaded:
            if txn.state in _PREPARED:
                log.info("%s: resuming %s after loading", txn.transactional_id,
                         txn.state.wire_name)
                self._send_markers(txn, epoch)

    # -- InitProducerId ---------------------------------------------------------------------

    def init_producer_id(self, transactional_id: str | None, timeout_ms: int,
                         expected: tuple[int, int] | None = None) -> dict | Pending:
        """A producer id and epoch; ``expected`` (KIP-360, v3+): the (producer id, epoch)
        the caller had, when it asks to bump its epoch after an error."""
        if transactional_id is None:
            return self._new_producer_id()
        if transactional_id == "":
            return _answer(INVALID_REQUEST)
        if not 0 < timeout_ms <= self.config["transaction.max.timeout.ms"]:
            return _answer(INVALID_TRANSACTION_TIMEOUT)
        return self.state.appends.run_locked(
            lambda: self._init_locked(transactional_id, timeout_ms, expected))

    def _new_producer_id(self) -> dict:
        try:
            return _answer(0, self.producer_ids.next_id(), 0)
        except KafkaError as error:
            log.warning("no producer id: %s", error)
            return _answer(error.errno)
        except Exception as error:  # noqa: BLE001 -- ZooKeeper or file: tell the client
            log.warning("no producer id: %s", error)
            return _answer(COORDINATOR_NOT_AVAILABLE)

    def _init_locked(self, transactional_id: str, timeout_ms: int,
                     expected: tuple[int, int] | None) -> dict | Pending:
        txn, coordinator_epoch, error = self.state.lookup(transactional_id)
        if error:
            return _answer(error)
        now = self.wall_ms()
        if txn is None:
            answer = self._new_producer_id()
            if answer["error_code"]:
                return answer
            txn = TxnMetadata(transactional_id, answer["producer_id"], NO_PRODUCER_EPOCH,
                              timeout_ms, last_update_ms=now)
            self.state.txns[transactional_id] = txn
        if txn.pending is not None or txn.state in _PREPARED:
            return _answer(CONCURRENT_TRANSACTIONS)
        if expected is not None and not (
                txn.producer_epoch == NO_PRODUCER_EPOCH or expected[0] == txn.producer_id
                or (expected[0] == txn.previous_producer_id and epoch_exhausted(expected[1]))):
            return _answer(PRODUCER_FENCED)
        pending = Pending()
        if txn.state is S.ONGOING:
            # Abort what the older producer left open (with a bumped epoch, never given
            # out), and have this one retry until it is complete.
            txn.fence_epoch()
            self._end(txn, coordinator_epoch, False, True, lambda e: pending.complete(
                _answer(e or CONCURRENT_TRANSACTIONS)))
            return pending
        if txn.epoch_exhausted and (expected is None or expected[1] == txn.producer_epoch):
            answer = self._new_producer_id()
            if answer["error_code"]:
                return answer
            transition = txn.prepare_new_producer_id(answer["producer_id"], timeout_ms, now,
                                                     expected is not None)
        else:
            transition = txn.prepare_epoch_bump(timeout_ms, None if expected is None
                                                else expected[1], now)
            if transition is None:
                return _answer(PRODUCER_FENCED)

        def written(error: int) -> None:
            if error:
                pending.complete(_answer(error))
                return
            log.info("%s: producer id %d, epoch %d", transactional_id, txn.producer_id,
                     txn.producer_epoch)
            pending.complete(_answer(0, txn.producer_id, txn.producer_epoch))

        self.state.persist(txn, transition, coordinator_epoch, written)
        return pending

    # -- AddPartitionsToTxn / AddOffsetsToTxn -----------------------------------------------

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: set[TopicPartition]) -> int | Pending:
        """Add ``partitions`` to the id's transaction (starting one if none is open)."""
        if not transactional_id:
            return INVALID_REQUEST
        return self.state.appends.run_locked(lambda: self._add_locked(
            transactional_id, producer_id, producer_epoch, partitions))

    def _add_locked(self, transactional_id: str, producer_id: int, producer_epoch: int,
                    partitions: set[TopicPartition]) -> int | Pending:
        txn, coordinator_epoch, error = self._lookup_producer(transactional_id, producer_id,
                                                              producer_epoch)
        if error:
            return error
        if txn.pending is not None or txn.state in _PREPARED:
            return CONCURRENT_TRANSACTIONS
        if txn.state is S.ONGOING and partitions <= txn.partitions:
            return 0
        pending = Pending()
        self.state.persist(txn, txn.prepare_add_partitions(partitions, self.wall_ms()),
                           coordinator_epoch, lambda e: pending.complete({"error_code": e}))
        return pending

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions) -> dict[TopicPartition, int]:
        """Whether ``partitions`` are in the producer's transaction (KIP-890 part 1, asked
        by a partition leader before it appends the transaction's first batch there):
        an error code per partition. TRANSACTION_ABORTABLE: not in it; the whole set
        fails alike with INVALID_PRODUCER_ID_MAPPING (an id unknown here, or another
        producer's), PRODUCER_FENCED, CONCURRENT_TRANSACTIONS (the transaction is ending)
        or the coordinator's own NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS."""
        if not transactional_id:
            return dict.fromkeys(partitions, INVALID_REQUEST)
        return self.state.appends.run_locked(lambda: self._verify_locked(
            transactional_id, producer_id, producer_epoch, partitions))

    def _verify_locked(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions) -> dict[TopicPartition, int]:
        txn, _, error = self._lookup_producer(transactional_id, producer_id, producer_epoch)
        if not error and txn.state in _PREPARED:
            error = CONCURRENT_TRANSACTIONS
        if error:
            return dict.fromkeys(partitions, error)
        return {tp: 0 if tp in txn.partitions else TRANSACTION_ABORTABLE for tp in partitions}

    def _lookup_producer(self, transactional_id: str, producer_id: int, producer_epoch: int
                         ) -> tuple[TxnMetadata | None, int, int]:
        """As ``TransactionStateManager.lookup``, and the id's current producer must be
        ``producer_id`` (else INVALID_PRODUCER_ID_MAPPING) in ``producer_epoch`` (else
        PRODUCER_FENCED)."""
        txn, coordinator_epoch, error = self.state.lookup(transactional_id)
        if not error and (txn is None or txn.producer_id != producer_id):
            error = INVALID_PRODUCER_ID_MAPPING
        elif not error and txn.producer_epoch != producer_epoch:
            error = PRODUCER_FENCED
        return txn, coordinator_epoch, error

    # -- EndTxn ---------------------------------------------------------------------------

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                commit: bool) -> int | Pending:
        """Commit or abort the id's transaction: answered once PrepareCommit/PrepareAbort
        is replicated; the markers and CompleteCommit/CompleteAbort follow."""
        if not transactional_id:
            return INVALID_REQUEST
        return self.state.appends.run_locked(lambda: self._end_locked(
            transactional_id, producer_id, producer_epoch, commit))

    def _end_locked(self, transactional_id: str, producer_id: int, producer_epoch: int,
                    commit: bool) -> int | Pending:
        txn, coordinator_epoch, error = self._lookup_producer(transactional_id, producer_id,
                                                              producer_epoch)
        if error:
            return error
        if txn.pending is not None:
            return CONCURRENT_TRANSACTIONS
        state = txn.state
        if state is S.ONGOING:
            pending = Pending()
            self._end(txn, coordinator_epoch, commit, False,
                      lambda e: pending.complete({"error_code": e}))
            return pending
        if state is (S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT):
            return 0  # a retry of the EndTxn that completed it
        if state is (S.PREPARE_COMMIT if commit else S.PREPARE_ABORT):
            return CONCURRENT_TRANSACTIONS
        return INVALID_TXN_STATE

    def _end(self, txn: TxnMetadata, coordinator_epoch: int, commit: bool, fence: bool,
             on_done: Callable[[int], None]) -> None:
        """Write PrepareCommit/PrepareAbort; once replicated, answer and send the markers."""
        transition = txn.prepare_end(commit, self.wall_ms(), fence=fence)

        def written(error: int) -> None:
            on_done(error)
            if not error:
                self._send_markers(txn, coordinator_epoch)

        self.state.persist(txn, transition, coordinator_epoch, written)

    def _send_markers(self, txn: TxnMetadata, coordinator_epoch: int) -> None:
        self.markers.add(MarkerJob(
            txn.transactional_id, self.state.partition_of(txn.transactional_id),
            coordinator_epoch, txn.producer_id, txn.producer_epoch,
            txn.state is S.PREPARE_COMMIT, set(txn.partitions)))

    def _on_markers_written(self, job: MarkerJob) -> None:
        """Every marker of ``job`` is written: write CompleteCommit/CompleteAbort."""
        with self.state.lock:
            txn, coordinator_epoch, error = self.state.lookup(job.transactional_id)
            if error or coordinator_epoch != job.coordinator_epoch or txn is None \
                    or txn.producer_id != job.producer_id or txn.state not in _PREPARED:
                return  # no longer ours: the new coordinator sends them again
            if txn.pending is not None:
                self._completions.append(job)
                return

            def written(error: int) -> None:
                if error == NOT_COORDINATOR:
                    return
                if error:
                    log.warning("%s: writing %s failed with %s; trying again",
                                job.transactional_id, txn.state.wire_name, error_name(error))
                    self._completions.append(job)
                    return
                log.info("%s: %s", job.transactional_id, txn.state.wire_name)

            self.state.persist(txn, txn.prepare_complete(self.wall_ms()), coordinator_epoch,
                               written)
        self.state.appends.flush_wakes()

    # -- timeouts and expiry ----------------------------------------------------------------

    def _abort_timed_out(self) -> None:
        """Abort (fencing the producer) every transaction open longer than its timeout."""
        now = self.wall_ms()
        for txn in self.state.owned():
            if txn.state is not S.ONGOING or txn.pending is not None \
                    or txn.start_ms + txn.timeout_ms >= now:
                continue
            coordinator_epoch = self.state.coordinator_epoch(txn.transactional_id)
            log.info("%s: aborting the transaction of producer %d open for %d ms (timeout %d)",
                     txn.transactional_id, txn.producer_id, now - txn.start_ms, txn.timeout_ms)
            txn.fence_epoch()
            self._end(txn, coordinator_epoch, False, True,
                      functools.partial(_log_failed_abort, txn.transactional_id))

    def _expire_ids(self) -> None:
        """Forget transactional ids with no transaction for transactional.id.expiration.ms."""
        horizon = self.wall_ms() - self.config["transactional.id.expiration.ms"]
        for txn in self.state.owned():
            if txn.state in _IDLE and txn.pending is None and txn.last_update_ms <= horizon:
                log.info("%s: expiring the transactional id (idle since %d)",
                         txn.transactional_id, txn.last_update_ms)
                self.state.persist(txn, txn.prepare_dead(),
                                   self.state.coordinator_epoch(txn.transactional_id),
                                   lambda e: None)

    # -- DescribeTransactions / ListTransactions ------------------------------------------

    def describe(self, transactional_id: str) -> dict:
        return self.state.appends.run_locked(lambda: self._describe_locked(transactional_id))

    def _describe_locked(self, transactional_id: str) -> dict:
        answer = {"error_code": 0, "transactional_id": transactional_id,
                  "transaction_state": "", "transaction_timeout_ms": 0,
                  "transaction_start_time_ms": -1, "producer_id": -1, "producer_epoch": -1,
                  "topics": []}
        if not transactional_id:
            return dict(answer, error_code=INVALID_REQUEST)
        txn, _, error = self.state.lookup(transactional_id)
        if error:
            return dict(answer, error_code=error)
        if txn is None or txn.state is S.DEAD:
            return dict(answer, error_code=TRANSACTIONAL_ID_NOT_FOUND)
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(txn.partitions):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        return dict(answer, transaction_state=txn.state.wire_name,
                    transaction_timeout_ms=txn.timeout_ms,
                    transaction_start_time_ms=txn.start_ms, producer_id=txn.producer_id,
                    producer_epoch=txn.producer_epoch,
                    topics=[{"topic": t, "partitions": ps} for t, ps in by_topic.items()])

    def list_transactions(self, states: list[str], producer_ids: list[int],
                          duration_ms: int = -1) -> dict:
        return self.state.appends.run_locked(
            lambda: self._list_locked(states, producer_ids, duration_ms))

    def _list_locked(self, states: list[str], producer_ids: list[int],
                     duration_ms: int) -> dict:
        unknown = [s for s in states if TxnState.from_wire_name(s) is None]
        wanted = {TxnState.from_wire_name(s) for s in states} - {None}
        answer = {"error_code": 0, "unknown_state_filters": unknown, "transaction_states": []}
        if self.state.store.num_partitions() is None:
            return answer
        if self.state.loading():
            return dict(answer, error_code=COORDINATOR_LOAD_IN_PROGRESS)
        now = self.wall_ms()
        for txn in self.state.owned():
            if (states and txn.state not in wanted) or txn.state is S.DEAD \
                    or (producer_ids and txn.producer_id not in producer_ids) \
                    or (duration_ms >= 0 and now - txn.start_ms < duration_ms):
                continue
            answer["transaction_states"].append({
                "transactional_id": txn.transactional_id, "producer_id": txn.producer_id,
                "transaction_state": txn.state.wire_name})
        return answer

    # -- FindCoordinator ------------------------------------------------------------------

    def coordinator_of(self, transactional_id: str):
        """The live broker coordinating ``transactional_id``, or None."""
        return self.state.coordinator_of(transactional_id)
