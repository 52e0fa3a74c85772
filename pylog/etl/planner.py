"""Plan a run: the offset ranges each table's map tasks read.

Scheduled load: per partition from the committed offset (or the new-partition policy)
to the latest offset. Backfill: per partition from the offset at ``since`` to the offset
at ``until``, but never past the scheduled load's committed offset -- records after it are
the scheduled load's to write, so the two never write the same record twice. The commit
replaces exactly these offset ranges (:mod:`pylog.etl.swap`), so records outside them keep
their rows whatever their timestamps.

Every plan records the offsets snapshot it was made from (``base_run_id``,
``base_offsets``); a scheduled plan is only committed on top of that snapshot.

Ranges longer than ``max_records_per_task`` offsets are split. Ranges are ordered by
the partition leader's broker id, so a scheduler can group them by broker; each task
still looks the leader up again when it runs.

The broker is asked in O(brokers) round trips, not O(partitions): one Metadata request
for the topics, then ListOffsets for every partition a leader has in one request per
leader and kind of offset (earliest, latest, a timestamp), all leaders at once (see
:mod:`pylog.client.offsets`). :func:`plan_scheduled_many` plans several tables from one
such snapshot of the whole set of topics.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from pylog.client.offsets import OffsetBounds
from pylog.errors import PylogError
from pylog.etl.config import TopicConfig
from pylog.etl.errors import LoaderError, RetentionGapError
from pylog.etl.model import BACKFILL, SCHEDULED, OffsetGap, TablePlan, TaskRange
from pylog.etl.state import StateStore
from pylog.types import TopicPartition

TopicOffsets = Mapping[str, Mapping[int, OffsetBounds]]
"""{topic: {partition: its log start and latest offset}}, from :func:`topic_offsets`."""


def split_range(topic: str, partition: int, start: int, end: int, max_records: int,
                leader_id: int = -1) -> list[TaskRange]:
    """``[start, end)`` as consecutive ranges of at most ``max_records`` offsets."""
    return [TaskRange(topic, partition, low, min(low + max_records, end), leader_id)
            for low in range(start, end, max_records)]


def topic_offsets(consumer, topics: Sequence[str]) -> dict[str, dict[int, OffsetBounds]]:
    """Log start and latest offset of every partition of ``topics``, in partition order:
    one Metadata request for all topics, then two ListOffsets requests per leader, sent
    to all leaders at once."""
    partitions = consumer.partitions_for_topics(topics)
    bounds = consumer.offset_bounds([TopicPartition(t, p) for t in topics for p in partitions[t]])
    return {t: {p: bounds[TopicPartition(t, p)] for p in partitions[t]} for t in topics}


def plan_scheduled_many(run_id: str, configs: Sequence[TopicConfig], consumer,
                        state: StateStore) -> list[TablePlan]:
    """:func:`plan_scheduled` for several tables from one offsets snapshot of all their topics.

    >>> plans = plan_scheduled_many("r1", config.select(None), consumer, state)
    """
    offsets = topic_offsets(consumer, list(dict.fromkeys(c.topic for c in configs)))
    return [plan_scheduled(run_id, config, consumer, state, offsets) for config in configs]


def plan_scheduled(run_id: str, config: TopicConfig, consumer, state: StateStore,
                   offsets: TopicOffsets | None = None) -> TablePlan:
    """Plan a scheduled load of ``config.table``: from the committed offsets to the latest.

    ``offsets`` is a snapshot from :func:`topic_offsets` taken before this call (None:
    take one of this topic now). If a run committed past that snapshot since, the
    topic's offsets are looked up again.
    """
    base = state.offsets_snapshot(config.table)
    committed = dict(base.offsets) if base else {}
    bounds = _bounds_of(config.topic, consumer, offsets)
    if any(committed.get(p, -1) > b.latest for p, b in bounds.items()):
        bounds = _bounds_of(config.topic, consumer, None)
    starts, ends, gaps, notes = {}, {}, [], []
    new = [p for p in bounds if p not in committed]
    found = _new_partition_times(config, consumer, new)
    for partition, b in bounds.items():
        earliest, latest = b.log_start_offset, b.latest
        if partition in committed:
            start = committed[partition]
            if start < earliest:
                if config.on_retention_gap == "fail":
                    raise RetentionGapError(config.topic, partition, start, earliest)
                gaps.append(OffsetGap(config.topic, partition, start, earliest, "deleted by retention"))
                start = earliest
            if start > latest:
                raise LoaderError(
                    f"topic {config.topic} partition {partition}: committed offset {start} is past the "
                    f"latest offset {latest}; the log was truncated or replaced")
        else:
            start = _new_partition_start(config, found.get(partition), earliest, latest)
            notes.append(f"partition {partition} is new: starting at {start} "
                         f"({config.new_partitions.kind})")
        starts[partition], ends[partition] = start, latest
    return _plan(run_id, SCHEDULED, config, consumer, state, starts, ends, gaps, notes, None, base)


def _bounds_of(topic: str, consumer, offsets: TopicOffsets | None) -> Mapping[int, OffsetBounds]:
    """{partition: bounds} of ``topic`` in partition order, from ``offsets`` or the brokers."""
    if offsets is not None and topic in offsets:
        return offsets[topic]
    return topic_offsets(consumer, [topic])[topic]


def _new_partition_times(config: TopicConfig, consumer, partitions: list[int]) -> dict[int, int | None]:
    """For the ``timestamp`` policy: the offset at the policy's time of each new partition."""
    if config.new_partitions.kind in ("earliest", "latest") or not partitions:
        return {}
    ts = config.new_partitions.timestamp_ms
    return consumer.offsets_for_times(config.topic, {p: ts for p in partitions})


def plan_backfill(run_id: str, config: TopicConfig, consumer, state: StateStore,
                  window_ms: tuple[int, int]) -> TablePlan:
    base = state.offsets_snapshot(config.table)
    committed = dict(base.offsets) if base else {}
    partitions = sorted(consumer.partitions_for(config.topic))
    # Offsets are found by log time; with a payload event time, read a margin on each side
    # (the tasks keep only rows whose event time is in the window).
    margin = 0 if config.event_time_field is None else int(config.max_event_lateness_seconds * 1000)
    since = consumer.offsets_for_times(config.topic, {p: window_ms[0] - margin for p in partitions})
    until = consumer.offsets_for_times(config.topic, {p: window_ms[1] + margin for p in partitions})
    bounds = consumer.offset_bounds([TopicPartition(config.topic, p) for p in partitions if p in committed])
    starts, ends, notes = {}, {}, []
    for partition in partitions:
        if partition not in committed:
            notes.append(f"partition {partition} skipped: the scheduled load has not loaded it yet")
            continue
        b = bounds[TopicPartition(config.topic, partition)]
        earliest, latest = b.log_start_offset, b.latest
        start = since.get(partition)
        start = latest if start is None or start < 0 else max(start, earliest)
        end = until.get(partition)
        end = latest if end is None or end < 0 else end
        end = min(end, committed[partition])
        starts[partition], ends[partition] = start, max(start, end)
    return _plan(run_id, BACKFILL, config, consumer, state, starts, ends, [], notes, window_ms, base)


def _plan(run_id, kind, config, consumer, state, starts, ends, gaps, notes, window_ms, base) -> TablePlan:
    ranges: list[TaskRange] = []
    for partition, start in starts.items():
        if ends[partition] > start:
            leader = _leader_id(consumer, config.topic, partition)
            ranges += split_range(config.topic, partition, start, ends[partition],
                                  config.max_records_per_task, leader)
    ranges.sort(key=lambda r: (r.leader_id, r.topic, r.partition, r.start))
    return TablePlan(run_id=run_id, kind=kind, table=config.table, topic=config.topic,
                     created_at_ms=state.now_ms(), ranges=tuple(ranges), start_offsets=starts,
                     end_offsets=ends, gaps=tuple(gaps), window_ms=window_ms, notes=tuple(notes),
                     base_run_id=base.run_id if base else None,
                     base_offsets=dict(base.offsets) if base else {})


def _new_partition_start(config: TopicConfig, found: int | None, earliest: int, latest: int) -> int:
    """Where a partition without a committed offset starts; ``found`` is the offset at the
    ``timestamp`` policy's time (None where no record is at or after it)."""
    policy = config.new_partitions
    if policy.kind == "earliest":
        return earliest
    if policy.kind == "latest":
        return latest
    return latest if found is None or found < 0 else max(found, earliest)


def _leader_id(consumer, topic: str, partition: int) -> int:
    try:
        return consumer.leader_for(topic, partition).broker_id
    except PylogError:  # an offline partition: the task finds the leader when it runs
        return -1
