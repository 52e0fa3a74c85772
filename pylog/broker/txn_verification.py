"""Transaction verification on partition leaders (KIP-890 part 1).

Before a leader appends a producer's first transactional batch of a transaction to a
partition, it asks the producer's transaction coordinator whether the partition is in
that transaction: AddPartitionsToTxn v4+ with ``verify_only``. A batch the coordinator
does not vouch for is refused, so a produce request delayed past the end of its
transaction (or sent by a confused client without AddPartitionsToTxn) cannot open a
transaction no coordinator knows about and will ever end: such a *hanging* transaction
would hold the partition's last stable offset, and every read_committed reader, forever.
The leader holds a guard while it waits (:mod:`pylog.log.producer_state`): a marker
written meanwhile drops it, and the append then fails too.

``TxnVerifier.verify`` answers at once when this broker is the coordinator (asked
in-process), else queues the question for the coordinator's broker: one sender thread
per destination broker sends everything queued for it as one request (questions of the
same producer merged), over the inter-broker listener with its security settings, and
calls each question's ``done(errors)`` from that thread.

What a producer is told, per partition (Kafka's mapping for Produce v0-10):

* not in the transaction: INVALID_TXN_STATE (the client aborts the transaction);
* PRODUCER_FENCED: INVALID_PRODUCER_EPOCH; INVALID_PRODUCER_ID_MAPPING as it is;
* the coordinator moving, loading, unreachable, or the transaction ending
  (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
  CONCURRENT_TRANSACTIONS, a lost connection): NOT_ENOUGH_REPLICAS, which every client
  retries without refreshing its metadata;
* a coordinator that cannot verify (a broker without AddPartitionsToTxn v4):
  verification is skipped, as Kafka does during a rolling upgrade.

The group coordinator verifies a TxnOffsetCommit the same way, for the group's
``__consumer_offsets`` partition (the one AddOffsetsToTxn added): INVALID_TXN_STATE if
AddOffsetsToTxn never added it.

``transaction.partition.verification.enable=false`` turns verification off.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from pylog.cluster.broker_link import BrokerLink, broker_address
from pylog.cluster.metadata import NO_LEADER, ClusterMetadata
from pylog.errors import (
    ClusterAuthorizationFailedError, KafkaError, NetworkExceptionError, NotEnoughReplicasError,
    PylogError, UnsupportedVersionError)
from pylog.protocol import ApiKey
from pylog.transactions.codes import (
    CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
    INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, NOT_COORDINATOR, PRODUCER_FENCED,
    TRANSACTION_ABORTABLE)
from pylog.types import TopicPartition

log = logging.getLogger(__name__)

VERIFY_VERSIONS = (4, 5)
VERIFY_TIMEOUT_S = 30.0  # a coordinator's answer is waited for this long at most
NETWORK_EXCEPTION = NetworkExceptionError.errno
CLUSTER_AUTHORIZATION_FAILED = ClusterAuthorizationFailedError.errno
NOT_ENOUGH_REPLICAS = NotEnoughReplicasError.errno
_RETRY_AS_NOT_ENOUGH_REPLICAS = frozenset({
    CONCURRENT_TRANSACTIONS, NETWORK_EXCEPTION, COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR})

Errors = dict[TopicPartition, int]  # a partition -> its error code (0: verified)


def verification_error(code: int) -> int:
    """A coordinator's verification answer as clients before KIP-890 part 2 know it (a
    TxnOffsetCommit response carries it so)."""
    if code in (TRANSACTION_ABORTABLE, CLUSTER_AUTHORIZATION_FAILED):
        return INVALID_TXN_STATE
    if code == PRODUCER_FENCED:
        return INVALID_PRODUCER_EPOCH
    return code


def produce_error(code: int) -> int:
    """A coordinator's verification answer as a Produce response carries it."""
    code = verification_error(code)
    return NOT_ENOUGH_REPLICAS if code in _RETRY_AS_NOT_ENOUGH_REPLICAS else code


@dataclass(eq=False)
class _Question:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: set[TopicPartition]
    done: list[Callable[[Errors], None]] = field(default_factory=list)


class TxnVerifier:
    """Asks transaction coordinators whether partitions are in producers' transactions.

    ``coordinator``: this broker's TransactionCoordinator (its ``state.partition_of``
    places a transactional id, and it answers in-process for the ids it owns)."""

    def __init__(self, coordinator, metadata: ClusterMetadata, listener: str | None,
                 security, local_id: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.coordinator = coordinator
        self.metadata = metadata
        self.listener = listener
        self.security = security
        self.local_id = local_id
        self.clock = clock
        self._lock = threading.Lock()
        self._senders: dict[int, _VerifySender] = {}
        self._stopped = False

    def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
               partitions: set[TopicPartition],
               done: Callable[[Errors], None]) -> Errors | None:
        """Each partition's error code now (this broker coordinates the id, or nobody
        does), or None: ``done(errors)`` is called later, from another thread."""
        state = self.coordinator.state
        coordinator = state.store.leader_of(state.partition_of(transactional_id))
        if coordinator is not None and coordinator.broker_id == self.local_id:
            return self.coordinator.verify_partitions(transactional_id, producer_id,
                                                      producer_epoch, partitions)
        leader = NO_LEADER if coordinator is None else coordinator.broker_id
        if leader == NO_LEADER or self.address_of(leader) is None:
            return dict.fromkeys(partitions, COORDINATOR_NOT_AVAILABLE)
        with self._lock:
            if self._stopped:
                return dict.fromkeys(partitions, COORDINATOR_NOT_AVAILABLE)
            sender = self._senders.get(leader)
            if sender is None or not sender.is_alive():
                sender = self._senders[leader] = _VerifySender(self, leader)
                sender.start()
        sender.enqueue(_Question(transactional_id, producer_id, producer_epoch,
                                 set(partitions), [done]))
        return None

    def address_of(self, broker_id: int):
        return broker_address(self.metadata, self.listener, broker_id)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            senders = list(self._senders.values())
        for sender in senders:
            sender.stop()
        for sender in senders:
            sender.join(timeout=10)


class _VerifySender(threading.Thread):
    """Sends the questions queued for one coordinator broker, one request at a time."""

    def __init__(self, verifier: TxnVerifier, broker_id: int) -> None:
        super().__init__(name=f"pylog-txn-verify-to-{broker_id}", daemon=True)
        self.verifier = verifier
        self.broker_id = broker_id
        self._cond = threading.Condition()
        self._queue: dict[str, _Question] = {}  # transactional id -> its merged question
        self._stopping = False
        self._link = BrokerLink(broker_id, verifier.address_of, lambda: verifier.security,
                                f"pylog-txn-verify-{verifier.local_id}", VERIFY_TIMEOUT_S)
        self._unsupported = False  # the broker cannot verify: answer "verified"

    def enqueue(self, question: _Question) -> None:
        """Queue ``question``; one of the same transactional id already queued is merged
        with it (same producer and epoch) or answered INVALID_PRODUCER_EPOCH (the older
        epoch of the two: it is fenced)."""
        fenced = None
        with self._cond:
            queued = self._queue.get(question.transactional_id)
            if queued is not None and (queued.producer_id, queued.producer_epoch) == (
                    question.producer_id, question.producer_epoch):
                queued.partitions |= question.partitions
                queued.done += question.done
            elif queued is not None and queued.producer_epoch > question.producer_epoch:
                fenced = question
            else:
                fenced = queued
                self._queue[question.transactional_id] = question
            self._cond.notify()
        if fenced is not None:
            _answer(fenced, dict.fromkeys(fenced.partitions, INVALID_PRODUCER_EPOCH))

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._link.close()

    def run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopping:
                    self._cond.wait(1.0)
                if self._stopping:
                    pending, self._queue = list(self._queue.values()), {}
                    break
                batch, self._queue = list(self._queue.values()), {}
            self._ask(batch)
        for question in pending:
            _answer(question, dict.fromkeys(question.partitions, COORDINATOR_NOT_AVAILABLE))
        self._link.close()

    def _ask(self, batch: list[_Question]) -> None:
        if self._unsupported:
            for question in batch:
                _answer(question, {})
            return
        try:
            connection = self._link.connect()
            theirs = connection.versions.get(ApiKey.ADD_PARTITIONS_TO_TXN)
            if theirs is None or theirs[1] < VERIFY_VERSIONS[0]:
                raise UnsupportedVersionError(f"broker {self.broker_id} cannot verify "
                                              "transactions (no AddPartitionsToTxn v4)")
            response = connection.request(ApiKey.ADD_PARTITIONS_TO_TXN, _request(batch),
                                          min(VERIFY_VERSIONS[1], theirs[1]))
        except UnsupportedVersionError as error:
            log.warning("%s; producing without verification to it", error)
            self._unsupported = True
            for question in batch:
                _answer(question, {})
            return
        except (KafkaError, PylogError, OSError) as error:
            log.info("verifying transactions with broker %d: %s", self.broker_id, error)
            self._link.close()
            for question in batch:
                _answer(question, dict.fromkeys(question.partitions, NETWORK_EXCEPTION))
            return
        top = response.get("error_code", 0)
        by_id = {r["transactional_id"]: r for r in response["results_by_transaction"]}
        for question in batch:
            result = by_id.get(question.transactional_id)
            if top or result is None:
                _answer(question, dict.fromkeys(question.partitions, top or NETWORK_EXCEPTION))
                continue
            errors = dict.fromkeys(question.partitions, NETWORK_EXCEPTION)
            for topic in result["topic_results"]:
                for partition in topic["results_by_partition"]:
                    errors[TopicPartition(topic["name"], partition["partition_index"])] = \
                        partition["partition_error_code"]
            _answer(question, errors)


def _request(batch: list[_Question]) -> dict:
    transactions = []
    for question in batch:
        topics: dict[str, list[int]] = {}
        for tp in sorted(question.partitions):
            topics.setdefault(tp.topic, []).append(tp.partition)
        transactions.append({
            "transactional_id": question.transactional_id,
            "producer_id": question.producer_id, "producer_epoch": question.producer_epoch,
            "verify_only": True,
            "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]})
    return {"transactions": transactions}


def _answer(question: _Question, errors: Errors) -> None:
    for done in question.done:
        try:
            done(errors)
        except Exception:  # noqa: BLE001 -- one waiter's failure must not stop the sender
            log.exception("%s: handling the verification answer failed",
                          question.transactional_id)
