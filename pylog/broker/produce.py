"""Produce: validate each partition's batches and append them to the partition log.

Every partition gets its own error code, so one bad partition costs only itself:
CORRUPT_MESSAGE (framing, magic, CRC), MESSAGE_TOO_LARGE (a batch over
``message.max.bytes``), RECORD_LIST_TOO_LARGE, UNKNOWN_TOPIC_OR_PARTITION,
NOT_LEADER_OR_FOLLOWER, INVALID_TOPIC_EXCEPTION. Versions 0-2 (the old message formats)
are advertised so librdkafka keeps compression on, but refused with UNSUPPORTED_VERSION.
acks=0 gets no response at all; acks=1 is answered after the leader's append.

acks=-1 (all) in cluster mode: a partition whose ISR is smaller than its
``min.insync.replicas`` gets NOT_ENOUGH_REPLICAS and nothing is written. Otherwise the
batches are appended and the request becomes a ``ProduceWork`` that the network layer
parks (no thread waits) until every partition's high watermark has passed what it
appended: then OK, or NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below the
minimum meanwhile; NOT_LEADER_OR_FOLLOWER if leadership moved to a new epoch (the append
may be truncated away by the new leader); REQUEST_TIMED_OUT after the request's timeout.
Standalone, acks=-1 is acks=1: the broker is the whole ISR.

Transactions: a control batch from a client is INVALID_RECORD (only WriteTxnMarkers
writes markers), and so is a transactional batch without a producer id; transactional
batches in a request without a ``transactional_id`` get
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka answers them. A producer fenced by a newer
epoch (a transaction the coordinator aborted) gets INVALID_PRODUCER_EPOCH. A leader that
verifies transactions (KIP-890 part 1, :mod:`pylog.broker.txn_verification`) asks the
coordinator before a producer's first transactional batch of a transaction: a partition
not in the producer's transaction gets INVALID_TXN_STATE and nothing is written.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from pylog.broker.partitions import PartitionLogs
from pylog.broker.replica import Role
from pylog.broker.txn_verification import TxnVerifier, produce_error
from pylog.cluster.placement import INTERNAL_TOPICS, validate_topic_name
from pylog.errors import (
    CorruptMessageError, InvalidProducerIdMappingError, InvalidRequiredAcksError,
    InvalidTimestampError, InvalidTopicError, InvalidTxnStateError, KafkaError,
    NetworkExceptionError, NotEnoughReplicasAfterAppendError, NotEnoughReplicasError,
    NotLeaderOrFollowerError, RequestTimedOutError, UnsupportedVersionError)
from pylog.log.producer_state import SENTINEL, VerificationGuard
from pylog.records.header import read_batch_header
from pylog.types import TopicPartition

log = logging.getLogger(__name__)

MIN_SERVED_VERSION = 3


def _partition_result(index: int, error: KafkaError | None = None, base_offset: int = -1,
                      log_start_offset: int = -1) -> dict:
    return {"index": index, "error_code": 0 if error is None else error.errno,
            "base_offset": base_offset, "log_append_time_ms": -1,
            "log_start_offset": log_start_offset, "record_errors": [],
            "error_message": None if error is None else str(error)}


@dataclass
class PendingAppend:
    """An acks=all append waiting for the ISR: done when the high watermark reaches
    ``required_offset`` while the replica still leads in ``leader_epoch`` (shared with
    the transaction markers of :mod:`pylog.broker.txn_markers`)."""

    result: dict
    replica: object
    leader_epoch: int
    required_offset: int


@dataclass
class PartitionWaits:
    """A request parked until each of its partitions is settled: ``attempt`` until it
    returns the response body. ``settle`` says whether one partition is done (its result
    filled in) or still waiting."""

    response: dict
    pending: dict[TopicPartition, object]
    deadline: float  # clock seconds
    partitions: list[TopicPartition] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.partitions = list(self.pending)

    def attempt(self, final: bool) -> dict | None:
        for tp, waiting in list(self.pending.items()):
            if self.settle(waiting, final):
                del self.pending[tp]
        return None if self.pending else self.response

    def settle(self, waiting, final: bool) -> bool:
        raise NotImplementedError


class ProduceWork(PartitionWaits):
    """An acks=all Produce whose appends wait for the ISR."""

    def settle(self, waiting: PendingAppend, final: bool) -> bool:
        error = still_waiting(waiting, final)
        if error is False:
            return False
        if error is not None:
            waiting.result.update(error_code=error.errno, error_message=str(error))
        return True


def still_waiting(waiting: PendingAppend, final: bool):
    """False while waiting; else None (done) or the error to answer with.

    Only a new leader epoch (or this broker following someone) fails the wait: while the
    broker merely hides its leadership (its ZooKeeper session is in doubt, e.g. after a
    pause), the append may still count, and answering NOT_LEADER_OR_FOLLOWER would make
    the client resend a batch the log keeps, writing it twice.
    """
    replica = waiting.replica
    role, epoch, isr = replica.role_snapshot()
    if epoch != waiting.leader_epoch or role is Role.FOLLOWER:
        return NotLeaderOrFollowerError(f"leadership of {replica.tp} moved while waiting "
                                        "for the in-sync replicas")
    if role is Role.LEADER and replica.log.high_watermark >= waiting.required_offset:
        min_isr = replica.log.config.min_insync_replicas
        if len(isr) < min_isr:
            return NotEnoughReplicasAfterAppendError(
                f"{replica.tp}: written, but the ISR {list(isr)} is smaller than "
                f"min.insync.replicas={min_isr}")
        return None
    if final:
        return RequestTimedOutError(f"{replica.tp}: the in-sync replicas did not confirm "
                                    "the append in time")
    return False


def handle_produce(body: dict, version: int, logs: PartitionLogs,
                   now: float = 0.0) -> dict | ProduceWork | None:
    """The response body, None for acks=0, or a ProduceWork for acks=all to wait on."""
    return handle_produce_many([(body, version)], logs, now)[0]


def handle_produce_many(requests: list[tuple[dict, int]], logs: PartitionLogs,
                        now: float = 0.0) -> list[dict | ProduceWork | None]:
    """Answer several Produce requests of one connection, ``(body, version)`` each, as
    handling them one after another would: each partition's batches are appended in
    request order, with one write per partition for all of them (group commit; see
    :meth:`pylog.log.Log.append_many`). A request that must wait for the ISR (acks=all
    in a cluster) parks its connection, so it only ever comes alone; so does a
    transactional one on a broker that verifies transactions (it may wait for the
    coordinator's answer: a ``VerifyingProduce``)."""
    verifier = logs.txn_verifier
    if verifier is not None and any(_verifiable(body) for body, _ in requests):
        if len(requests) > 1:
            return [handle_produce_many([request], logs, now)[0] for request in requests]
        body, version = requests[0]
        return [_verify_then_produce(body, version, logs, now, verifier)]
    return _produce_many(requests, logs, now)


def _produce_many(requests: list[tuple[dict, int]], logs: PartitionLogs, now: float,
                  allowed: dict | None = None, refused: dict | None = None
                  ) -> list[dict | ProduceWork | None]:
    """``handle_produce_many`` once any verification is done: ``allowed`` maps (topic,
    partition) to the guard its transactional batches are appended with (SENTINEL if
    not listed), ``refused`` to the error that fails it unwritten."""
    staged: dict[tuple[str, int], list[tuple]] = {}
    answers = []
    for body, version in requests:
        acks = body["acks"]
        transactional = body.get("transactional_id") is not None
        pending: dict[TopicPartition, PendingAppend] = {}
        topics_out = []
        for topic_data in body["topic_data"]:
            name = topic_data["name"]
            results = []
            for partition_data in topic_data["partition_data"]:
                index = partition_data["index"]
                result = _stage_partition(name, partition_data, version, acks)
                if result is None and refused and (name, index) in refused:
                    result = _refused(name, index, refused[name, index])
                if result is None:
                    result = _partition_result(index)
                    allow = (transactional if allowed is None
                             else allowed.get((name, index), SENTINEL))
                    staged.setdefault((name, index), []).append(
                        (partition_data["records"], allow, result, acks, pending))
                results.append(result)
            topics_out.append({"name": name, "partition_responses": results})
        answers.append((body, acks, topics_out, pending))
    for (topic, index), appends in staged.items():
        _append_staged(topic, index, appends, logs)
    out = []
    for body, acks, topics_out, pending in answers:
        if acks == 0:
            out.append(None)
            continue
        response = {"responses": topics_out, "throttle_time_ms": 0}
        if pending:
            work = ProduceWork(response, pending, now + max(body["timeout_ms"], 0) / 1000)
            out.append(work.attempt(final=False) or work)
        else:
            out.append(response)
    return out


def _verifiable(body: dict) -> bool:
    # acks=0 cannot wait for an answer (and no transactional client sends it)
    return body.get("transactional_id") is not None and body["acks"] != 0


def _verify_then_produce(body: dict, version: int, logs: PartitionLogs, now: float,
                         verifier: TxnVerifier) -> dict | ProduceWork | VerifyingProduce:
    """A transactional Produce on a verifying leader (KIP-890 part 1, see
    :mod:`pylog.broker.txn_verification`): each partition where the producer has no
    transaction open yet is verified with its coordinator first, and appended with the
    guard it got; the others are appended with SENTINEL (a batch that would open a
    transaction there now is refused)."""
    allowed: dict[tuple[str, int], VerificationGuard] = {}
    refused: dict[tuple[str, int], KafkaError] = {}
    to_verify: set[TopicPartition] = set()
    producer = None
    for topic_data in body["topic_data"]:
        name = topic_data["name"]
        for partition_data in topic_data["partition_data"]:
            index, records = partition_data["index"], partition_data["records"]
            try:
                header = None if records is None else read_batch_header(records)
            except KafkaError:
                continue  # the append refuses it as corrupt
            if header is None or not header.is_transactional or header.producer_id < 0:
                continue
            if producer is None:
                producer = (header.producer_id, header.producer_epoch)
            elif producer != (header.producer_id, header.producer_epoch):
                refused[name, index] = InvalidProducerIdMappingError(
                    "transactional records of more than one producer in one request")
                continue
            try:
                guard = logs.leader_log(name, index).start_verification(
                    header.producer_id, header.producer_epoch, header.base_sequence)
            except KafkaError:
                continue  # not the leader, unknown, closed: the append says so
            if guard is not None:
                allowed[name, index] = guard
                to_verify.add(TopicPartition(name, index))
    if not to_verify:
        return _produce_many([(body, version)], logs, now, allowed, refused)[0]
    work = VerifyingProduce(body, version, logs, now, allowed, refused, to_verify)
    errors = verifier.verify(body["transactional_id"], producer[0], producer[1], to_verify,
                             work.answered)
    if errors is None:
        return work
    work.errors = errors
    return work.attempt(final=False) or work


class VerifyingProduce:
    """A transactional Produce waiting for its coordinator's verification; then it is
    appended and answered (or, acks=all in a cluster, waits on as a ProduceWork)."""

    def __init__(self, body: dict, version: int, logs: PartitionLogs, now: float,
                 allowed: dict, refused: dict, to_verify: set[TopicPartition]) -> None:
        self.body, self.version, self.logs, self.now = body, version, logs, now
        self.allowed, self.refused, self.to_verify = allowed, refused, to_verify
        self.deadline = now + max(body["timeout_ms"], 0) / 1000
        self.key = object()  # what the verification's answer wakes
        self.partitions = [self.key] + [
            TopicPartition(t["name"], p["index"])
            for t in body["topic_data"] for p in t["partition_data"]]
        self.errors: dict[TopicPartition, int] | None = None
        self.appended: ProduceWork | None = None

    def answered(self, errors: dict[TopicPartition, int]) -> None:
        """The coordinator's answer (from the verifier's thread)."""
        self.errors = errors
        self.logs.waiters.notify(self.key)

    def attempt(self, final: bool) -> dict | None:
        if self.appended is not None:
            return self.appended.attempt(final)
        errors = self.errors
        if errors is None:
            if not final:
                return None
            errors = dict.fromkeys(self.to_verify, NetworkExceptionError.errno)
        refused = dict(self.refused)
        for tp, code in errors.items():
            if code:
                refused[tp.topic, tp.partition] = _verification_error(code)
        outcome = _produce_many([(self.body, self.version)], self.logs, self.now,
                                self.allowed, refused)[0]
        if not isinstance(outcome, ProduceWork):
            return outcome
        self.appended = outcome
        return outcome.attempt(final)


def _verification_error(code: int) -> KafkaError:
    code = produce_error(code)
    if code == InvalidTxnStateError.errno:
        return InvalidTxnStateError("the partition was not added to the transaction")
    if code == NotEnoughReplicasError.errno:
        return NotEnoughReplicasError("could not verify that the partition was added to the "
                                      "transaction; retry")
    return KafkaError.for_code(code)("transaction verification failed")


def _stage_partition(topic: str, partition_data: dict, version: int, acks: int) -> dict | None:
    """None if the partition's records may be appended, else its error result."""
    try:
        if version < MIN_SERVED_VERSION:
            raise UnsupportedVersionError(
                f"Produce v{version} (message format v0/v1) is not supported; use v3 or later")
        if acks not in (0, 1, -1):
            raise InvalidRequiredAcksError(f"acks must be 0, 1 or -1, got {acks}")
        validate_topic_name(topic)
        if topic in INTERNAL_TOPICS:
            raise InvalidTopicError(f"{topic} is an internal topic: only the brokers write it")
        if partition_data["records"] is None:
            raise CorruptMessageError("the records of a produce request may not be null")
    except KafkaError as error:
        return _refused(topic, partition_data["index"], error)
    return None


def _append_staged(topic: str, index: int, appends: list[tuple], logs: PartitionLogs) -> None:
    """Append one partition's staged records, ``(records, allow_transactional (a bool or
    a verification guard), result, acks, pending)`` each, filling in each result (and, for acks=all, its pending wait)."""
    batches = [(records, transactional) for records, transactional, *_ in appends]
    try:
        if logs.replicas is None:
            outcomes = logs.leader_log(topic, index).append_many(batches)
            replica = epoch = None
        else:
            outcomes, replica, epoch = logs.replicas.append_many_as_leader(
                TopicPartition(topic, index), batches,
                check_min_isr=any(acks == -1 for *_, acks, _ in appends))
    except KafkaError as error:
        outcomes = [error] * len(appends)
    for (_, _, result, acks, pending), outcome in zip(appends, outcomes):
        if isinstance(outcome, KafkaError):
            result.update(_refused(topic, index, outcome))
            continue
        result["base_offset"] = outcome.first_offset
        result["log_append_time_ms"] = outcome.log_append_time_ms
        result["log_start_offset"] = outcome.log_start_offset
        if acks == -1 and replica is not None:
            pending[TopicPartition(topic, index)] = PendingAppend(result, replica, epoch,
                                                                  outcome.last_offset + 1)


def _refused(topic: str, index: int, error: KafkaError) -> dict:
    log.debug("produce to %s-%d refused: %s", topic, index, error)
    result = _partition_result(index, error)
    # Which records were bad (Kafka's RecordError): the producer fails those as
    # INVALID_RECORD and the rest of the batch as collateral.
    reason = ("timestamp out of range" if isinstance(error, InvalidTimestampError)
              else "a compacted topic cannot accept a record without a key")
    result["record_errors"] = [{"batch_index": i, "batch_index_error_message": reason}
                               for i in getattr(error, "batch_indexes", ())]
    return result
