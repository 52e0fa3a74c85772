"""Which source topics are mirrored, and their target topics made to match.

A target topic is created with the source topic's partition count and the configs set on
the source topic (DescribeConfigs on the source, CreateTopics on the target), and grows
when the source topic grows. Some configs are the target cluster's own business and are
not copied, as MirrorMaker 2 leaves them out: replica placement and throttles,
min.insync.replicas, unclean.leader.election.enable, and message.timestamp.type (the
target keeps each record's source timestamp as its create time).
"""

from __future__ import annotations

import logging

from pylog.mirror.config import INTERNAL_SUFFIX, MirrorConfig

log = logging.getLogger(__name__)

NOT_COPIED = frozenset({
    "follower.replication.throttled.replicas", "leader.replication.throttled.replicas",
    "message.timestamp.type", "message.timestamp.difference.max.ms",
    "message.timestamp.before.max.ms", "message.timestamp.after.max.ms",
    "min.insync.replicas", "unclean.leader.election.enable", "confluent.placement.constraints"})

ADMIN_TIMEOUT_S = 15.0
# Some Kafka-protocol servers (librdkafka's mock cluster) never answer DescribeConfigs.
DESCRIBE_TIMEOUT_S = 5.0


class MirrorSetupError(Exception):
    """A cluster refused or did not answer a request the mirror needs at start."""


def is_mirrorable(topic: str) -> bool:
    """Internal topics (``__consumer_offsets``, the mirror's own ``*.internal``) never are."""
    return not (topic.startswith("__") or topic.endswith(INTERNAL_SUFFIX))


class TopicSync:
    """Lists the source's matching topics and creates or grows their target topics."""

    def __init__(self, ck, config: MirrorConfig, source_admin, target_admin) -> None:
        self.ck = ck
        self.config = config
        self.source_admin = source_admin
        self.target_admin = target_admin
        self._describe_configs = True   # off once the source turns out not to serve it
        self.partition_counts: dict[str, int] = {}   # source topic -> partitions on target

    def source_topics(self, timeout_s: float = ADMIN_TIMEOUT_S) -> dict[str, int]:
        """Matching source topics and their partition counts."""
        metadata = self.source_admin.list_topics(timeout=timeout_s)
        return {name: len(topic.partitions) for name, topic in metadata.topics.items()
                if topic.error is None and is_mirrorable(name)
                and self.config.topics.fullmatch(name)}

    def sync(self, timeout_s: float = ADMIN_TIMEOUT_S) -> dict[str, int]:
        """Create and grow target topics for the matching source topics; returns them."""
        wanted = self.source_topics(timeout_s)
        target = self.target_admin.list_topics(timeout=timeout_s).topics
        missing = {t: n for t, n in wanted.items()
                   if self.config.target_topic_name(t) not in target}
        if missing:
            self._create(missing, timeout_s)
        grow = {}
        for topic, count in wanted.items():
            existing = target.get(self.config.target_topic_name(topic))
            if existing is not None and len(existing.partitions) < count:
                grow[topic] = count
        if grow:
            self._grow(grow, timeout_s)
        self.partition_counts = dict(wanted)
        return wanted

    def ensure_internal_topics(self, timeout_s: float = ADMIN_TIMEOUT_S) -> None:
        """The offset-syncs topic (kept a week) and the checkpoints topic (compacted)."""
        from confluent_kafka.admin import NewTopic

        existing = self.target_admin.list_topics(timeout=timeout_s).topics
        new = []
        if self.config.offset_syncs_topic not in existing:
            new.append(NewTopic(self.config.offset_syncs_topic, 1, self.config.replication_factor,
                                config={"cleanup.policy": "delete", "retention.ms": "604800000"}))
        if self.config.checkpoints_topic not in existing:
            new.append(NewTopic(self.config.checkpoints_topic, 1, self.config.replication_factor,
                                config={"cleanup.policy": "compact"}))
        if new:
            self._wait(self.target_admin.create_topics(new, request_timeout=timeout_s),
                       "create", timeout_s)

    def _create(self, topics: dict[str, int], timeout_s: float) -> None:
        from confluent_kafka.admin import NewTopic

        configs = self._source_configs(list(topics), timeout_s)
        new = [NewTopic(self.config.target_topic_name(t), n, self.config.replication_factor,
                        config=configs.get(t, {})) for t, n in topics.items()]
        self._wait(self.target_admin.create_topics(new, request_timeout=timeout_s),
                   "create", timeout_s)
        for topic, count in topics.items():
            log.info("created target topic %s (%d partitions, configs %s)",
                     self.config.target_topic_name(topic), count, configs.get(topic, {}))

    def _grow(self, topics: dict[str, int], timeout_s: float) -> None:
        from confluent_kafka.admin import NewPartitions

        new = [NewPartitions(self.config.target_topic_name(t), n) for t, n in topics.items()]
        self._wait(self.target_admin.create_partitions(new, request_timeout=timeout_s),
                   "add partitions to", timeout_s)
        for topic, count in topics.items():
            log.info("target topic %s grown to %d partitions",
                     self.config.target_topic_name(topic), count)

    def _wait(self, futures: dict, action: str, timeout_s: float) -> None:
        for name, future in futures.items():
            try:
                future.result(timeout=timeout_s)
            except self.ck.KafkaException as exc:
                error = exc.args[0]
                if error.code() in (self.ck.KafkaError.TOPIC_ALREADY_EXISTS,
                                    self.ck.KafkaError.INVALID_PARTITIONS):
                    continue    # another member was first
                raise MirrorSetupError(f"cannot {action} target topic {name}: "
                                       f"{error.str()}") from None

    def _source_configs(self, topics: list[str], timeout_s: float) -> dict[str, dict[str, str]]:
        """Configs set on each source topic (not defaults), less those not copied."""
        from confluent_kafka.admin import ConfigResource, ConfigSource

        if not self._describe_configs:
            return {}
        resources = [ConfigResource("topic", t) for t in topics]
        found: dict[str, dict[str, str]] = {}
        try:
            futures = self.source_admin.describe_configs(resources, request_timeout=DESCRIBE_TIMEOUT_S)
            for resource, future in futures.items():
                entries = future.result(timeout=DESCRIBE_TIMEOUT_S)
                found[resource.name] = {
                    name: entry.value for name, entry in entries.items()
                    if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
                    and name not in NOT_COPIED and entry.value is not None}
        except (self.ck.KafkaException, TimeoutError) as exc:
            self._describe_configs = False
            log.warning("the source does not describe topic configs (%s): target topics "
                        "get the target's defaults", exc)
            return {}
        return found
