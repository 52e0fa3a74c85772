"""One source partition's share of the mirror: a transactional producer to the target.

Exactly once, per source partition:

1. On assignment, a producer with the partition's transactional id runs
   ``init_transactions``: the target's coordinator fences whoever held the id before
   (a killed or stalled mirror, or the previous owner before a rebalance) and aborts its
   open transaction.
2. Only then is the partition's committed source position read from the target (the
   mirror's group there), and consuming starts from it.
3. Records are produced in a transaction; at its end the offset syncs of its records and
   the next source position (``send_offsets_to_transaction``) join the same transaction,
   and it commits. Records, syncs and position are visible together or not at all.

A retriable commit failure is retried; an abortable one aborts and rewinds the consumer to
the last committed position; a fenced producer gives the partition up (another member
owns it now).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from pylog.mirror.offset_syncs import OffsetSync, encode_syncs

log = logging.getLogger(__name__)

SOURCE_HEADER = "pylog.mirror.source"
OFFSET_HEADER = "pylog.mirror.offset"


class PartitionFenced(Exception):
    """Another producer holds this partition's transactional id now."""


@dataclass
class TaskCounters:
    records: int = 0
    bytes: int = 0


class PartitionTask:
    """Mirrors one source partition into the same partition of its target topic."""

    def __init__(self, ck, config, topic: str, partition: int, target_topic: str,
                 group_metadata, producer_settings: dict) -> None:
        self.ck = ck
        self.topic = topic
        self.partition = partition
        self.target_topic = target_topic
        self.group_metadata = group_metadata
        self.offset_syncs_topic = config.offset_syncs_topic
        self.alias_header = (SOURCE_HEADER, config.source_alias.encode())
        self.timeout_s = config.transaction_timeout_ms / 1000
        self.producer = ck.Producer(config.target.client_config(
            **producer_settings,
            **{"transactional.id": config.transactional_id(topic, partition),
               "transaction.timeout.ms": config.transaction_timeout_ms}))
        self._produce = self.producer.produce
        self._run: list = []
        self._run_end = -1
        self.committed = -1         # next source offset, as committed in the target
        self.position = -1          # next source offset after what was produced
        self.in_transaction = False
        self.counters = TaskCounters()
        self._runs: list[list] = []      # [source_offset, target_offset or None, count, next]
        self._failed: list = []
        self.last_runs: list[OffsetSync] = []   # of the last committed transaction

    def init(self) -> None:
        """Fence the previous owner of the transactional id (may take a while)."""
        self.producer.init_transactions(self.timeout_s)

    def produce(self, message) -> None:
        """Produce one consumed source record (``message`` is a confluent_kafka Message)."""
        offset = message.offset()
        if not self.in_transaction:
            self._begin(offset)
        value = message.value()
        key = message.key()
        headers = message.headers() or []
        headers.append(self.alias_header)
        headers.append((OFFSET_HEADER, b"%d" % offset))
        timestamp = message.timestamp()[1]
        if timestamp < 0:
            timestamp = 0
        if offset == self._run_end:
            self._run[2] += 1
            try:
                self._produce(self.target_topic, value, key, self.partition,
                              timestamp=timestamp, headers=headers)
            except BufferError:
                self._produce_when_room(value, key, timestamp, headers, None)
        else:
            # A new run (the first record of the transaction, or after a source gap): its
            # target offset comes with its delivery report.
            if self._runs:
                self._runs[-1][3] = offset
            self._run = run = [offset, None, 1, offset + 1]
            self._runs.append(run)
            self._produce_when_room(value, key, timestamp, headers, self._first_delivered(run))
        self._run_end = self.position = offset + 1
        counters = self.counters
        counters.records += 1
        counters.bytes += (len(value) if value else 0) + (len(key) if key else 0)

    def _begin(self, offset: int) -> None:
        if self.committed < 0:
            self.committed = offset     # no position committed yet: rewinds go here
        self.producer.begin_transaction()
        self.in_transaction = True
        self._runs = []
        self._run_end = -1

    def _produce_when_room(self, value, key, timestamp, headers, on_delivery) -> None:
        while True:
            try:
                if on_delivery is None:
                    self._produce(self.target_topic, value, key, self.partition,
                                  timestamp=timestamp, headers=headers)
                else:
                    self._produce(self.target_topic, value, key, self.partition,
                                  timestamp=timestamp, headers=headers, on_delivery=on_delivery)
                return
            except BufferError:
                self.producer.poll(0.05)

    def _first_delivered(self, run: list):
        def delivered(err, msg):
            if err is None:
                run[1] = msg.offset()
            else:
                self._failed.append(err)
        return delivered

    def commit(self) -> bool:
        """Commit the open transaction with its syncs and source position.

        Returns False when it was aborted (the caller rewinds to ``committed``); raises
        PartitionFenced when another producer owns the partition now.
        """
        if not self.in_transaction:
            # Nothing produced (at most control records consumed): nothing to commit.
            self.last_runs = []
            return True
        ck = self.ck
        try:
            self._await_run_offsets()
            runs = [OffsetSync(s, t, n, nxt) for s, t, n, nxt in self._runs]
            if runs:
                last = runs[-1]
                runs[-1] = OffsetSync(last.source_offset, last.target_offset, last.count,
                                      max(last.source_next, self.position))
                self.producer.produce(self.offset_syncs_topic,
                                      encode_syncs(self.topic, self.partition, runs),
                                      f"{self.topic}/{self.partition}".encode(), 0)
            self.producer.send_offsets_to_transaction(
                [ck.TopicPartition(self.target_topic, self.partition, self.position)],
                self.group_metadata, self.timeout_s)
            self._commit_transaction()
        except ck.KafkaException as exc:
            return self._handle_failure(exc)
        self.in_transaction = False
        self.committed = self.position
        self.last_runs = runs
        return True

    def _await_run_offsets(self) -> None:
        """Until each run's first record has its target offset. Usually it has long
        since: no need to wait for the rest, commit_transaction flushes them anyway."""
        deadline = time.monotonic() + self.timeout_s
        while not self._failed and any(run[1] is None for run in self._runs):
            if time.monotonic() > deadline:
                raise self.ck.KafkaException(self.ck.KafkaError(self.ck.KafkaError._MSG_TIMED_OUT))
            self.producer.poll(0.002)
        if self._failed:
            raise self.ck.KafkaException(self._failed[0])

    def _commit_transaction(self) -> None:
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                self.producer.commit_transaction(self.timeout_s)
                return
            except self.ck.KafkaException as exc:
                error = exc.args[0]
                if not error.retriable() or time.monotonic() > deadline:
                    raise
                log.info("retrying the commit of %s[%d]: %s", self.topic, self.partition, error)

    def _handle_failure(self, exc) -> bool:
        error = exc.args[0]
        self._failed = []
        self._runs = []
        if error.fatal() or error.code() in (self.ck.KafkaError._FENCED,
                                             self.ck.KafkaError.PRODUCER_FENCED,
                                             self.ck.KafkaError.INVALID_PRODUCER_EPOCH):
            self.in_transaction = False
            raise PartitionFenced(f"{self.topic}[{self.partition}]: {error.str()}")
        log.warning("aborting the transaction of %s[%d]: %s", self.topic, self.partition,
                    error.str())
        try:
            self.producer.abort_transaction(self.timeout_s)
        except self.ck.KafkaException as abort_exc:
            if abort_exc.args[0].fatal():
                self.in_transaction = False
                raise PartitionFenced(f"{self.topic}[{self.partition}]: "
                                      f"{abort_exc.args[0].str()}") from None
            raise
        self.in_transaction = False
        self.position = self.committed
        return False

    def abort(self) -> None:
        """Abort the open transaction (fenced or failing producers are left as they are)."""
        if self.in_transaction:
            try:
                self.producer.abort_transaction(self.timeout_s)
            except self.ck.KafkaException as exc:
                log.info("abort of %s[%d] failed: %s", self.topic, self.partition, exc)
            self.in_transaction = False

    def close(self) -> None:
        self.producer.flush(0)
        self.producer = self._produce = None
