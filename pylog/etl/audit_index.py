"""A table's audit index: its newest audit entries and the newest of each kind, in one
JSON file, so a commit, ``pylog status`` and ``pylog tables`` read one file however long
the history is (``StateStore`` keeps it versioned under ``tables/<table>/audit-index/``)::

    {"recent": [<audit entry>, ...],          newest RECENT_AUDITS entries, oldest first
     "latest": {"scheduled": <entry>, ...},   the newest entry of each kind
     "complete": true,                        the index has seen every entry of the table
     "oldest_ms": 1700000000000}              commit time of the oldest kept entry, or null
"""

from __future__ import annotations

import json

from pylog.etl.model import AuditEntry

RECENT_AUDITS = 50


class AuditIndex:
    """The newest audit entries of a table and the newest of each kind (one JSON file).

    ``complete`` says the index has seen every entry of the table (it was started with
    the table, or from fewer than RECENT_AUDITS entries): a kind missing from ``latest``
    then never ran. ``oldest_ms`` is the commit time of the oldest entry in ``audit/``
    (None: unknown), so retention lists that directory only when something expired.
    Entries are kept as parsed JSON and turned into AuditEntry only when read.
    """

    def __init__(self, recent: list[dict], latest: dict[str, dict], complete: bool,
                 oldest_ms: int | None) -> None:
        self._recent = recent
        self._latest = latest
        self.complete = complete
        self.oldest_ms = oldest_ms

    @property
    def recent(self) -> tuple[AuditEntry, ...]:
        return tuple(_entry(raw) for raw in self._recent)

    @property
    def newest(self) -> AuditEntry | None:
        return _entry(self._recent[-1]) if self._recent else None

    def latest(self, kind: str) -> AuditEntry | None:
        raw = self._latest.get(kind)
        return _entry(raw) if raw else None

    def add(self, entry: AuditEntry) -> "AuditIndex":
        raw = json.loads(entry.to_json())
        oldest = entry.committed_at_ms if self.oldest_ms is None and self.complete else self.oldest_ms
        return AuditIndex([*self._recent, raw][-RECENT_AUDITS:], {**self._latest, entry.kind: raw},
                          self.complete, oldest)

    def with_oldest(self, oldest_ms: int | None) -> "AuditIndex":
        return AuditIndex(self._recent, self._latest, self.complete, oldest_ms)

    def to_json(self) -> bytes:
        return json.dumps({"recent": self._recent, "latest": self._latest, "complete": self.complete,
                           "oldest_ms": self.oldest_ms}, sort_keys=True).encode()

    @staticmethod
    def from_json(data: bytes) -> "AuditIndex":
        raw = json.loads(data)
        return AuditIndex(raw["recent"], raw["latest"], bool(raw["complete"]), raw.get("oldest_ms"))


def _entry(raw: dict) -> AuditEntry:
    return AuditEntry.from_json(json.dumps(raw).encode())
