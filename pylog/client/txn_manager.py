"""Transactions of a transactional Producer, with the Java client's states and error split.

States (``TxnState``) and the calls that move between them::

    UNINITIALIZED --init_transactions--> READY --begin_transaction--> IN_TRANSACTION
    IN_TRANSACTION --commit_transaction--> COMMITTING --EndTxn(commit)--> READY
    IN_TRANSACTION / COMMITTING --a record or a request fails--> ABORTABLE_ERROR
    IN_TRANSACTION / ABORTABLE_ERROR --abort_transaction--> ABORTING --EndTxn(abort)--> READY
    any --fenced, not authorized, ...--> FATAL_ERROR (the producer can only be closed)

Requests: FindCoordinator (key type 1, the transactional id) finds the transaction
coordinator; InitProducerId with the transactional id gives the producer id and an epoch
that fences every older producer with the same id; the sender thread adds each
partition with AddPartitionsToTxn before its first batch of a transaction is sent;
``send_offsets_to_transaction`` is AddOffsetsToTxn to the transaction coordinator, then
TxnOffsetCommit to the group coordinator; EndTxn ends the transaction.

Errors come in three kinds:

* retriable (a coordinator moving or loading, CONCURRENT_TRANSACTIONS while the previous
  transaction's markers are written, a dropped connection): retried inside each call
  until its timeout, then RequestTimedOutError -- the same call may be made again;
* abortable (a record of the transaction could not be delivered, a group or topic not
  authorized): commit raises TransactionAbortableError; ``abort_transaction`` and a new
  transaction carry on;
* fatal (ProducerFencedError -- another producer took the transactional id --,
  TransactionalIdAuthorizationFailedError, InvalidTxnStateError, an unexpected error):
  every later call raises it again; the producer can only be closed.

A call in the wrong state raises TransactionStateError and changes nothing.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from pylog.client.coordinator_requests import (
    GROUP_KEY, TRANSACTION_KEY, CoordinatorRequests, CoordinatorRetry)
from pylog.client.network import NetworkClient
from pylog import errors
from pylog.errors import (
    KafkaError, PylogError, RequestTimedOutError, RetriableError, UnsupportedVersionError)
from pylog.protocol import ApiKey
from pylog.types import TopicPartition

if TYPE_CHECKING:
    from pylog.client.sender import Idempotence

log = logging.getLogger(__name__)

# A new transaction's first AddPartitionsToTxn may find the previous one still writing
# its markers (CONCURRENT_TRANSACTIONS): retried soon, as the Java client does.
ADD_PARTITIONS_RETRY_BACKOFF_S = 0.02

ProducerFencedError: type[KafkaError] = errors.ProducerFencedError
InvalidProducerEpochError: type[KafkaError] = errors.InvalidProducerEpochError
TransactionAbortableError: type[KafkaError] = errors.TransactionAbortableError
_CONCURRENT_TRANSACTIONS = errors.ConcurrentTransactionsError.errno
_OPERATION_NOT_ATTEMPTED = errors.OperationNotAttemptedError.errno
_RECOORDINATE = {errors.CoordinatorNotAvailableError.errno, errors.NotCoordinatorError.errno}
_FENCED = {InvalidProducerEpochError.errno, ProducerFencedError.errno}
# This transaction fails, the next one may not.
_ABORTABLE = {cls.errno for cls in (
    errors.TopicAuthorizationFailedError, errors.GroupAuthorizationFailedError,
    errors.UnknownMemberIdError, errors.IllegalGenerationError, errors.FencedInstanceIdError,
    TransactionAbortableError)}


class TxnState(enum.Enum):
    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING = "COMMITTING"
    ABORTING = "ABORTING"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


class TransactionStateError(PylogError):
    """A transactional call made in a state that does not allow it (nothing was changed)."""


class TransactionAbortedError(PylogError):
    """The record was never sent: its transaction was aborted."""


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """The consumer group whose offsets a transaction commits. A member of a group sends
    its generation and member id, so a zombie member's commit is refused; the defaults
    commit as a client outside the group."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class TransactionManager:
    """State, coordinator and requests of one transactional id (thread-safe: the
    application thread ends transactions, the sender thread adds partitions)."""

    def __init__(self, network: NetworkClient, transactional_id: str, transaction_timeout_ms: int,
                 idempotence: "Idempotence", *, retry_backoff_s: float, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep,
                 on_state: Callable[["TxnState"], None] = lambda state: None) -> None:
        self.network = network
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.idempotence = idempotence
        self._on_state = on_state
        self._lock = threading.RLock()
        self.state = TxnState.UNINITIALIZED
        self.last_error: PylogError | None = None
        self.partitions: set[TopicPartition] = set()  # added to the current transaction
        self._started = False  # a partition or offsets added: EndTxn is needed
        self._requests = CoordinatorRequests(network, self._check, retry_backoff_s=retry_backoff_s,
                                             clock=clock, sleep=sleep)

    # -- states ----------------------------------------------------------------------

    def _transition(self, target: TxnState, error: PylogError | None = None) -> None:
        with self._lock:
            if self.state is TxnState.FATAL_ERROR and target is not TxnState.FATAL_ERROR:
                return
            self.state = target
            self.last_error = error
            log.debug("transactional id %s: %s%s", self.transactional_id, target.name,
                      f" ({error})" if error else "")
        self._on_state(target)

    def _require(self, operation: str, *allowed: TxnState) -> None:
        """Raise unless the state is one of ``allowed`` (the fatal error itself if fatal)."""
        state = self.state
        if state in allowed:
            return
        if state is TxnState.FATAL_ERROR:
            raise self.fatal_error(operation)
        if state is TxnState.ABORTABLE_ERROR:
            raise TransactionAbortableError(
                f"{operation}: the transaction failed ({self.last_error}); call abort_transaction") \
                from self.last_error
        raise TransactionStateError(f"{operation} is not allowed in state {state.name}: "
                                    f"{_HINTS.get(state, '')}".rstrip(": "))

    def fatal_error(self, operation: str) -> PylogError:
        """A fresh exception of the fatal error's class, for a call made after it."""
        cause = self.last_error
        cls = type(cause) if isinstance(cause, KafkaError) else PylogError
        return cls(f"{operation}: transactional id {self.transactional_id!r} hit a fatal error "
                   f"({cause}); the producer can only be closed")

    def send_refusal(self) -> PylogError:
        """Why ``send`` is refused now (the Producer asks only outside IN_TRANSACTION)."""
        try:
            self._require("send", TxnState.IN_TRANSACTION)
        except PylogError as exc:
            return exc
        return TransactionStateError("send: no transaction in progress")

    def fatal(self, error: PylogError) -> PylogError:
        log.warning("transactional id %s: fatal error: %s", self.transactional_id, error)
        self._transition(TxnState.FATAL_ERROR, error)
        return error

    def abortable(self, error: PylogError) -> PylogError:
        with self._lock:
            if self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING):
                log.info("transactional id %s: transaction must be aborted: %s", self.transactional_id, error)
                self._transition(TxnState.ABORTABLE_ERROR, error)
        return error

    def record_failed(self, error: BaseException) -> BaseException:
        """A record of the transaction failed: fenced is fatal, anything else abortable.
        Returns the error to give the record (fenced: ProducerFencedError)."""
        if isinstance(error, InvalidProducerEpochError):
            error = ProducerFencedError(f"transactional id {self.transactional_id!r} was fenced: a newer "
                                        f"producer with the same transactional id called "
                                        f"init_transactions ({error})")
        if self.state is TxnState.FATAL_ERROR:
            return error
        if isinstance(error, ProducerFencedError):
            self.fatal(error)
        elif isinstance(error, PylogError) and not isinstance(error, TransactionAbortedError):
            self.abortable(error)
        return error

    def batch_refusal(self) -> PylogError | None:
        """The error to fail drained batches with instead of sending them (aborting, or the
        transaction or producer failed), else None."""
        state = self.state
        if state is TxnState.ABORTING:
            return TransactionAbortedError(f"transaction of {self.transactional_id!r} aborted "
                                           f"before the record was sent")
        if state in (TxnState.ABORTABLE_ERROR, TxnState.FATAL_ERROR):
            return self.last_error
        return None

    # -- application-thread calls ----------------------------------------------------

    def init(self, deadline: float | None) -> None:
        """InitProducerId with the transactional id (state UNINITIALIZED, or INITIALIZING
        again after a timeout)."""
        self._require("init_transactions", TxnState.UNINITIALIZED, TxnState.INITIALIZING)
        self._transition(TxnState.INITIALIZING)
        self._renew_producer_id("init_transactions", deadline)
        self._transition(TxnState.READY)

    def _renew_producer_id(self, operation: str, deadline: float | None) -> None:
        def handle(response: dict) -> dict:
            self._check(operation, response["error_code"])
            return response

        response = self._request(
            operation, ApiKey.INIT_PRODUCER_ID, TRANSACTION_KEY, self.transactional_id,
            lambda version: {"transactional_id": self.transactional_id,
                             "transaction_timeout_ms": self.transaction_timeout_ms,
                             "producer_id": -1, "producer_epoch": -1},
            handle, deadline)
        self.idempotence.reset(response["producer_id"], response["producer_epoch"])
        log.info("transactional id %s: producer id %d epoch %d", self.transactional_id,
                 response["producer_id"], response["producer_epoch"])

    def begin(self) -> None:
        self._require("begin_transaction", TxnState.READY)
        with self._lock:
            self.partitions.clear()
            self._started = False
        self._transition(TxnState.IN_TRANSACTION)

    def begin_commit(self) -> None:
        """IN_TRANSACTION -> COMMITTING (COMMITTING again: a commit retried after a timeout)."""
        self._require("commit_transaction", TxnState.IN_TRANSACTION, TxnState.COMMITTING)
        self._transition(TxnState.COMMITTING)

    def begin_abort(self) -> None:
        self._require("abort_transaction", TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR,
                      TxnState.ABORTING)
        self._transition(TxnState.ABORTING)

    def end(self, commit: bool, deadline: float | None) -> None:
        """EndTxn (skipped when nothing was added), then READY. After an abort whose
        batches left a gap in the sequence numbers, a new epoch first."""
        operation = "commit_transaction" if commit else "abort_transaction"
        if commit:
            self._require(operation, TxnState.COMMITTING)  # a record failed during the flush
        if self._started:
            state = self.idempotence
            self._in_transaction(lambda: self._request(
                operation, ApiKey.END_TXN, TRANSACTION_KEY, self.transactional_id,
                lambda version: {"transactional_id": self.transactional_id, "producer_id": state.producer_id,
                                 "producer_epoch": state.epoch, "committed": commit},
                lambda response: self._check(operation, response["error_code"]), deadline))
        if not commit and self.idempotence.needs_reset:
            self._renew_producer_id(operation, deadline)
        with self._lock:
            self.partitions.clear()
            self._started = False
        self._transition(TxnState.READY)

    def send_offsets(self, offsets: Mapping[TopicPartition, int], group: ConsumerGroupMetadata,
                     deadline: float | None) -> None:
        """AddOffsetsToTxn, then TxnOffsetCommit to the group's coordinator."""
        operation = "send_offsets_to_transaction"
        self._require(operation, TxnState.IN_TRANSACTION)
        state = self.idempotence
        self._in_transaction(lambda: self._request(
            operation, ApiKey.ADD_OFFSETS_TO_TXN, TRANSACTION_KEY, self.transactional_id,
            lambda version: {"transactional_id": self.transactional_id, "producer_id": state.producer_id,
                             "producer_epoch": state.epoch, "group_id": group.group_id},
            lambda response: self._check(operation, response["error_code"]), deadline))
        self._started = True
        pending = dict(offsets)

        def body(version: int) -> dict:
            topics: dict[str, list] = {}
            for tp, offset in sorted(pending.items()):
                topics.setdefault(tp.topic, []).append(
                    {"partition_index": tp.partition, "committed_offset": offset,
                     "committed_leader_epoch": -1, "committed_metadata": ""})
            return {"transactional_id": self.transactional_id, "group_id": group.group_id,
                    "producer_id": state.producer_id, "producer_epoch": state.epoch,
                    "generation_id": group.generation_id, "member_id": group.member_id,
                    "group_instance_id": group.group_instance_id,
                    "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}

        def handle(response: dict) -> None:
            retry = None  # partitions committed are not sent again
            for topic in response["topics"]:
                for partition in topic["partitions"]:
                    tp = TopicPartition(topic["name"], partition["partition_index"])
                    try:
                        self._check(f"{operation} ({tp})", partition["error_code"])
                        pending.pop(tp, None)
                    except CoordinatorRetry as exc:
                        retry = retry or exc
            if retry is not None:
                raise retry

        self._in_transaction(lambda: self._request(
            operation, ApiKey.TXN_OFFSET_COMMIT, GROUP_KEY, group.group_id, body, handle, deadline))

    def _in_transaction(self, call: Callable[[], Any]) -> Any:
        """A request of the open transaction: an error that ``_check`` did not make fatal
        makes the transaction abortable (a timeout leaves it as it is)."""
        try:
            return call()
        except RequestTimedOutError:
            raise
        except PylogError as exc:
            raise self.abortable(exc)

    # -- sender-thread call ----------------------------------------------------------

    def add_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        """AddPartitionsToTxn, once. Raises RetryLater, or the error that made the
        transaction abortable or the producer fatal."""
        partitions = sorted(set(partitions) - self.partitions)
        if not partitions:
            return
        state = self.idempotence
        topics: dict[str, list[int]] = {}
        for tp in partitions:
            topics.setdefault(tp.topic, []).append(tp.partition)
        wanted = [{"name": t, "partitions": ps} for t, ps in topics.items()]
        operation = "add partitions to the transaction"

        def body(version: int) -> dict:
            return {"v3_and_below_transactional_id": self.transactional_id,
                    "v3_and_below_producer_id": state.producer_id,
                    "v3_and_below_producer_epoch": state.epoch, "v3_and_below_topics": wanted}

        def handle(response: dict) -> None:
            failed = None
            for topic in response["results_by_topic_v3_and_below"]:
                for partition in topic["results_by_partition"]:
                    code = partition["partition_error_code"]
                    if code == _OPERATION_NOT_ATTEMPTED:  # another partition's error says why
                        continue
                    try:
                        self._check(f"{operation} ({topic['name']}-{partition['partition_index']})", code)
                    except CoordinatorRetry:
                        raise
                    except PylogError as exc:
                        failed = failed or exc
            if failed is not None:
                raise failed

        try:
            self._in_transaction(lambda: self._request(
                operation, ApiKey.ADD_PARTITIONS_TO_TXN, TRANSACTION_KEY, self.transactional_id,
                body, handle, deadline=None, attempts=1))
        except CoordinatorRetry as exc:
            first = not self.partitions and not self._started
            raise RetryLater(str(exc), ADD_PARTITIONS_RETRY_BACKOFF_S if first else None) from None
        with self._lock:
            self.partitions.update(partitions)
            self._started = True

    # -- requests and their error codes -----------------------------------------------

    def _request(self, *args, **kwargs) -> Any:
        """A request through the coordinator loop; a coordinator too old for the
        transaction APIs is fatal, as in the Java client."""
        try:
            return self._requests.request(*args, **kwargs)
        except UnsupportedVersionError as exc:
            raise self.fatal(exc)

    def _check(self, operation: str, code: int) -> None:
        """Sort a response's error code: retry (CoordinatorRetry), fatal (the producer's state
        becomes FATAL_ERROR) or abortable (raised, the caller decides)."""
        if not code:
            return
        cls = KafkaError.for_code(code)
        message = f"{operation}: {cls.name}: {cls.description}"
        if code in _RECOORDINATE:
            raise CoordinatorRetry(message, recoordinate=True)
        if code == _CONCURRENT_TRANSACTIONS or issubclass(cls, RetriableError):
            raise CoordinatorRetry(message)
        if code in _FENCED:
            raise self.fatal(ProducerFencedError(
                f"{operation}: transactional id {self.transactional_id!r} was fenced: a newer producer "
                f"with the same transactional id called init_transactions ({cls.name})"))
        if code in _ABORTABLE:
            raise cls(message)
        raise self.fatal(cls(message))


class RetryLater(RetriableError):
    """AddPartitionsToTxn could not be done now; the batches wait (``backoff_s``, or the
    usual retry back-off when None) and try again."""

    def __init__(self, message: str, backoff_s: float | None = None) -> None:
        super().__init__(message)
        self.backoff_s = backoff_s


_HINTS = {
    TxnState.UNINITIALIZED: "call init_transactions first",
    TxnState.INITIALIZING: "init_transactions has not completed; call it again",
    TxnState.READY: "no transaction in progress; call begin_transaction first",
    TxnState.IN_TRANSACTION: "a transaction is in progress; commit or abort it first",
    TxnState.COMMITTING: "the transaction is being committed; call commit_transaction again",
    TxnState.ABORTING: "the transaction is being aborted; call abort_transaction again",
}

