"""Checkpoints: source consumer groups' positions translated into target positions.

Every ``checkpoint_interval_ms`` each mirror member reads, for the source partitions it
owns, the offsets the source's consumer groups committed, translates them through the
offset syncs (:mod:`pylog.mirror.offset_syncs`) and writes the changed ones to the
compacted topic ``{source_alias}.checkpoints.internal`` on the target, one record per
group and partition (JSON)::

    key:   ["orders-app", "orders", 0]
    value: {"group": "orders-app", "topic": "orders", "partition": 0,
            "source_offset": 1200, "target_topic": "dc1.orders", "target_offset": 1211}

A position the mirror has not copied up to yet gets no checkpoint until it has: a group
failing over to the target then resumes at a position where each record is read once.
``pylog mirror translate-offsets`` reads them back and commits them for a group on the
target.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass
from typing import Iterator

from pylog.mirror.offset_syncs import OffsetSyncStore, decode_syncs

log = logging.getLogger(__name__)

READ_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Checkpoint:
    group: str
    topic: str
    partition: int
    source_offset: int
    target_topic: str
    target_offset: int

    def key(self) -> bytes:
        return json.dumps([self.group, self.topic, self.partition]).encode()

    def value(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def decode(cls, value: bytes) -> "Checkpoint":
        doc = json.loads(value)
        return cls(str(doc["group"]), str(doc["topic"]), int(doc["partition"]),
                   int(doc["source_offset"]), str(doc["target_topic"]), int(doc["target_offset"]))


def read_to_end(ck, client_config: dict, topic: str,
                timeout_s: float = READ_TIMEOUT_S) -> Iterator:
    """Every committed record of partition 0 of ``topic``, from its start to its end."""
    consumer = ck.Consumer({**client_config, "group.id": "pylog-mirror-reader",
                            "enable.auto.commit": False, "isolation.level": "read_committed",
                            "enable.partition.eof": True})
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                low, high = consumer.get_watermark_offsets(ck.TopicPartition(topic, 0),
                                                           timeout=timeout_s)
                break
            except ck.KafkaException as exc:    # a topic just created has no leader yet
                if not exc.args[0].retriable() or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        if high <= low:
            return
        consumer.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
        while time.monotonic() < deadline:
            for message in consumer.consume(500, 0.5):
                error = message.error()
                if error is None:
                    yield message
                elif error.code() == ck.KafkaError._PARTITION_EOF:
                    return
                else:
                    raise ck.KafkaException(error)
        raise TimeoutError(f"reading {topic} took longer than {timeout_s:.0f} s")
    finally:
        consumer.close()


def load_offset_syncs(ck, config, store: OffsetSyncStore, partitions: set[tuple[str, int]]) -> None:
    """Fill ``store`` with the committed runs of ``partitions`` from the offset-syncs topic."""
    for partition in partitions:
        store.forget(*partition)
    for message in read_to_end(ck, config.target.client_config(), config.offset_syncs_topic):
        try:
            topic, partition, runs = decode_syncs(message.value())
        except ValueError as exc:
            log.warning("skipping offset %d of %s: %s", message.offset(),
                        config.offset_syncs_topic, exc)
            continue
        if (topic, partition) in partitions:
            store.add(topic, partition, runs)


class CheckpointWriter:
    """Writes the changed checkpoints of the partitions a member owns."""

    def __init__(self, ck, config, source_admin, store: OffsetSyncStore) -> None:
        self.ck = ck
        self.config = config
        self.source_admin = source_admin
        self.store = store
        self.producer = ck.Producer(config.target.client_config(**{"enable.idempotence": True}))
        self._written: dict[tuple[str, str, int], int] = {}

    def group_offsets(self, owned: set[tuple[str, int]]) -> dict[tuple[str, str, int], int]:
        """(group, topic, partition) -> committed source offset, for owned partitions."""
        from confluent_kafka import ConsumerGroupTopicPartitions

        listing = self.source_admin.list_consumer_groups(request_timeout=10).result(timeout=15)
        groups = [g.group_id for g in listing.valid
                  if g.group_id != self.config.group_id and self.config.groups.fullmatch(g.group_id)]
        found: dict[tuple[str, str, int], int] = {}
        for group in groups:
            futures = self.source_admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group)], request_timeout=10)
            for future in futures.values():
                for tp in future.result(timeout=15).topic_partitions or []:
                    if tp.error is None and tp.offset >= 0 and (tp.topic, tp.partition) in owned:
                        found[(group, tp.topic, tp.partition)] = tp.offset
        return found

    def write(self, owned: set[tuple[str, int]]) -> int:
        """Translate and write; returns how many checkpoints changed."""
        changed = 0
        for (group, topic, partition), offset in self.group_offsets(owned).items():
            target_offset = self.store.translate(topic, partition, offset)
            key = (group, topic, partition)
            if target_offset is None or self._written.get(key) == offset:
                continue
            checkpoint = Checkpoint(group, topic, partition, offset,
                                    self.config.target_topic_name(topic), target_offset)
            self.producer.produce(self.config.checkpoints_topic, checkpoint.value(),
                                  checkpoint.key(), 0)
            self._written[key] = offset
            changed += 1
        if changed:
            remaining = self.producer.flush(10)
            if remaining:
                raise self.ck.KafkaException(self.ck.KafkaError(self.ck.KafkaError._MSG_TIMED_OUT))
        return changed

    def close(self) -> None:
        self.producer.flush(5)


def read_checkpoints(ck, config, group: str) -> list[Checkpoint]:
    """The latest checkpoint of each partition of ``group``, in topic/partition order."""
    latest: dict[tuple[str, int], Checkpoint] = {}
    for message in read_to_end(ck, config.target.client_config(), config.checkpoints_topic):
        if message.value() is None:
            continue
        try:
            checkpoint = Checkpoint.decode(message.value())
        except (ValueError, KeyError, TypeError):
            continue
        if checkpoint.group == group:
            latest[(checkpoint.topic, checkpoint.partition)] = checkpoint
    return [latest[k] for k in sorted(latest)]


def apply_checkpoints(ck, config, group: str, checkpoints: list[Checkpoint]) -> None:
    """Commit the checkpoints' target offsets for ``group`` on the target.

    Raises PylogError while the group has members on the target (they would overwrite
    the offsets, or read from the wrong position).
    """
    from confluent_kafka.admin import AdminClient

    from pylog.errors import PylogError

    admin = AdminClient(config.target.client_config())
    future = admin.describe_consumer_groups([group], request_timeout=10)[group]
    try:
        description = future.result(timeout=15)
    except ck.KafkaException as exc:
        raise PylogError(f"describing group {group} on the target: {exc.args[0].str()}") from None
    if description.members:
        raise PylogError(f"group {group} has {len(description.members)} members on the "
                         "target: stop them before applying offsets")
    consumer = ck.Consumer(config.target.client_config(**{
        "group.id": group, "enable.auto.commit": False}))
    try:
        consumer.commit(offsets=[ck.TopicPartition(c.target_topic, c.partition, c.target_offset)
                                 for c in checkpoints], asynchronous=False)
    except ck.KafkaException as exc:
        raise PylogError(f"committing offsets for group {group} on the target: "
                         f"{exc.args[0].str()}") from None
    finally:
        consumer.close()
