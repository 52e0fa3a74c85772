"""The error codes the transaction coordinator answers with, from pylog's one error tree."""

from __future__ import annotations

from pylog import errors
from pylog.errors import KafkaError

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = errors.UnknownTopicOrPartitionError.errno
COORDINATOR_LOAD_IN_PROGRESS = errors.CoordinatorLoadInProgressError.errno
COORDINATOR_NOT_AVAILABLE = errors.CoordinatorNotAvailableError.errno
NOT_COORDINATOR = errors.NotCoordinatorError.errno
INVALID_REQUEST = errors.InvalidRequestError.errno
INVALID_PRODUCER_EPOCH = errors.InvalidProducerEpochError.errno
INVALID_TXN_STATE = errors.InvalidTxnStateError.errno
INVALID_PRODUCER_ID_MAPPING = errors.InvalidProducerIdMappingError.errno
INVALID_TRANSACTION_TIMEOUT = errors.InvalidTransactionTimeoutError.errno
CONCURRENT_TRANSACTIONS = errors.ConcurrentTransactionsError.errno
OPERATION_NOT_ATTEMPTED = errors.OperationNotAttemptedError.errno
PRODUCER_FENCED = errors.ProducerFencedError.errno
TRANSACTIONAL_ID_NOT_FOUND = errors.TransactionalIdNotFoundError.errno
UNKNOWN_PRODUCER_ID = errors.UnknownProducerIdError.errno
TRANSACTION_COORDINATOR_FENCED = errors.TransactionCoordinatorFencedError.errno
UNSUPPORTED_FOR_MESSAGE_FORMAT = errors.UnsupportedForMessageFormatError.errno
TRANSACTION_ABORTABLE = errors.TransactionAbortableError.errno


def coordinator_error(error: KafkaError) -> int:
    """What a transactional client is told about a failed state write (Kafka's mapping in
    TransactionStateManager.appendTransactionToLog)."""
    if error.errno in (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE):
        return error.errno
    if error.errno in (6, 56):  # NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR
        return NOT_COORDINATOR
    if error.errno in (3, 19, 20, 7):  # UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS(_AFTER_
        return COORDINATOR_NOT_AVAILABLE  # APPEND), REQUEST_TIMED_OUT
    return errors.UnknownServerError.errno


def error_name(code: int) -> str:
    """An error code as a log line names it: ``NOT_LEADER_OR_FOLLOWER (6)``."""
    error = KafkaError.for_code(code)
    return f"{error.name if error.errno == code else 'error'} ({code})"


def fenced_for(version: int, first_fenced_version: int, error: int) -> int:
    """PRODUCER_FENCED as clients of ``version`` understand it: before
    ``first_fenced_version`` it was INVALID_PRODUCER_EPOCH."""
    if error == PRODUCER_FENCED and version < first_fenced_version:
        return INVALID_PRODUCER_EPOCH
    return error
