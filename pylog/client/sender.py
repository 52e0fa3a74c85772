"""The producer's background sender thread.

Loop: wait until a batch is ready (full, lingered long enough, or a flush/close), drain
the ready batches, group them by partition leader, and send one Produce request per
leader carrying at most one batch per partition (up to ``max_in_flight`` requests are
written before the responses are read). Each batch then ends in exactly one of:

* delivered -- every record future (or ``on_delivery`` callback) gets a RecordMetadata;
* retried -- a retriable error (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, a
  timeout, a dead connection) puts it back at the head of its queue after a back-off
  (``retry_backoff_ms``, doubling per attempt up to a second), with metadata marked
  stale so the next send finds the new leader;
* failed -- a non-retriable error, ``retries`` used up or ``delivery_timeout_ms`` passed:
  every record future or callback gets the exception (records nobody waits for are
  counted in a warning). Nothing is dropped silently.

Idempotence (:class:`Idempotence`, as the Java client does it): the sender takes a
producer id with InitProducerId before it sends, and numbers each partition's batches
when they are first sent; a retry resends the same bytes, so the broker answers a batch
it already wrote with its first offsets. Retried batches go back in sequence order. An
OUT_OF_ORDER_SEQUENCE_NUMBER behind a batch still being retried is retried too; one for
the next expected sequence, UNKNOWN_PRODUCER_ID, or a batch given up on, makes the
sender take a new producer id and number the unacknowledged batches again. That is safe
here because the sender has no request in flight between two rounds of sends.

Transactions (``txn``, a :class:`~pylog.client.txn_manager.TransactionManager`): the
producer id comes from ``init_transactions``, never from the sender. Before the first
batch of a partition goes out in a transaction, the sender adds the partition with
AddPartitionsToTxn (one request for every new partition of a round; batches wait and
retry while the coordinator is busy). While the transaction is aborting or has failed,
drained batches fail instead of being sent. A batch that fails makes the transaction
abortable (fenced: the producer fatal); a sequence gap is not repaired here but by the
new epoch ``abort_transaction`` takes.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

from pylog.client.accumulator import ProducerBatch, RecordAccumulator
from pylog.client.futures import deliver, unwatched
from pylog.client.network import NetworkClient, backoff_delay
from pylog.client.txn_manager import RetryLater, TransactionManager
from pylog.errors import (
    InvalidProducerEpochError, KafkaError, OutOfOrderSequenceNumberError, PylogError, RequestTimedOutError,
    RetriableError, UnknownProducerIdError)
from pylog.protocol import ApiKey
from pylog.types import TopicPartition

log = logging.getLogger(__name__)
_IDLE_WAIT_S = 1.0
_SEQUENCE_ERRORS = (OutOfOrderSequenceNumberError, UnknownProducerIdError, InvalidProducerEpochError)


_SEQUENCES = 2**31


class Idempotence:
    """An idempotent producer's id, epoch and per-partition sequence numbers."""

    def __init__(self) -> None:
        self.producer_id = -1
        self.epoch = -1
        self.needs_reset = True
        self.next_sequence: dict[TopicPartition, int] = {}
        self.last_acked: dict[TopicPartition, int] = {}

    def reset(self, producer_id: int, epoch: int) -> None:
        self.producer_id, self.epoch, self.needs_reset = producer_id, epoch, False
        self.next_sequence.clear()
        self.last_acked.clear()

    def assign(self, batch: ProducerBatch) -> None:
        """Number a batch the first time it is sent."""
        if batch.sequence is None:
            sequence = self.next_sequence.get(batch.tp, 0)
            batch.stamp(self.producer_id, self.epoch, sequence)
            self.next_sequence[batch.tp] = (sequence + batch.record_count) % _SEQUENCES

    def acked(self, batch: ProducerBatch) -> None:
        if batch.sequence is not None:
            last = (batch.sequence + batch.record_count - 1) % _SEQUENCES
            acked = self.last_acked.get(batch.tp)
            if acked is None or _before(acked, last):  # a late answer for an earlier batch
                self.last_acked[batch.tp] = last         # does not move it back

    def is_next(self, batch: ProducerBatch) -> bool:
        """Whether ``batch`` is the next one the broker should take for its partition."""
        return batch.sequence == (self.last_acked.get(batch.tp, -1) + 1) % _SEQUENCES


def _before(a: int, b: int) -> bool:
    """Whether sequence ``a`` comes before ``b`` (sequences wrap at 2**31; only sequences
    a few batches apart are compared)."""
    return a != b and (b - a) % _SEQUENCES < _SEQUENCES // 2


class Sender(threading.Thread):
    def __init__(self, network: NetworkClient, accumulator: RecordAccumulator, *, acks: int,
                 retries: int, retry_backoff_s: float, request_timeout_ms: int,
                 delivery_timeout_s: float, max_in_flight: int, clock: Callable[[], float],
                 idempotence: Idempotence | None = None,
                 txn: TransactionManager | None = None) -> None:
        super().__init__(name="pylog-producer-sender", daemon=True)
        self.network = network
        self.acc = accumulator
        self.acks = acks
        self.retries = retries
        self.retry_backoff_s = retry_backoff_s
        self.request_timeout_ms = request_timeout_ms
        self.delivery_timeout_s = delivery_timeout_s
        self.max_in_flight = max(1, max_in_flight)
        self.clock = clock
        self.closing = False
        self.idempotence = idempotence
        self.txn = txn
        self.transactional_id = None if txn is None else txn.transactional_id

    def run(self) -> None:
        while True:
            batches = self._wait_for_ready()
            if batches is None:
                return
            try:
                if self.txn is not None:
                    batches = self._admit(batches)
                if self.idempotence is not None and not self._number(batches):
                    continue
                self._send(batches)
            except Exception as exc:  # never lose a batch to a bug: fail it loudly
                log.exception("producer sender failed")
                for batch in batches:
                    if not batch.done:
                        self._fail(batch, exc)

    def _wait_for_ready(self) -> list[ProducerBatch] | None:
        acc = self.acc
        with acc.cond:
            while True:
                now = self.clock()
                wait = acc.next_ready_in(now)
                if wait == 0:
                    return acc.drain(now, force=bool(acc.flushing) or self.closing)
                if self.closing and acc.incomplete == 0:
                    return None
                acc.cond.wait(_IDLE_WAIT_S if wait is None else min(wait, _IDLE_WAIT_S))

    def _number(self, batches: list[ProducerBatch]) -> bool:
        """Give the batches producer id and sequences, taking a (new) producer id first if
        needed; False (the batches retried) if no broker gave one."""
        state = self.idempotence
        if state.needs_reset and self.txn is not None:
            error = self.txn.abortable(OutOfOrderSequenceNumberError(
                "a record of the transaction was lost between the sequence numbers; "
                "abort the transaction (that takes a new epoch)"))
            for batch in batches:
                self._fail(batch, error)
            return False
        if state.needs_reset:
            try:
                response = self.network.request_any(ApiKey.INIT_PRODUCER_ID, {
                    "transactional_id": None, "transaction_timeout_ms": 60000,
                    "producer_id": -1, "producer_epoch": -1})
                if response["error_code"]:
                    cls = KafkaError.for_code(response["error_code"])
                    raise cls(f"InitProducerId failed: {cls.name}")
            except PylogError as exc:
                for batch in batches:
                    if isinstance(exc, RetriableError) or not isinstance(exc, KafkaError):
                        self._retry_or_fail(batch, exc)  # no broker reachable: try again
                    else:
                        self._fail(batch, exc)  # e.g. not authorized
                return False
            with self.acc.cond:  # renumber every unacknowledged batch under the new id
                for batch in self.acc.queued_sequenced():
                    batch.stamp(-1, -1, None)
            for batch in batches:
                batch.stamp(-1, -1, None)
            state.reset(response["producer_id"], response["producer_epoch"])
            log.debug("idempotent producer id %d epoch %d", state.producer_id, state.epoch)
        for batch in batches:
            state.assign(batch)
        return True

    def _admit(self, batches: list[ProducerBatch]) -> list[ProducerBatch]:
        """The batches a transaction lets go now: their partitions added first (the others
        wait and retry, or fail with the transaction's error)."""
        refusal = self.txn.batch_refusal()
        if refusal is not None:
            for batch in batches:
                self._fail(batch, refusal)
            return []
        added = self.txn.partitions
        new = {batch.tp for batch in batches if batch.tp not in added}
        if not new:
            return batches
        try:
            self.txn.add_partitions(new)
        except RetryLater as exc:
            for batch in reversed([b for b in batches if b.tp in new]):  # each goes to the head
                self._retry_or_fail(batch, exc, exc.backoff_s)
            return [b for b in batches if b.tp not in new]
        except PylogError as exc:
            for batch in batches:
                self._fail(batch, exc)
            return []
        return batches

    def _send(self, batches: list[ProducerBatch]) -> None:
        by_leader: dict[int, list[ProducerBatch]] = {}
        # A partition's leader is looked up once: its batches all go, or all wait. A later
        # batch sent while an earlier one waits would be written first (and the earlier
        # one, if a stopped broker wrote it after all, would fall out of the broker's
        # memory of recent sequences and never be acknowledged).
        leaders: dict[TopicPartition, int | PylogError] = {}
        now = self.clock()
        for batch in batches:
            if now - batch.created > self.delivery_timeout_s:
                self._fail(batch, RequestTimedOutError(
                    f"{batch.tp}: not delivered within delivery_timeout_ms "
                    f"({self.delivery_timeout_s * 1000:.0f} ms)"))
                continue
            leader = leaders.get(batch.tp)
            if leader is None:
                try:
                    leader = self.network.leader_id(batch.tp)
                except PylogError as exc:
                    leader = exc
                leaders[batch.tp] = leader
            if isinstance(leader, RetriableError):
                self._retry_or_fail(batch, leader)
            elif isinstance(leader, PylogError):
                self._fail(batch, leader)
            else:
                by_leader.setdefault(leader, []).append(batch)
        for leader, group in by_leader.items():
            self._send_to_leader(leader, group)

    def _send_to_leader(self, leader: int, batches: list[ProducerBatch]) -> None:
        # At most one batch per partition in a request keeps order: a partition's k-th
        # batch goes in the k-th request.
        requests: list[list[ProducerBatch]] = []
        earlier: dict[TopicPartition, int] = {}
        for batch in batches:
            k = earlier.get(batch.tp, 0)
            earlier[batch.tp] = k + 1
            if k == len(requests):
                requests.append([])
            requests[k].append(batch)
        for start in range(0, len(requests), self.max_in_flight):
            if not self._send_requests(leader, requests[start:start + self.max_in_flight]):
                # The connection failed: sending the later batches now would put them
                # ahead of the retried ones (more than max_in_flight unacknowledged).
                now = self.clock()
                for request in requests[start + self.max_in_flight:]:
                    for batch in request:
                        self.acc.reenqueue(batch, now)
                return

    def _send_requests(self, leader: int, requests: list[list[ProducerBatch]]) -> bool:
        """Send up to ``max_in_flight`` requests and handle their answers; False if the
        connection failed on the way."""
        unanswered = [b for request in requests for b in request]
        try:
            conn = self.network.broker_connection(leader)
            with conn.lock:
                version = conn.version_for(ApiKey.PRODUCE)
                pending = [(conn.send(ApiKey.PRODUCE, self._body(r), version), r) for r in requests]
                for handle, request in pending:
                    if self.acks == 0:
                        for batch in request:
                            self._succeed(batch, -1, -1)
                    else:
                        self._handle_response(conn.receive(handle), request)
                    unanswered = [b for b in unanswered if b not in request]
        except RetriableError as exc:
            self.network.mark_stale()
            for batch in unanswered:
                self._retry_or_fail(batch, exc)
            return False
        except PylogError as exc:
            for batch in unanswered:
                self._fail(batch, exc)
            return False
        return True

    def _body(self, request: list[ProducerBatch]) -> dict:
        topics: dict[str, list] = {}
        for batch in request:
            topics.setdefault(batch.tp.topic, []).append(
                {"index": batch.tp.partition, "records": batch.encoded()})
        return {"transactional_id": self.transactional_id, "acks": self.acks, "timeout_ms": self.request_timeout_ms,
                "topic_data": [{"name": t, "partition_data": ps} for t, ps in topics.items()]}

    def _handle_response(self, response: dict, request: list[ProducerBatch]) -> None:
        by_tp = {(b.tp.topic, b.tp.partition): b for b in request}
        for topic in response["responses"]:
            for p in topic["partition_responses"]:
                batch = by_tp.pop((topic["name"], p["index"]), None)
                if batch is None:
                    continue
                code = p["error_code"]
                if code == 0:
                    self._succeed(batch, p["base_offset"], p.get("log_append_time_ms", -1))
                    continue
                cls = KafkaError.for_code(code)
                detail = p.get("error_message") or cls.description
                exc = cls(f"produce to {batch.tp} failed: {cls.name}: {detail}")
                if self.idempotence is not None and cls in _SEQUENCE_ERRORS:
                    self._sequence_error(batch, cls, exc)
                elif issubclass(cls, RetriableError):
                    self.network.mark_stale()
                    self._retry_or_fail(batch, exc)
                else:
                    self._fail(batch, exc)
        for batch in by_tp.values():
            self._retry_or_fail(batch, KafkaError.for_code(3)(f"no produce answer for {batch.tp}"))

    def _sequence_error(self, batch: ProducerBatch, cls: type, exc: KafkaError) -> None:
        """OUT_OF_ORDER behind an unacknowledged batch: retry in order. Otherwise the
        broker lost or never had this producer's state: a new producer id, then retry."""
        state = self.idempotence
        if cls is OutOfOrderSequenceNumberError and not state.is_next(batch):
            self._retry_or_fail(batch, exc)
            return
        state.needs_reset = True
        if cls is InvalidProducerEpochError:
            self._fail(batch, exc)
        else:
            self._retry_or_fail(batch, exc)

    def _retry_or_fail(self, batch: ProducerBatch, exc: PylogError, backoff_s: float | None = None) -> None:
        batch.attempts += 1
        now = self.clock()
        if batch.attempts > self.retries or now - batch.created > self.delivery_timeout_s:
            self._fail(batch, exc)
            return
        log.debug("retrying %s (attempt %d): %s", batch.tp, batch.attempts, exc)
        if backoff_s is None:
            backoff_s = backoff_delay(self.retry_backoff_s, batch.attempts)
        self.acc.reenqueue(batch, now + backoff_s)

    def _succeed(self, batch: ProducerBatch, base_offset: int, log_append_time: int) -> None:
        if self.idempotence is not None:
            self.idempotence.acked(batch)
        batch.done = True
        if batch.waiters:  # nobody waits for any record: no per-record work
            if log_append_time is not None and log_append_time >= 0:
                timestamps = [log_append_time] * batch.record_count
            else:
                timestamps = batch.records.timestamps()
            deliver(batch.condition, batch.waiters, batch.tp.topic, batch.tp.partition, base_offset, timestamps,
                    has_futures=batch.has_futures)
        self.acc.complete(batch)

    def _fail(self, batch: ProducerBatch, exc: BaseException) -> None:
        if batch.done:
            return
        if self.idempotence is not None and batch.sequence is not None:
            self.idempotence.needs_reset = True  # a gap in the sequence: renumber after it
        if self.txn is not None:
            exc = self.txn.record_failed(exc)
        batch.done = True
        deliver(batch.condition, batch.waiters, batch.tp.topic, batch.tp.partition, -1,
                batch.records.timestamps(), exc, batch.has_futures)
        lost = unwatched(batch.waiters, batch.record_count)
        if lost and self.txn is None:  # a transaction reports it when it ends
            log.warning("%d records to %s failed with no future or on_delivery callback "
                        "waiting for them: %s", lost, batch.tp, exc)
        self.acc.complete(batch)
