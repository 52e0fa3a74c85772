"""The mirror process: a consumer group member on the source, producers on the target.

Several processes with the same config share the source partitions as members of the
consumer group ``mirror_group`` on the source. The group only splits the work; positions
live in the target (see :mod:`pylog.mirror.task`), committed with the records. A
rebalance is eager: the old owner commits its open transactions and drops its producers
before the new owner's producers fence the partitions' transactional ids and read the
committed positions. A stalled owner that missed the rebalance is fenced by the new
owner's ``init_transactions`` and can commit nothing after that.

Usage::

    mirror = Mirror(config)
    mirror.start()          # MirrorSetupError when a cluster is unreachable or refuses
    mirror.run()            # until mirror.stop() (a signal handler) is called
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TextIO

from pylog.mirror import require_client
from pylog.mirror.checkpoints import CheckpointWriter, load_offset_syncs
from pylog.mirror.config import LIBRDKAFKA_LOG, MirrorConfig
from pylog.mirror.offset_syncs import OffsetSyncStore
from pylog.mirror.progress import ProgressReporter
from pylog.mirror.task import PartitionFenced, PartitionTask
from pylog.mirror.topics import MirrorSetupError, TopicSync

log = logging.getLogger(__name__)

BATCH = 2000
POLL_TIMEOUT_S = 0.05
PARALLEL = 8

# Per-partition producers: small batches wait little; these are defaults a target
# client section may override.
PRODUCER_DEFAULTS = {"linger.ms": 5, "batch.num.messages": 10000}


class Mirror:
    """Copies the configured source topics to the target, exactly once."""

    def __init__(self, config: MirrorConfig, out: TextIO = sys.stderr, clock=time.monotonic) -> None:
        self.ck = require_client()
        self.config = config
        self.clock = clock
        self.progress = ProgressReporter(out, config.source_alias, clock)
        self._stop = threading.Event()
        self.tasks: dict[tuple[str, int], PartitionTask] = {}
        self.store = OffsetSyncStore()
        self.subscribed: list[str] = []
        self.last_commit: float | None = None
        self.consumer = None
        self.offsets_consumer = None
        self.checkpoints = None
        self._checkpoint_job = None
        self._pool = ThreadPoolExecutor(PARALLEL, thread_name_prefix="mirror")

    # -- start ---------------------------------------------------------------------------

    def start(self) -> "Mirror":
        from confluent_kafka.admin import AdminClient

        ck, config = self.ck, self.config
        timeout_s = config.startup_timeout_ms / 1000
        self.source_admin = AdminClient(config.source.client_config())
        self.target_admin = AdminClient(config.target.client_config())
        for name, admin, side in (("source", self.source_admin, config.source),
                                  ("target", self.target_admin, config.target)):
            try:
                admin.list_topics(timeout=timeout_s)
            except ck.KafkaException as exc:
                raise MirrorSetupError(f"cannot reach the {name} cluster at "
                                       f"{side.bootstrap_servers}: {exc.args[0].str()}") from None
        self.topic_sync = TopicSync(ck, config, self.source_admin, self.target_admin)
        try:
            self.topic_sync.ensure_internal_topics(timeout_s)
            topics = self.topic_sync.sync(timeout_s)
        except ck.KafkaException as exc:
            raise MirrorSetupError(f"listing or creating topics: {exc.args[0].str()}") from None
        self.offsets_consumer = ck.Consumer(config.target.client_config(**{
            "group.id": config.group_id, "enable.auto.commit": False,
            "isolation.level": "read_committed"}))
        self.group_metadata = self.offsets_consumer.consumer_group_metadata()
        self.checkpoints = CheckpointWriter(ck, config, self.source_admin, self.store)
        source_settings = {"topic.metadata.refresh.interval.ms": config.topic_refresh_interval_ms,
                           **config.source.client}
        self.consumer = ck.Consumer({
            **source_settings, "bootstrap.servers": config.source.bootstrap_servers,
            "logger": LIBRDKAFKA_LOG,
            "group.id": config.group_id, "enable.auto.commit": False,
            "enable.auto.offset.store": False, "isolation.level": "read_committed",
            "auto.offset.reset": config.offset_reset})
        self._subscribe(sorted(topics))
        log.info("mirroring %d topics from %s to %s", len(topics),
                 config.source.bootstrap_servers, config.target.bootstrap_servers)
        return self

    def _subscribe(self, topics: list[str]) -> None:
        self.subscribed = topics
        if topics:
            self.consumer.subscribe(topics, on_assign=self._on_assign,
                                    on_revoke=self._on_revoke, on_lost=self._on_lost)
        else:
            self.consumer.unsubscribe()

    # -- rebalances ------------------------------------------------------------------------

    def _on_assign(self, consumer, partitions) -> None:
        ck, config = self.ck, self.config
        if any(tp.partition >= self.topic_sync.partition_counts.get(tp.topic, 0)
               for tp in partitions):
            self.topic_sync.sync()      # the source grew: the target grows first
        started = list(self._pool.map(self._start_task, partitions))
        target_partitions = [ck.TopicPartition(task.target_topic, task.partition)
                             for task in started]
        committed = self._committed(target_partitions) if started else []
        reset = ck.OFFSET_BEGINNING if config.offset_reset == "earliest" else ck.OFFSET_END
        for tp, task, position in zip(partitions, started, committed):
            if position.offset >= 0:
                tp.offset = task.committed = task.position = position.offset
            else:
                tp.offset = reset
            self.tasks[(tp.topic, tp.partition)] = task
        consumer.assign(partitions)
        consumer.resume(partitions)     # one paused when fenced stays paused otherwise
        load_offset_syncs(ck, config, self.store, {(tp.topic, tp.partition) for tp in partitions})
        log.info("assigned %s", ", ".join(f"{tp.topic}[{tp.partition}]@{tp.offset}"
                                          for tp in partitions))

    def _committed(self, target_partitions: list) -> list:
        """The source positions committed in the target (retried while the target's group
        coordinator moves or loads, as on a cluster that just started)."""
        deadline = time.monotonic() + self.config.transaction_timeout_ms / 1000
        while True:
            try:
                return self.offsets_consumer.committed(
                    target_partitions, timeout=max(deadline - time.monotonic(), 1.0))
            except self.ck.KafkaException as exc:
                if not exc.args[0].retriable() and exc.args[0].code() not in (
                        self.ck.KafkaError.NOT_COORDINATOR,
                        self.ck.KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                        self.ck.KafkaError.COORDINATOR_NOT_AVAILABLE):
                    raise
                if time.monotonic() > deadline:
                    raise
                log.info("reading committed positions again: %s", exc.args[0].str())
                time.sleep(0.2)

    def _start_task(self, tp) -> PartitionTask:
        task = PartitionTask(self.ck, self.config, tp.topic, tp.partition,
                             self.config.target_topic_name(tp.topic), self.group_metadata,
                             {**PRODUCER_DEFAULTS, **self.config.target.client})
        task.init()
        return task

    def _on_revoke(self, consumer, partitions) -> None:
        revoked = [self.tasks.pop((tp.topic, tp.partition)) for tp in partitions
                   if (tp.topic, tp.partition) in self.tasks]
        self._commit(revoked, rewind=False)
        for task in revoked:
            self.store.forget(task.topic, task.partition)
            task.close()
        consumer.unassign()

    def _on_lost(self, consumer, partitions) -> None:
        for tp in partitions:
            task = self.tasks.pop((tp.topic, tp.partition), None)
            if task is not None:
                task.abort()
                task.close()
        consumer.unassign()

    # -- the loop --------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the loop to end (safe from a signal handler)."""
        self._stop.set()

    def run(self) -> None:
        """Mirror until ``stop``; then commit the open transactions and close the clients."""
        config, clock = self.config, self.clock
        now = clock()
        next_commit = now + config.transaction_interval_ms / 1000
        next_refresh = now + config.topic_refresh_interval_ms / 1000
        next_checkpoint = now + config.checkpoint_interval_ms / 1000
        next_progress = now + config.progress_interval_ms / 1000
        tasks = self.tasks
        try:
            while not self._stop.is_set():
                drained = self._mirror_batch(tasks) == 0
                now = clock()
                # Caught up with the source: no reason to hold records back any longer.
                if now >= next_commit or drained:
                    self._commit(list(tasks.values()))
                    next_commit = now + config.transaction_interval_ms / 1000
                if now >= next_refresh:
                    self._refresh_topics()
                    next_refresh = now + config.topic_refresh_interval_ms / 1000
                if now >= next_checkpoint:
                    self._write_checkpoints()
                    next_checkpoint = now + config.checkpoint_interval_ms / 1000
                if now >= next_progress:
                    self.report_progress()
                    next_progress = now + config.progress_interval_ms / 1000
            self._commit(list(tasks.values()))
        finally:
            self.close()

    def _mirror_batch(self, tasks) -> int:
        """Consume and produce one batch; returns how many messages it held."""
        messages = self.consumer.consume(BATCH, POLL_TIMEOUT_S)
        task = None
        for message in messages:
            error = message.error()
            if error is not None:
                if error.fatal():
                    raise self.ck.KafkaException(error)
                log.warning("source: %s", error.str())
                continue
            topic, partition = message.topic(), message.partition()
            if task is None or task.partition != partition or task.topic != topic:
                task = tasks.get((topic, partition))
                if task is None:
                    continue    # fenced: paused until the group moves it
            task.produce(message)
        return len(messages)

    def _commit(self, tasks: list[PartitionTask], rewind: bool = True) -> None:
        open_tasks = [task for task in tasks if task.in_transaction]
        if not open_tasks:
            return
        if len(open_tasks) == 1:
            results = [self._commit_one(open_tasks[0])]
        else:
            results = list(self._pool.map(self._commit_one, open_tasks))
        for task, result in zip(open_tasks, results):
            tp = self.ck.TopicPartition(task.topic, task.partition, task.committed)
            if result == "fenced":
                log.warning("%s[%d] is owned by another mirror now: giving it up",
                            task.topic, task.partition)
                self.tasks.pop((task.topic, task.partition), None)
                self.store.forget(task.topic, task.partition)
                if rewind:
                    self.consumer.pause([tp])
            elif result == "aborted" and rewind:
                self.consumer.seek(tp)
            elif result == "committed":
                self.store.add(task.topic, task.partition, task.last_runs)
        self.last_commit = time.time()

    @staticmethod
    def _commit_one(task: PartitionTask) -> str:
        try:
            return "committed" if task.commit() else "aborted"
        except PartitionFenced:
            return "fenced"

    def _refresh_topics(self) -> None:
        try:
            topics = sorted(self.topic_sync.sync())
        except (self.ck.KafkaException, MirrorSetupError, TimeoutError) as exc:
            log.warning("topic refresh failed: %s", exc)
            return
        if topics != self.subscribed:
            log.info("mirrored topics now: %s", ", ".join(topics))
            self._commit(list(self.tasks.values()))
            self._subscribe(topics)

    def _write_checkpoints(self) -> None:
        """In the background: listing the source's groups must not hold up mirroring."""
        running = self._checkpoint_job
        if not self.tasks or (running is not None and not running.done()):
            return
        self._checkpoint_job = self._pool.submit(self._checkpoint, set(self.tasks))

    def _checkpoint(self, owned: set[tuple[str, int]]) -> None:
        try:
            self.checkpoints.write(owned)
        except (self.ck.KafkaException, TimeoutError) as exc:
            log.warning("writing checkpoints failed: %s", exc)

    def report_progress(self) -> None:
        counters: dict[str, tuple[int, int]] = {}
        lags: dict[str, int | None] = {}
        for (topic, partition), task in list(self.tasks.items()):
            records, size = counters.get(topic, (0, 0))
            counters[topic] = (records + task.counters.records, size + task.counters.bytes)
            try:
                _, high = self.consumer.get_watermark_offsets(
                    self.ck.TopicPartition(topic, partition), cached=True)
            except self.ck.KafkaException:
                high = -1
            lags.setdefault(topic, None)
            if high >= 0 and task.position >= 0:    # known once the partition was fetched
                lags[topic] = (lags[topic] or 0) + max(high - task.position, 0)
        committed = ("never" if self.last_commit is None
                     else time.strftime("%H:%M:%S", time.localtime(self.last_commit)))
        status = f"{len(self.tasks)} partitions, last commit {committed}"
        self.progress.print(self.progress.rows(counters, lags), status)

    def close(self) -> None:
        """Commit nothing more; close every client (the group hands the partitions on)."""
        if self.consumer is not None:
            self.consumer.close()      # revokes: open transactions commit there
            self.consumer = None
        for task in list(self.tasks.values()):
            task.abort()
            task.close()
        self.tasks.clear()
        if self._checkpoint_job is not None:
            self._checkpoint_job.result()
        if self.checkpoints is not None:
            self.checkpoints.close()
        if self.offsets_consumer is not None:
            self.offsets_consumer.close()
            self.offsets_consumer = None
        self._pool.shutdown(wait=False)
