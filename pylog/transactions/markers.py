"""Sending a transaction's COMMIT or ABORT markers to the leaders of its partitions.

``MarkerChannel.add(job)`` takes the markers of one transaction. Each partition is routed
to its current leader and queued for that broker; one sender thread per destination
broker (never one per transaction) sends everything queued for it as one WriteTxnMarkers
request, over the inter-broker listener with its security settings, and waits for the
answer (given once the markers are replicated). Per partition:

* no error, UNKNOWN_PRODUCER_ID, UNSUPPORTED_FOR_MESSAGE_FORMAT: done;
* INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED: a newer coordinator owns the
  transaction; this one stops sending it;
* anything else (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, a lost connection...):
  routed again from fresh metadata after a backoff, to whichever broker leads it now.

Markers for partitions this broker leads itself go over its own inter-broker listener,
as in Kafka; when it does not serve one (a standalone broker's inter-broker listener need
not be one of its listeners, nor its credentials set) they are written in-process through
``MarkerChannel.local`` (set by the broker: WriteTxnMarkers' handler, waited on until the
markers are replicated).

A partition whose topic was deleted is dropped. Once every partition of a job is done,
``on_written(job)`` runs (the coordinator then writes CompleteCommit/CompleteAbort).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from pylog.client.connection import BrokerConnection
from pylog.cluster.broker_link import BrokerLink, broker_address
from pylog.cluster.metadata import NO_LEADER, ClusterMetadata
from pylog.errors import KafkaError, PylogError, UnsupportedVersionError
from pylog.protocol import ApiKey
from pylog.transactions.codes import (
    INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED, UNKNOWN_PRODUCER_ID,
    UNSUPPORTED_FOR_MESSAGE_FORMAT, error_name)
from pylog.types import TopicPartition

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS_VERSIONS = (0, 1)
_DONE = frozenset({0, UNKNOWN_PRODUCER_ID, UNSUPPORTED_FOR_MESSAGE_FORMAT})
_FENCED = frozenset({INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED})
RETRY_BACKOFF_S = 0.1
# A broker that cannot take markers at all (no WriteTxnMarkers) is asked again this often.
UNSUPPORTED_BACKOFF_S = 2.0


@dataclass(eq=False)
class MarkerJob:
    """The markers of one transaction: ``remaining`` partitions still to be written."""

    transactional_id: str
    txn_partition: int  # its __transaction_state partition
    coordinator_epoch: int
    producer_id: int
    producer_epoch: int
    commit: bool
    remaining: set[TopicPartition] = field(default_factory=set)


class MarkerChannel:
    """Routes and sends marker jobs (see the module doc)."""

    def __init__(self, metadata: ClusterMetadata, listener: str | None, security,
                 local_id: int, on_written: Callable[[MarkerJob], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.metadata = metadata
        self.listener = listener
        self.security = security
        self.local_id = local_id
        self.on_written = on_written
        self.clock = clock
        self._lock = threading.Lock()
        self._jobs: dict[str, MarkerJob] = {}
        self._senders: dict[int, _BrokerSender] = {}
        self._unrouted: list[tuple[MarkerJob, TopicPartition]] = []
        self._stopped = False
        # body -> response of a WriteTxnMarkers request answered by this broker itself.
        self.local: Callable[[dict], dict] | None = None

    def add(self, job: MarkerJob) -> None:
        with self._lock:
            self._jobs[job.transactional_id] = job
        log.info("%s: writing %s markers (producer %d, epoch %d) to %d partitions",
                 job.transactional_id, "COMMIT" if job.commit else "ABORT", job.producer_id,
                 job.producer_epoch, len(job.remaining))
        if not job.remaining:
            self._finish(job)
            return
        for tp in list(job.remaining):
            self.route(job, tp, 0.0)

    def pending(self) -> int:
        with self._lock:
            return len(self._jobs)

    def remove_partition(self, txn_partition: int) -> None:
        """Stop sending the jobs of a ``__transaction_state`` partition no longer led."""
        with self._lock:
            for transactional_id, job in list(self._jobs.items()):
                if job.txn_partition == txn_partition:
                    del self._jobs[transactional_id]

    def current(self, job: MarkerJob) -> bool:
        with self._lock:
            return self._jobs.get(job.transactional_id) is job

    def route(self, job: MarkerJob, tp: TopicPartition, delay_s: float) -> None:
        """Queue ``tp`` of ``job`` for its leader's sender, after ``delay_s``."""
        if not self.current(job):
            return
        topic = self.metadata.topic(tp.topic)
        if topic is None or tp.partition not in topic.partitions:
            log.info("%s: dropping the marker of %s: the topic is gone", job.transactional_id, tp)
            self.done(job, tp)
            return
        leader = topic.partitions[tp.partition].leader
        live = {b.broker_id for b in self.metadata.brokers()}
        with self._lock:
            if self._stopped:
                return
            if leader == NO_LEADER or leader not in live:
                self._unrouted.append((job, tp))
                return
            sender = self._senders.get(leader)
            if sender is None or not sender.is_alive():
                sender = self._senders[leader] = _BrokerSender(self, leader)
                sender.start()
        sender.enqueue(job, tp, self.clock() + delay_s)

    def retry_unrouted(self) -> None:
        """Route again the partitions that had no live leader (called every round)."""
        with self._lock:
            waiting, self._unrouted = self._unrouted, []
        for job, tp in waiting:
            self.route(job, tp, 0.0)

    def done(self, job: MarkerJob, tp: TopicPartition) -> None:
        with self._lock:
            job.remaining.discard(tp)
            finished = not job.remaining and self._jobs.get(job.transactional_id) is job
        if finished:
            self._finish(job)

    def abandon(self, job: MarkerJob) -> None:
        """Stop sending ``job`` (if it is still the id's current one)."""
        with self._lock:
            if self._jobs.get(job.transactional_id) is job:
                del self._jobs[job.transactional_id]

    def _finish(self, job: MarkerJob) -> None:
        self.abandon(job)
        self.on_written(job)

    def address_of(self, broker_id: int):
        return broker_address(self.metadata, self.listener, broker_id)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            senders = list(self._senders.values())
            self._jobs.clear()
        for sender in senders:
            sender.stop()
        for sender in senders:
            sender.join(timeout=10)


class _BrokerSender(threading.Thread):
    """Sends the markers queued for one destination broker, batched per request."""

    def __init__(self, channel: MarkerChannel, broker_id: int) -> None:
        super().__init__(name=f"pylog-txn-markers-to-{broker_id}", daemon=True)
        self.channel = channel
        self.broker_id = broker_id
        self._cond = threading.Condition()
        self._queue: list[tuple[float, MarkerJob, TopicPartition]] = []
        self._stopping = False
        self._link = BrokerLink(broker_id, channel.address_of, lambda: channel.security,
                                f"pylog-txn-markers-{channel.local_id}", 60.0)
        self._failing = False

    def enqueue(self, job: MarkerJob, tp: TopicPartition, due: float) -> None:
        with self._cond:
            self._queue.append((due, job, tp))
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._link.close()

    def run(self) -> None:
        while True:
            batch = self._take_due()
            if batch is None:
                break
            try:
                self._send(batch)
                if self._failing:
                    log.info("markers to broker %d: sending again", self.broker_id)
                    self._failing = False
            except (KafkaError, PylogError, OSError) as error:
                backoff = (UNSUPPORTED_BACKOFF_S if isinstance(error, UnsupportedVersionError)
                           else RETRY_BACKOFF_S)
                # One warning per outage, not one per retry.
                log.log(logging.DEBUG if self._failing else logging.WARNING,
                        "markers to broker %d: %s; retrying every %.1f s", self.broker_id,
                        error, backoff)
                self._failing = True
                self._link.close()
                for job, tp in batch:
                    self.channel.route(job, tp, backoff)
        self._link.close()

    def _take_due(self) -> list[tuple[MarkerJob, TopicPartition]] | None:
        with self._cond:
            while not self._stopping:
                now = self.channel.clock()
                due = [(job, tp) for at, job, tp in self._queue if at <= now]
                if due:
                    self._queue = [e for e in self._queue if e[0] > now]
                    return [(job, tp) for job, tp in due if self.channel.current(job)]
                wait = min((at for at, _, _ in self._queue), default=now + 1.0) - now
                self._cond.wait(max(0.005, min(wait, 1.0)))
            return None

    def _send(self, batch: list[tuple[MarkerJob, TopicPartition]]) -> None:
        if not batch:
            return
        by_job: dict[int, tuple[MarkerJob, dict[str, list[int]]]] = {}
        for job, tp in batch:
            _, topics = by_job.setdefault(id(job), (job, {}))
            topics.setdefault(tp.topic, []).append(tp.partition)
        body = {"markers": [
            {"producer_id": job.producer_id, "producer_epoch": job.producer_epoch,
             "transaction_result": job.commit, "coordinator_epoch": job.coordinator_epoch,
             "topics": [{"name": name, "partition_indexes": parts}
                        for name, parts in topics.items()]}
            for job, topics in by_job.values()]}
        local = self.channel.local
        if (local is not None and self.broker_id == self.channel.local_id
                and self.channel.address_of(self.broker_id) is None):
            response = local(body)
        else:
            connection = self._link.connect()
            response = connection.request(ApiKey.WRITE_TXN_MARKERS, body,
                                          self._version(connection))
        answered: set[tuple[int, TopicPartition]] = set()
        by_producer = {job.producer_id: job for job, _ in by_job.values()}
        for marker in response["markers"]:
            job = by_producer.get(marker["producer_id"])
            if job is None:
                continue
            for topic in marker["topics"]:
                for partition in topic["partitions"]:
                    tp = TopicPartition(topic["name"], partition["partition_index"])
                    answered.add((id(job), tp))
                    self._outcome(job, tp, partition["error_code"])
        for job, tp in batch:
            if (id(job), tp) not in answered:
                self.channel.route(job, tp, RETRY_BACKOFF_S)

    def _outcome(self, job: MarkerJob, tp: TopicPartition, error: int) -> None:
        if error in _DONE:
            self.channel.done(job, tp)
        elif error in _FENCED:
            log.info("%s: the marker of %s was refused with %s: a newer coordinator owns "
                     "the transaction", job.transactional_id, tp, error_name(error))
            self.channel.abandon(job)
        else:
            log.info("%s: the marker of %s failed with %s; retrying",
                     job.transactional_id, tp, error_name(error))
            self.channel.route(job, tp, RETRY_BACKOFF_S)

    def _version(self, connection: BrokerConnection) -> int:
        theirs = connection.versions.get(ApiKey.WRITE_TXN_MARKERS)
        if theirs is None:
            raise UnsupportedVersionError(f"broker {self.broker_id} does not serve "
                                          "WriteTxnMarkers")
        return min(WRITE_TXN_MARKERS_VERSIONS[1], theirs[1])
