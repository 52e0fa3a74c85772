"""Frozen value types passed between the loader's stages, and their JSON form.

A plan is a list of :class:`TaskRange`; each map task turns one into a
:class:`TaskDoneMarker`; the commit folds the markers into an :class:`AuditEntry`.
All of them are stored as JSON objects whose keys are the field names.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

SCHEDULED = "scheduled"
BACKFILL = "backfill"


@dataclass(frozen=True, slots=True, order=True)
class TaskRange:
    """Offsets ``[start, end)`` of one partition, read by one map task."""

    topic: str
    partition: int
    start: int
    end: int
    leader_id: int = -1
    """The leader when planned: tasks are grouped by it; each task looks it up again."""

    @property
    def name(self) -> str:
        """``<topic>-<partition>-<first>-<last>``: the stem of its files and of its marker."""
        return f"{self.topic}-{self.partition}-{self.start}-{self.end - 1}"


@dataclass(frozen=True, slots=True)
class OffsetGap:
    """Offsets ``[start, end)`` of a partition that were not loaded, and why."""

    topic: str
    partition: int
    start: int
    end: int
    reason: str


@dataclass(frozen=True, slots=True)
class TablePlan:
    """What one run does to one table. Written before any task starts; reused by a rerun."""

    run_id: str
    kind: str
    """scheduled (committed offsets -> latest) or backfill (a time window)."""
    table: str
    topic: str
    created_at_ms: int
    ranges: tuple[TaskRange, ...]
    start_offsets: dict[int, int]
    """Where each partition's reading starts."""
    end_offsets: dict[int, int]
    """Where it ends; for a scheduled load, the offsets committed when it succeeds."""
    gaps: tuple[OffsetGap, ...] = ()
    window_ms: tuple[int, int] | None = None
    """Backfill only: the event-time window [since, until), whole hours."""
    notes: tuple[str, ...] = ()
    base_run_id: str | None = None
    """Run id of the offsets snapshot the plan was made from (None: no snapshot yet)."""
    base_offsets: dict[int, int] | None = None
    """That snapshot's offsets; a scheduled plan commits only on top of exactly these.
    None in plans written before the field existed."""

    def to_json(self) -> bytes:
        return to_json(self)

    @staticmethod
    def from_json(data: bytes) -> "TablePlan":
        raw = json.loads(data)
        return TablePlan(
            run_id=raw["run_id"], kind=raw["kind"], table=raw["table"], topic=raw["topic"],
            created_at_ms=raw["created_at_ms"],
            ranges=tuple(TaskRange(**r) for r in raw["ranges"]),
            start_offsets=_int_keys(raw["start_offsets"]), end_offsets=_int_keys(raw["end_offsets"]),
            gaps=tuple(OffsetGap(**g) for g in raw["gaps"]),
            window_ms=tuple(raw["window_ms"]) if raw["window_ms"] else None,
            notes=tuple(raw.get("notes", ())), base_run_id=raw.get("base_run_id"),
            base_offsets=_int_keys(raw["base_offsets"]) if raw.get("base_offsets") is not None else None)


@dataclass(frozen=True, slots=True)
class TaskDoneMarker:
    """Written by a map task after its files are in place; its presence means skip the range."""

    range: TaskRange
    next_offset: int
    """The offset after the last batch read (the task's final offset)."""
    records_fetched: int
    rows_written: int
    quarantined: int
    bytes_fetched: int
    bytes_written: int
    files: tuple[str, ...]
    gaps: tuple[OffsetGap, ...]
    seconds: float
    attempt: int = 0

    def to_json(self) -> bytes:
        return to_json(self)

    @staticmethod
    def from_json(data: bytes) -> "TaskDoneMarker":
        raw = json.loads(data)
        raw["range"] = TaskRange(**raw["range"])
        raw["files"] = tuple(raw["files"])
        raw["gaps"] = tuple(OffsetGap(**g) for g in raw["gaps"])
        return TaskDoneMarker(**raw)


@dataclass(frozen=True, slots=True)
class PartitionAudit:
    topic: str
    partition: int
    start: int
    end: int
    records_fetched: int
    rows_written: int
    quarantined: int


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One committed run of one table: what was read, written and quarantined."""

    run_id: str
    kind: str
    table: str
    topic: str
    committed_at_ms: int
    records_fetched: int
    rows_written: int
    quarantined: int
    bytes_fetched: int
    bytes_written: int
    seconds: float
    """Wall time from planning to commit (including any earlier failed attempts)."""
    task_seconds: float
    """Sum of the map tasks' times."""
    ranges: tuple[TaskRange, ...]
    partitions: tuple[PartitionAudit, ...]
    gaps: tuple[OffsetGap, ...]
    window_ms: tuple[int, int] | None = None
    replaced_partitions: tuple[str, ...] = ()
    """Backfill only: the table partitions (``dt=.../hr=...``) it replaced."""
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> bytes:
        return to_json(self)

    @staticmethod
    def from_json(data: bytes) -> "AuditEntry":
        raw = json.loads(data)
        raw["ranges"] = tuple(TaskRange(**r) for r in raw["ranges"])
        raw["partitions"] = tuple(PartitionAudit(**p) for p in raw["partitions"])
        raw["gaps"] = tuple(OffsetGap(**g) for g in raw["gaps"])
        raw["window_ms"] = tuple(raw["window_ms"]) if raw["window_ms"] else None
        raw["replaced_partitions"] = tuple(raw["replaced_partitions"])
        raw["notes"] = tuple(raw["notes"])
        return AuditEntry(**raw)


@dataclass(frozen=True, slots=True)
class OffsetsSnapshot:
    """The scheduled load's committed offsets of a table: the next offset to load per partition."""

    table: str
    topic: str
    run_id: str
    committed_at_ms: int
    offsets: dict[int, int]

    def to_json(self) -> bytes:
        return to_json(self)

    @staticmethod
    def from_json(data: bytes) -> "OffsetsSnapshot":
        raw = json.loads(data)
        raw["offsets"] = _int_keys(raw["offsets"])
        return OffsetsSnapshot(**raw)


@dataclass(frozen=True, slots=True)
class TableLock:
    """Who holds a table: at most one run (scheduled or backfill) works on a table at once."""

    run_id: str
    kind: str
    host: str
    pid: int
    acquired_at_ms: int
    heartbeat_at_ms: int
    token: str = ""
    """Unique per holder: a rerun of the same run id gets a new one."""

    def to_json(self) -> bytes:
        return to_json(self)

    @staticmethod
    def from_json(data: bytes) -> "TableLock":
        return TableLock(**json.loads(data))


def to_json(value: Any) -> bytes:
    return json.dumps(dataclasses.asdict(value), indent=1, sort_keys=True).encode()


def _int_keys(raw: dict[str, int]) -> dict[int, int]:
    return {int(k): int(v) for k, v in raw.items()}
