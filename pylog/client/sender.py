"""The producer's background sender thread.

Loop: wait until a batch is ready (full, lingered long enough, or a flush/close), drain
the ready batches, group them by partition leader, and send one Produce request per
leader carrying at most one batch per partition (up to ``max_in_flight`` requests are
written before the responses are read). Each batch then ends in exactly one of:

* delivered -- every record future gets a RecordMetadata;
* retried -- a retriable error (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, a
  timeout, a dead connection) puts it back at the head of its queue after a back-off
  (``retry_backoff_ms``, doubling per attempt up to a second), with metadata marked
  stale so the next send finds the new leader;
* failed -- a non-retriable error, ``retries`` used up or ``delivery_timeout_ms`` passed:
  every record future gets the exception. Nothing is dropped silently.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

from pylog.client.accumulator import ProducerBatch, RecordAccumulator
from pylog.client.futures import settle_all
from pylog.client.network import NetworkClient, backoff_delay
from pylog.client.results import RecordMetadata
from pylog.errors import KafkaError, PylogError, RequestTimedOutError, RetriableError
from pylog.protocol import ApiKey

log = logging.getLogger(__name__)
_IDLE_WAIT_S = 1.0


class Sender(threading.Thread):
    def __init__(self, network: NetworkClient, accumulator: RecordAccumulator, *, acks: int,
                 retries: int, retry_backoff_s: float, request_timeout_ms: int,
                 delivery_timeout_s: float, max_in_flight: int, clock: Callable[[], float]) -> None:
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

    def run(self) -> None:
        while True:
            batches = self._wait_for_ready()
            if batches is None:
                return
            try:
                self._send(batches)
            except Exception as exc:  # never lose a batch to a bug: fail it loudly
                log.exception("producer sender failed")
                for batch in batches:
                    if batch.futures and not batch.futures[0].done():
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

    def _send(self, batches: list[ProducerBatch]) -> None:
        by_leader: dict[int, list[ProducerBatch]] = {}
        now = self.clock()
        for batch in batches:
            if now - batch.created > self.delivery_timeout_s:
                self._fail(batch, RequestTimedOutError(
                    f"{batch.tp}: not delivered within delivery_timeout_ms "
                    f"({self.delivery_timeout_s * 1000:.0f} ms)"))
                continue
            try:
                leader = self.network.leader_id(batch.tp)
            except RetriableError as exc:
                self._retry_or_fail(batch, exc)
                continue
            except PylogError as exc:
                self._fail(batch, exc)
                continue
            by_leader.setdefault(leader, []).append(batch)
        for leader, group in by_leader.items():
            self._send_to_leader(leader, group)

    def _send_to_leader(self, leader: int, batches: list[ProducerBatch]) -> None:
        requests: list[list[ProducerBatch]] = []
        for batch in batches:  # at most one batch per partition in a request keeps order
            for request in requests:
                if all(b.tp != batch.tp for b in request):
                    request.append(batch)
                    break
            else:
                requests.append([batch])
        for start in range(0, len(requests), self.max_in_flight):
            self._send_requests(leader, requests[start:start + self.max_in_flight])

    def _send_requests(self, leader: int, requests: list[list[ProducerBatch]]) -> None:
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
        except PylogError as exc:
            for batch in unanswered:
                self._fail(batch, exc)

    def _body(self, request: list[ProducerBatch]) -> dict:
        topics: dict[str, list] = {}
        for batch in request:
            topics.setdefault(batch.tp.topic, []).append(
                {"index": batch.tp.partition, "records": batch.encoded()})
        return {"transactional_id": None, "acks": self.acks, "timeout_ms": self.request_timeout_ms,
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
                if issubclass(cls, RetriableError):
                    self.network.mark_stale()
                    self._retry_or_fail(batch, exc)
                else:
                    self._fail(batch, exc)
        for batch in by_tp.values():
            self._retry_or_fail(batch, KafkaError.for_code(3)(f"no produce answer for {batch.tp}"))

    def _retry_or_fail(self, batch: ProducerBatch, exc: PylogError) -> None:
        batch.attempts += 1
        now = self.clock()
        if batch.attempts > self.retries or now - batch.created > self.delivery_timeout_s:
            self._fail(batch, exc)
            return
        log.debug("retrying %s (attempt %d): %s", batch.tp, batch.attempts, exc)
        self.acc.reenqueue(batch, now + backoff_delay(self.retry_backoff_s, batch.attempts))

    def _succeed(self, batch: ProducerBatch, base_offset: int, log_append_time: int) -> None:
        topic, partition = batch.tp.topic, batch.tp.partition
        if log_append_time is not None and log_append_time >= 0:
            timestamps = [log_append_time] * len(batch.timestamps)
        else:
            timestamps = batch.timestamps
        if base_offset >= 0:
            results = [RecordMetadata(topic, partition, base_offset + i, ts) for i, ts in enumerate(timestamps)]
        else:
            results = [RecordMetadata(topic, partition, -1, ts) for ts in timestamps]
        settle_all(batch.condition, batch.futures, results)
        self.acc.complete(batch)

    def _fail(self, batch: ProducerBatch, exc: BaseException) -> None:
        settle_all(batch.condition, batch.futures, exception=exc)
        self.acc.complete(batch)
