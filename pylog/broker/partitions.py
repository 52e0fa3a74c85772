"""The broker's partitions: which logs it leads, opened on demand, and who waits on them.

``PartitionLogs`` maps a (topic, partition) to this broker's ``Log`` if ClusterMetadata
says the broker leads it, and otherwise raises the error a client expects:
UNKNOWN_TOPIC_OR_PARTITION for a topic or partition that does not exist,
NOT_LEADER_OR_FOLLOWER when another broker (or nobody) leads it. Logs are created with
the topic's configs over the broker defaults; when a topic's configs change (AlterConfigs,
on this broker or, through ZooKeeper, on another) its open logs take the new config at
once. Partitions of topics that disappear from the metadata are deleted from disk.

In cluster mode a ``ReplicaManager`` is attached (``replicas``): leadership is then its
judgement (the role it applied from ZooKeeper, with leader-epoch fencing) rather than
the metadata view's, and it opens the logs of partitions this broker follows.

``AppendWaiters`` lets a parked request (a Fetch waiting for data, an acks=all Produce
waiting for the ISR) sleep until a change to one of its partitions wakes it (no
polling).
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from typing import Callable, Mapping

from pylog.cluster.metadata import ClusterMetadata
from pylog.errors import (
    ConfigError, FencedLeaderEpochError, NotLeaderOrFollowerError, UnknownLeaderEpochError,
    UnknownTopicOrPartitionError)
from pylog.log import Log, LogConfig, LogManager
from pylog.types import TopicPartition

log = logging.getLogger(__name__)


class AppendWaiters:
    """Who to wake when a partition gets new data: ``wake(tp)`` callables per partition."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[TopicPartition, dict[Callable[[], None], int]] = defaultdict(dict)

    def add(self, partitions, wake: Callable[[], None]) -> None:
        with self._lock:
            for tp in partitions:
                counts = self._waiters[tp]
                counts[wake] = counts.get(wake, 0) + 1

    def remove(self, partitions, wake: Callable[[], None]) -> None:
        with self._lock:
            for tp in partitions:
                counts = self._waiters.get(tp)
                if counts is None or wake not in counts:
                    continue
                counts[wake] -= 1
                if counts[wake] == 0:
                    del counts[wake]
                if not counts:
                    del self._waiters[tp]

    def notify(self, tp: TopicPartition) -> None:
        """Wake whoever waits on ``tp``; each wake is told which partition changed."""
        # Nobody waits on most appends: skip the lock. A waiter registering meanwhile
        # misses nothing: whoever parks attempts once more after adding itself.
        if tp not in self._waiters:
            return
        with self._lock:
            wakes = list(self._waiters.get(tp, ()))
        for wake in wakes:
            wake(tp)


def check_leader_epoch(tp: TopicPartition, requested: int, current: int) -> None:
    """Kafka's fencing of a request that names the leader epoch it expects (-1: any)."""
    if requested < 0 or requested == current:
        return
    if requested < current:
        raise FencedLeaderEpochError(f"{tp}: leader epoch {requested} is older than {current}")
    raise UnknownLeaderEpochError(f"{tp}: leader epoch {requested} is newer than {current}")


class PartitionLogs:
    """Logs of the partitions this broker leads, by TopicPartition."""

    def __init__(self, manager: LogManager, metadata: ClusterMetadata,
                 default_config: LogConfig, waiters: AppendWaiters, *,
                 clustered: bool = False) -> None:
        self.manager = manager
        # A cluster's replica manager (set once it exists) creates and deletes replicas;
        # known from the start, so a metadata change delivered before it is set does not
        # take the standalone path.
        self.clustered = clustered
        self.metadata = metadata
        self.default_config = default_config
        self.waiters = waiters
        self._lock = threading.Lock()
        self._logs: dict[TopicPartition, Log] = {}
        self._known_topics: set[str] = set(metadata.topics())
        # The overrides each topic's open logs were last given, to apply only changes.
        self._applied_configs: dict[str, Mapping[str, str]] = {}
        self._change_lock = threading.Lock()
        self.replicas = None  # the ReplicaManager, in cluster mode
        # A TxnVerifier when the broker verifies transactional produce (KIP-890), else None.
        self.txn_verifier = None
        for tp in manager.partitions():
            # Apply each topic's configs to the logs loaded with the defaults.
            self._attach(tp, manager.get_or_create(tp.topic, tp.partition,
                                                   self.config_for(tp.topic)))

    def _attach(self, tp: TopicPartition, partition_log: Log) -> None:
        partition_log.add_append_listener(lambda _log, tp=tp: self.waiters.notify(tp))
        self._logs[tp] = partition_log

    def config_for(self, topic: str) -> LogConfig:
        meta = self.metadata.topic(topic)
        if meta is None or not meta.configs:
            return self.default_config
        return self.default_config.with_overrides(meta.configs)

    def leader_log(self, topic: str, partition: int, current_leader_epoch: int = -1) -> Log:
        """This broker's log of a partition it leads.

        Raises UnknownTopicOrPartitionError or NotLeaderOrFollowerError (and, with a
        replica manager, the leader-epoch fencing errors).
        """
        tp = TopicPartition(topic, partition)
        if self.replicas is not None:
            return self.replicas.leader_replica(tp, current_leader_epoch).log
        if self.clustered:
            raise NotLeaderOrFollowerError(f"broker {self.metadata.local_broker_id} is "
                                           f"starting: it leads no partition yet")
        existing = self._logs.get(tp)
        meta = self.metadata.topic(topic)
        state = None if meta is None else meta.partitions.get(partition)
        if state is None:
            raise UnknownTopicOrPartitionError(f"{tp} does not exist")
        if state.leader != self.metadata.local_broker_id:
            raise NotLeaderOrFollowerError(f"broker {self.metadata.local_broker_id} does not "
                                           f"lead {tp} (leader {state.leader})")
        check_leader_epoch(tp, current_leader_epoch, state.leader_epoch)
        if existing is not None:
            return existing
        return self.open_log(topic, partition)

    def leader_epoch_start(self, topic: str, partition: int) -> int:
        """Where this broker's log ended when it became the partition's leader in the
        current epoch (0 without replication: one copy's high watermark never goes back)."""
        if self.replicas is None:
            return 0
        return self.replicas.leader_replica(TopicPartition(topic, partition)).epoch_start_offset

    def replica_log(self, topic: str, partition: int) -> Log:
        """This broker's log of a partition it holds a replica of, whatever its role.

        Raises UnknownTopicOrPartitionError, or NotLeaderOrFollowerError when this broker
        holds no replica of it.
        """
        if self.replicas is None:
            return self.leader_log(topic, partition)
        return self.replicas.local_replica(TopicPartition(topic, partition)).log

    def open_log(self, topic: str, partition: int) -> Log:
        """The local log of a partition, created with the topic's configs if needed.

        Without a replica manager (one broker), a log is only created for a partition the
        metadata has, looked up under the lock that deleting a topic's logs takes too: a
        request that saw the topic before a DeleteTopics cannot leave a log behind it.
        Raises UnknownTopicOrPartitionError then."""
        tp = TopicPartition(topic, partition)
        with self._lock:
            existing = self._logs.get(tp)
            if existing is None:
                if not self.clustered:
                    meta = self.metadata.topic(topic)
                    if meta is None or partition not in meta.partitions:
                        raise UnknownTopicOrPartitionError(f"{tp} does not exist")
                # A log the manager already had (loaded at start) takes the config too.
                existing = self.manager.get_or_create(topic, partition, self.config_for(topic))
                self._attach(tp, existing)
            return existing

    def local_partitions(self) -> list[TopicPartition]:
        """Every partition with a log on this broker."""
        with self._lock:
            return list(self._logs)

    def delete_log(self, topic: str, partition: int) -> None:
        """Delete a local replica that is no longer assigned to this broker."""
        tp = TopicPartition(topic, partition)
        with self._lock:
            if self._logs.pop(tp, None) is not None or self.manager.get(topic, partition):
                self.manager.delete_partition(topic, partition)

    def local_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get(TopicPartition(topic, partition))

    def on_metadata_change(self) -> None:
        """Apply changed topic configs to the open logs; delete local partitions of topics
        that were known and are now gone; without a replica manager (one broker), create
        the logs of new partitions, as Kafka does before CreateTopics answers, so the first
        produce to a new topic does not pay for them.

        Serialised, and the metadata is read inside: two listeners racing (ZooKeeper
        delivers on more than one thread, and a standalone broker on the thread of the
        request that changed it) must not let an older view be applied last.
        """
        with self._change_lock:
            topics = self.metadata.topics()
            self._apply_configs(topics)
            current = set(topics)
            gone = self._known_topics - current
            self._known_topics = current
            if gone:
                with self._lock:
                    for tp in [tp for tp in self._logs if tp.topic in gone]:
                        del self._logs[tp]
                        log.info("deleting %s: its topic was deleted", tp)
                        self.manager.delete_partition(tp.topic, tp.partition)
            if not self.clustered:
                self._create_led_logs(topics)

    def set_default_config(self, config: LogConfig) -> None:
        """New broker defaults (a dynamic broker config changed): every open log takes
        them, under its topic's overrides."""
        with self._change_lock:
            self.default_config = config
            self._applied_configs.clear()
            self._apply_configs(self.metadata.topics())

    def _create_led_logs(self, topics: Mapping) -> None:
        """Open a log for every partition this broker leads that has none yet."""
        me = self.metadata.local_broker_id
        missing = [(name, state.partition) for name, meta in topics.items()
                   for state in meta.partitions.values()
                   if state.leader == me
                   and TopicPartition(name, state.partition) not in self._logs]
        for topic, partition in missing:
            try:
                self.open_log(topic, partition)
            except UnknownTopicOrPartitionError:
                pass  # deleted meanwhile; its own change deletes what was made
            except Exception:
                # Left to the first request that needs it, which answers with the error.
                log.exception("could not create the log of %s-%d", topic, partition)

    def _apply_configs(self, topics: Mapping) -> None:
        """Give open logs their topic's config where its overrides changed since last time.
        Overrides that do not make a valid config (written to ZooKeeper by another tool)
        leave the logs as they are, with a warning: refusing them is AlterConfigs' job.
        """
        with self._lock:
            logs = list(self._logs.items())
        by_topic: dict[str, list[Log]] = {}
        for tp, partition_log in logs:
            by_topic.setdefault(tp.topic, []).append(partition_log)
        for topic, topic_logs in by_topic.items():
            meta = topics.get(topic)
            if meta is None or self._applied_configs.get(topic) == meta.configs:
                continue
            try:
                config = self.default_config.with_overrides(meta.configs)
            except ConfigError as error:
                log.warning("topic %s keeps its config: its overrides are not valid: %s",
                            topic, error)
            else:
                for partition_log in topic_logs:
                    partition_log.update_config(config)
                if topic in self._applied_configs:  # a change, not the first look
                    log.info("topic %s: configs %s applied to %d local logs", topic,
                             dict(meta.configs), len(topic_logs))
            self._applied_configs[topic] = meta.configs
        for topic in set(self._applied_configs) - set(topics):
            del self._applied_configs[topic]
