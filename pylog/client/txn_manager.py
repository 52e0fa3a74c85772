"""Transactions of a transactional Producer, with the Java client's states and error split.

States (``TxnState``) and the calls that move between them::

    UNINITIALIZED --init_transactions--> READY --begin_transaction--> IN_TRANSACTION
    IN_TRANSACTION --commit_transaction--> COMMITTING --EndTxn(commit)--> READY
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
from typing import Any, Callable, Iterable, Mapping

from pylog.client.connection import BrokerConnection
from pylog.client.network import NetworkClient, backoff_delay
from pylog.errors import (
    KafkaError, NetworkExceptionError, PylogError, RequestTimedOutError, RetriableError,
    UnsupportedVersionError)
from pylog.protocol import ApiKey
from pylog.types import BrokerEndpoint, TopicPartition

log = logging.getLogger(__name__)

GROUP_KEY, TRANSACTION_KEY = 0, 1
# The versions of the transaction APIs this client fills in: below the ones that need
# the KIP-890 (transaction version 2) protocol and below AddPartitionsToTxn's
# broker-to-broker batch form.
TXN_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
    ApiKey.END_TXN: (0, 4),
    ApiKey.TXN_OFFSET_COMMIT: (0, 4),
    ApiKey.INIT_PRODUCER_ID: (0, 1),
    ApiKey.FIND_COORDINATOR: (0, 4),
}
# A new transaction's first AddPartitionsToTxn may find the previous one still writing
# its markers (CONCURRENT_TRANSACTIONS): retried soon, as the Java client does.
ADD_PARTITIONS_RETRY_BACKOFF_S = 0.02

ProducerFencedError: type[KafkaError] = KafkaError.for_code(90)
InvalidProducerEpochError: type[KafkaError] = KafkaError.for_code(47)
TransactionAbortableError: type[KafkaError] = KafkaError.for_code(120)
_CONCURRENT_TRANSACTIONS = 51
_RECOORDINATE = {15, 16}  # COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
_FENCED = {47, 90}  # INVALID_PRODUCER_EPOCH, PRODUCER_FENCED
# TOPIC_/GROUP_AUTHORIZATION_FAILED, UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION,
# FENCED_INSTANCE_ID, TRANSACTION_ABORTABLE: this transaction fails, the next may not.
_ABORTABLE = {29, 30, 25, 22, 82, 120}


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


class _Retry(Exception):
    """Inside a request loop: try again after a back-off (``recoordinate``: find the
    coordinator again first)."""

    def __init__(self, reason: str, recoordinate: bool = False, backoff_s: float | None = None) -> None:
        super().__init__(reason)
        self.recoordinate = recoordinate
        self.backoff_s = backoff_s


class TransactionManager:
    """State, coordinator and requests of one transactional id (thread-safe: the
    application thread ends transactions, the sender thread adds partitions)."""

    def __init__(self, network: NetworkClient, transactional_id: str, transaction_timeout_ms: int,
                 idempotence, *, retry_backoff_s: float, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep,
                 on_state: Callable[["TxnState"], None] = lambda state: None) -> None:
        self.network = network
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.idempotence = idempotence
        self.retry_backoff_s = retry_backoff_s
        self.clock = clock
        self.sleep = sleep
        self._on_state = on_state
        self._lock = threading.RLock()
        self.state = TxnState.UNINITIALIZED
        self.last_error: PylogError | None = None
        self.partitions: set[TopicPartition] = set()  # added to the current transaction
        self._started = False  # a partition or offsets added: EndTxn is needed
        self._coordinators: dict[tuple[int, str], BrokerEndpoint] = {}

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

        response = self._at_coordinator(operation, ApiKey.INIT_PRODUCER_ID, TRANSACTION_KEY,
                                        self.transactional_id, lambda version: {
                                            "transactional_id": self.transactional_id,
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
            self._in_transaction(lambda: self._at_coordinator(
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
        self._in_transaction(lambda: self._at_coordinator(
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
                    except _Retry as exc:
                        retry = retry or exc
            if retry is not None:
                raise retry

        self._in_transaction(lambda: self._at_coordinator(
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
                    except _Retry:
                        raise
                    except PylogError as exc:
                        failed = failed or exc
            if failed is not None:
                raise failed

        try:
            self._in_transaction(lambda: self._at_coordinator(
                operation, ApiKey.ADD_PARTITIONS_TO_TXN, TRANSACTION_KEY, self.transactional_id,
                body, handle, deadline=None, attempts=1))
        except _Retry as exc:
            first = not self.partitions and not self._started
            raise RetryLater(str(exc), ADD_PARTITIONS_RETRY_BACKOFF_S if first else None) from None
        with self._lock:
            self.partitions.update(partitions)
            self._started = True

    # -- requests --------------------------------------------------------------------

    def _at_coordinator(self, operation: str, api_key: int, key_type: int, key: str,
                        body: Callable[[int], dict], handle: Callable[[dict], Any],
                        deadline: float | None, attempts: int | None = None) -> Any:
        """``handle(response)`` of ``body(version)`` sent to the coordinator of ``key``,
        retried (finding the coordinator again when it moved) until ``deadline``, or
        ``attempts`` times (then the last _Retry is raised)."""
        failures = 0
        while True:
            try:
                endpoint = self._coordinator(key_type, key)
                conn = self.network.connection(endpoint.host, endpoint.port)
                with conn.lock:
                    version = _version(conn, api_key)
                    response = conn.request(api_key, body(version), version)
                return handle(response)
            except _Retry as exc:
                retry = exc
            except (RetriableError, NetworkExceptionError) as exc:
                retry = _Retry(f"{operation}: {exc}", recoordinate=True)
            except UnsupportedVersionError as exc:
                raise self.fatal(exc)
            if retry.recoordinate:
                self._coordinators.pop((key_type, key), None)
            failures += 1
            if attempts is not None and failures >= attempts:
                raise retry
            delay = retry.backoff_s if retry.backoff_s is not None else \
                backoff_delay(self.retry_backoff_s, failures)
            if deadline is not None and self.clock() + delay > deadline:
                raise RequestTimedOutError(f"{operation} did not complete in time ({retry}); "
                                           f"call it again to go on waiting")
            log.debug("%s: retrying (%s)", operation, retry)
            self.sleep(delay)

    def _coordinator(self, key_type: int, key: str) -> BrokerEndpoint:
        found = self._coordinators.get((key_type, key))
        if found is not None:
            return found

        def body(version: int) -> dict:
            if version >= 4:
                return {"key_type": key_type, "coordinator_keys": [key]}
            return {"key": key, "key_type": key_type}

        response = self.network.request_any(ApiKey.FIND_COORDINATOR, body)
        answer = response["coordinators"][0] if response.get("coordinators") else response
        what = "transaction" if key_type == TRANSACTION_KEY else "group"
        self._check(f"find the {what} coordinator of {key!r}", answer["error_code"])
        found = BrokerEndpoint(answer["node_id"], answer["host"], answer["port"])
        self._coordinators[(key_type, key)] = found
        return found

    def _check(self, operation: str, code: int) -> None:
        """Sort a response's error code: retry (_Retry), fatal (the producer's state
        becomes FATAL_ERROR) or abortable (raised, the caller decides)."""
        if not code:
            return
        cls = KafkaError.for_code(code)
        message = f"{operation}: {cls.name}: {cls.description}"
        if code in _RECOORDINATE:
            raise _Retry(message, recoordinate=True)
        if code == _CONCURRENT_TRANSACTIONS or issubclass(cls, RetriableError):
            raise _Retry(message)
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


_OPERATION_NOT_ATTEMPTED = 55
_HINTS = {
    TxnState.UNINITIALIZED: "call init_transactions first",
    TxnState.INITIALIZING: "init_transactions has not completed; call it again",
    TxnState.READY: "no transaction in progress; call begin_transaction first",
    TxnState.IN_TRANSACTION: "a transaction is in progress; commit or abort it first",
    TxnState.COMMITTING: "the transaction is being committed; call commit_transaction again",
    TxnState.ABORTING: "the transaction is being aborted; call abort_transaction again",
}


def _version(conn: BrokerConnection, api_key: int) -> int:
    """The highest version of a transaction API both sides support (connects first)."""
    conn.connect()
    ours = TXN_VERSIONS[api_key]
    theirs = conn.versions.get(api_key)
    if theirs is None or min(ours[1], theirs[1]) < max(ours[0], theirs[0]):
        raise UnsupportedVersionError(f"broker {conn.address} does not support "
                                      f"{ApiKey(api_key).name} v{ours[0]}-{ours[1]}")
    return min(ours[1], theirs[1])
