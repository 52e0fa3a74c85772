"""Commit a run once every map task of a table has its done marker.

Scheduled load: check the bad-record threshold, then write the new offsets snapshot
(temp + rename) -- that is the commit point -- then publish the staged files into the
table under a journal (:mod:`pylog.etl.publish`), then the audit entry and the committed
marker. A crash between them is finished by a rerun: a snapshot carrying the run id
means the run committed, and the journal says what is left to publish.

A scheduled plan commits only on top of the offsets snapshot it was planned from, and
never moves a committed offset backwards (:mod:`pylog.etl.freshness`); a stale plan
raises StalePlanError and is not committed.

Backfill: check the threshold, then replace the window's partitions by offset range and
swap them in under a journal (:mod:`pylog.etl.swap`). A rerun replays the journal,
skipping partitions already swapped. The committed offsets are never touched.

Both then fold the run's done markers into one file and, with ``retention_ms``, delete
the state of runs committed longer ago than that (:meth:`StateStore.prune`).
"""

from __future__ import annotations

from collections import defaultdict

from pylog.etl.config import TopicConfig
from pylog.etl.errors import BadRecordThresholdError, LoaderError
from pylog.etl.freshness import check_forward, check_fresh
from pylog.etl.fs import Storage
from pylog.etl.layout import staging_root, trash_root
from pylog.etl.model import AuditEntry, OffsetsSnapshot, PartitionAudit, TablePlan, TaskDoneMarker
from pylog.etl.publish import publish_staged
from pylog.etl.state import StateStore
from pylog.etl.swap import replace_partitions


def commit(state: StateStore, warehouse: Storage, plan: TablePlan, config: TopicConfig,
           markers: list[TaskDoneMarker], fault: str | None = None,
           retention_ms: int | None = None) -> AuditEntry:
    """Commit ``plan`` (idempotent); returns its audit entry.

    Reads a bounded number of state files whatever the table's history (the offsets
    snapshot, the run's journal, the pending run, the audit index).
    """
    if len(markers) != len(plan.ranges):
        raise LoaderError(f"table {plan.table}: {len(markers)} of {len(plan.ranges)} tasks finished; "
                          f"not committing run {plan.run_id!r}")
    check_threshold(plan, config, markers)
    replaced: list[str] = []
    if plan.kind == "backfill":
        replaced = replace_partitions(state, warehouse, plan, config, markers, fault)
    else:
        snapshot = state.offsets_snapshot(plan.table)
        if snapshot is None or snapshot.run_id != plan.run_id:
            check_fresh(plan, snapshot)
            offsets = dict(snapshot.offsets) if snapshot else {}
            check_forward(plan, offsets, plan.end_offsets)
            offsets.update(plan.end_offsets)
            state.write_offsets(OffsetsSnapshot(plan.table, plan.topic, plan.run_id, state.now_ms(), offsets))
        publish_staged(state, warehouse, plan, config, fault)
    audit = state.write_audit(build_audit(state, plan, markers, replaced))
    state.mark_committed(plan.table, plan.run_id)
    state.clear_pending(plan.table, plan.run_id)
    for root in (staging_root, trash_root):
        for table in (plan.table, config.quarantine_table):
            warehouse.delete(root(warehouse, plan.run_id, table))
        run_dir = warehouse.parent(root(warehouse, plan.run_id, plan.table))
        if warehouse.exists(run_dir) and not warehouse.list_dir(run_dir):  # other tables' runs may share it
            warehouse.delete(run_dir)
    state.fold_markers(plan.table, plan.run_id, markers)
    if retention_ms is not None:
        state.prune(plan.table, retention_ms)
    return audit


def check_threshold(plan: TablePlan, config: TopicConfig, markers: list[TaskDoneMarker]) -> None:
    fetched = sum(m.records_fetched for m in markers)
    bad = sum(m.quarantined for m in markers)
    if bad > config.max_bad_records or (fetched and bad / fetched > config.max_bad_ratio):
        raise BadRecordThresholdError(
            f"table {plan.table}: {bad} of {fetched} records could not be decoded (limits: "
            f"topics.{config.topic}.max_bad_records {config.max_bad_records}, max_bad_ratio "
            f"{config.max_bad_ratio}); they are in table {config.quarantine_table}. Offsets were not "
            f"committed: fix the producer or raise the limit, then rerun run id {plan.run_id!r}.")


def build_audit(state: StateStore, plan: TablePlan, markers: list[TaskDoneMarker],
                replaced: list[str]) -> AuditEntry:
    per_partition: dict[int, list[TaskDoneMarker]] = defaultdict(list)
    for marker in markers:
        per_partition[marker.range.partition].append(marker)
    partitions = tuple(
        PartitionAudit(plan.topic, p, plan.start_offsets[p], plan.end_offsets[p],
                       sum(m.records_fetched for m in per_partition[p]),
                       sum(m.rows_written for m in per_partition[p]),
                       sum(m.quarantined for m in per_partition[p]))
        for p in sorted(plan.start_offsets))
    now = state.now_ms()
    return AuditEntry(
        run_id=plan.run_id, kind=plan.kind, table=plan.table, topic=plan.topic, committed_at_ms=now,
        records_fetched=sum(m.records_fetched for m in markers),
        rows_written=sum(m.rows_written for m in markers),
        quarantined=sum(m.quarantined for m in markers),
        bytes_fetched=sum(m.bytes_fetched for m in markers),
        bytes_written=sum(m.bytes_written for m in markers),
        seconds=round((now - plan.created_at_ms) / 1000, 3),
        task_seconds=round(sum(m.seconds for m in markers), 3),
        ranges=plan.ranges, partitions=partitions,
        gaps=plan.gaps + tuple(g for m in markers for g in m.gaps),
        window_ms=plan.window_ms, replaced_partitions=tuple(replaced), notes=plan.notes)
