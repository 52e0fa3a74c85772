"""Offset syncs: which target offsets hold which source records, so a source consumer
group's position can be translated into a target position exactly.

Within one transaction the mirror writes a source partition's records to the same target
partition, in order, and nothing else writes there (the partition's transactional id is
held by one producer at a time). So records whose source offsets are consecutive land on
consecutive target offsets. A *run* records one such stretch::

    OffsetSync(source_offset=s, target_offset=t, count=n, source_next=m)

source records s .. s+n-1 are target records t .. t+n-1, and the source holds no other
record before m (m >= s+n: control records, aborted or compacted-away records, or the
transaction's end). Runs are written to the offset-syncs topic inside the transaction
whose records they describe, so only committed runs are ever read. One sync record
(JSON) per source partition and transaction::

    {"topic": "orders", "partition": 0, "runs": [[s, t, n, m], ...]}

Translating a source position c (the next source offset a group would read): inside a
run, t + (c - s); between a run's last record and m, the target offset after the run;
before the first run, the first run's target offset (older records were never mirrored);
past the last run's m, nothing yet: the mirror has not copied that far.
"""

from __future__ import annotations

import bisect
import json
import threading
from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class OffsetSync:
    source_offset: int
    target_offset: int
    count: int
    source_next: int

    @property
    def source_end(self) -> int:
        return self.source_offset + self.count

    @property
    def target_end(self) -> int:
        return self.target_offset + self.count


def encode_syncs(topic: str, partition: int, runs: list[OffsetSync]) -> bytes:
    return json.dumps({"topic": topic, "partition": partition, "runs": [
        [r.source_offset, r.target_offset, r.count, r.source_next] for r in runs]},
        separators=(",", ":")).encode()


def decode_syncs(value: bytes) -> tuple[str, int, list[OffsetSync]]:
    """(topic, partition, runs) of one sync record; ValueError when malformed."""
    try:
        doc = json.loads(value)
        runs = [OffsetSync(*(int(x) for x in run)) for run in doc["runs"]]
        return str(doc["topic"]), int(doc["partition"]), runs
    except (TypeError, KeyError, json.JSONDecodeError) as exc:
        raise ValueError(f"not an offset sync record: {exc}") from None


class OffsetSyncStore:
    """The runs of each source partition, in source order, and translation through them.

    ``max_runs`` bounds memory per partition: the oldest runs go first, and a position
    older than every kept run translates to the oldest kept run's start (conservative:
    such a group may read a few records twice, never miss one).
    """

    def __init__(self, max_runs: int = 100_000) -> None:
        self.max_runs = max_runs
        self._lock = threading.Lock()     # the mirror adds, its checkpoint thread translates
        self._runs: dict[tuple[str, int], list[OffsetSync]] = {}
        self._starts: dict[tuple[str, int], list[int]] = {}

    def add(self, topic: str, partition: int, runs: list[OffsetSync]) -> None:
        """Add runs of a later transaction (a replayed older one is ignored)."""
        with self._lock:
            self._add(topic, partition, runs)

    def _add(self, topic: str, partition: int, runs: list[OffsetSync]) -> None:
        key = (topic, partition)
        known = self._runs.setdefault(key, [])
        starts = self._starts.setdefault(key, [])
        for run in runs:
            if known and run.source_offset < known[-1].source_next:
                continue
            known.append(run)
            starts.append(run.source_offset)
        if len(known) > self.max_runs:
            del known[:len(known) - self.max_runs]
            del starts[:len(starts) - self.max_runs]

    def runs(self, topic: str, partition: int) -> list[OffsetSync]:
        with self._lock:
            return list(self._runs.get((topic, partition), ()))

    def forget(self, topic: str, partition: int) -> None:
        with self._lock:
            self._runs.pop((topic, partition), None)
            self._starts.pop((topic, partition), None)

    def translate(self, topic: str, partition: int, source_position: int) -> int | None:
        """The target offset at which a reader resumes after the source records before
        ``source_position``; None while the mirror has not copied up to there."""
        with self._lock:
            return self._translate(topic, partition, source_position)

    def _translate(self, topic: str, partition: int, source_position: int) -> int | None:
        runs = self._runs.get((topic, partition))
        if not runs:
            return None
        i = bisect.bisect_right(self._starts[(topic, partition)], source_position) - 1
        if i < 0:
            return runs[0].target_offset
        run = runs[i]
        if source_position < run.source_end:
            return run.target_offset + (source_position - run.source_offset)
        if source_position <= run.source_next or i + 1 < len(runs):
            # No mirrored record lies between the run's end and the next run's start.
            return run.target_end
        return None
