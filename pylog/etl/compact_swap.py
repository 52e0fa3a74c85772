"""The swap of compacted partitions and its journal: staging -> journal -> exchange.

The same mechanism as a backfill's replace-by-offset-range (:mod:`pylog.etl.swap`): a
partition's new content is staged in full under ``<warehouse>/_staging/<id>/<table>/``,
a journal names it, then the staged directory takes the live one's place and the live
one goes to ``<warehouse>/_trash/<id>/<table>/``. The journal is
``<state>/compactions/<table>/<id>.json`` (CompactionJournal, JSON)::

    {"compaction_id": "compact-20261124T224312Z-1b4156", "table": "page_views",
     "created_at_ms": ..., "partitions": [
       {"table": "page_views", "parts": ["dt=2026-11-20", "hr=07"],
        "old": [[name, size], ...],       the live files rewritten
        "carried": [[name, size], ...],   the live files linked into the staged directory
        "new": [name, ...],               the files written, compacted-<stamp>-<n>.parquet
        "rows": ..., "bytes_after": ...}]}

It is written once, after every staged file is complete, and deleted after the trash and
staging are (so a journal that exists is unfinished). Replaying it is idempotent; per
partition the replay decides from what it finds:

* the new files are live: swapped (the old directory, if still at the staged path after
  an exchange, moves to trash);
* the live directory holds exactly the journalled files with their sizes: swap it now;
* the old files are in trash and none of them is live: the two-rename swap was cut
  between its renames: the staged directory (or, if a load published files into the
  partition since, each staged file) moves in;
* anything else: a load changed the partition after the crash; the staged copy is
  dropped and the partition keeps its files (a later compaction redoes it).

What a reader listing a partition directory can see during the swap:

* file:// on Linux (renameat2 with RENAME_EXCHANGE, through ctypes; ext4, xfs, btrfs,
  tmpfs): the staged and live directories are exchanged by one system call. A lister
  sees the old files or the new ones, never neither and never both.
* HDFS, or a local file system without RENAME_EXCHANGE: two renames, live -> trash then
  staged -> live. Between them (one namenode round trip, milliseconds; for good if the
  process dies there, until the next compaction) the partition directory does not exist:
  a lister sees no files for that hour, never both sets.
* A reader that listed the old files and opens one after the swap: a file already open
  stays readable on a local disk; one opened by name after the swap is gone
  (FileNotFoundError; Spark's "REFRESH TABLE" case), and the old files are deleted at the
  end of the compaction. Partitions are swapped one at a time, so a listing of the whole
  table may see some compacted and some not, each one whole.

``PYLOG_NO_EXCHANGE=1`` makes file:// use the two renames as well (tests of that path).
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import json
import os
from dataclasses import dataclass
from typing import Callable

from pylog.etl import faults
from pylog.etl.fs import ArrowStorage, Storage
from pylog.etl.layout import staging_root, table_root, trash_root

SWAPPED, DONE, ABANDONED = "swapped", "done", "abandoned"


@dataclass(frozen=True, slots=True)
class PartitionCompaction:
    """One partition of one compaction: a journal entry, and a line of the report."""

    table: str
    parts: tuple[str, ...]
    old: tuple[tuple[str, int], ...]
    """(name, size) of the files rewritten."""
    carried: tuple[tuple[str, int], ...]
    """(name, size) of the files kept as they are."""
    new: tuple[str, ...]
    """Names of the files written."""
    rows: int
    bytes_after: int

    @property
    def bytes_before(self) -> int:
        return sum(size for _, size in self.old)

    @property
    def spec(self) -> str:
        """``page_views dt=2026-11-20/hr=07``."""
        return f"{self.table} {'/'.join(self.parts)}"


@dataclass(frozen=True, slots=True)
class CompactionJournal:
    """``compactions/<table>/<id>.json``: written once, before the first swap."""

    compaction_id: str
    table: str
    created_at_ms: int
    partitions: tuple[PartitionCompaction, ...]

    def to_json(self) -> bytes:
        return json.dumps(dataclasses.asdict(self), sort_keys=True).encode()

    @staticmethod
    def from_json(data: bytes) -> "CompactionJournal":
        raw = json.loads(data)
        entries = tuple(PartitionCompaction(
            p["table"], tuple(p["parts"]), tuple((n, s) for n, s in p["old"]),
            tuple((n, s) for n, s in p["carried"]), tuple(p["new"]), p["rows"], p["bytes_after"])
            for p in raw["partitions"])
        return CompactionJournal(raw["compaction_id"], raw["table"], raw["created_at_ms"], entries)


def replay(warehouse: Storage, journal: CompactionJournal, journals: "CompactionJournals",
           check: Callable[[], None], fault: str | None, notes: list[str]) -> list[PartitionCompaction]:
    """Swap every journalled partition that is not swapped yet (idempotent), then clean up."""
    done = []
    for entry in journal.partitions:
        check()
        outcome = _swap_partition(warehouse, journal.compaction_id, entry, fault)
        if outcome == ABANDONED:
            notes.append(f"{entry.spec}: changed since compaction {journal.compaction_id} staged it; "
                         f"left as it is")
        else:
            done.append(entry)
    cleanup(warehouse, journal, journals)
    return done


def _swap_partition(warehouse: Storage, compaction_id: str, entry: PartitionCompaction,
                    fault: str | None) -> str:
    """SWAPPED, DONE (before a crash) or ABANDONED (the partition changed since it was staged)."""
    live = warehouse.child(table_root(warehouse, entry.table), *entry.parts)
    staged = warehouse.child(staging_root(warehouse, compaction_id, entry.table), *entry.parts)
    trash = warehouse.child(trash_root(warehouse, compaction_id, entry.table), *entry.parts)
    live_names = set(data_names(warehouse, live))
    if set(entry.new) <= live_names:
        if warehouse.exists(staged):  # exchanged; the old directory is still at the staged path
            _replace_dir(warehouse, staged, trash)
        return DONE
    old = {name for name, _ in entry.old}
    before = {(n, warehouse.size(warehouse.child(live, n))) for n in live_names}
    if live_names and before == set(entry.old) | set(entry.carried) and warehouse.exists(staged):
        if _exchange(warehouse, staged, live):
            faults.kill_driver_at("compact_mid_swap", fault)
            _replace_dir(warehouse, staged, trash)
        else:
            _replace_dir(warehouse, live, trash)
            faults.kill_driver_at("compact_mid_swap", fault)
            warehouse.move(staged, live)
        return SWAPPED
    if not live_names & old and old <= set(data_names(warehouse, trash)) and warehouse.exists(staged):
        # Cut between the two renames; a load may have published files into the partition since.
        if not warehouse.exists(live):
            warehouse.move(staged, live)
            return SWAPPED
        for name in warehouse.list_dir(staged):
            if name not in live_names:
                warehouse.move(warehouse.child(staged, name), warehouse.child(live, name))
        warehouse.delete(staged)
        return SWAPPED
    warehouse.delete(staged)
    return ABANDONED


def _replace_dir(warehouse: Storage, src: str, dst: str) -> None:
    warehouse.delete(dst)
    warehouse.move(src, dst)


AT_FDCWD = -100
RENAME_EXCHANGE = 2
_NO_EXCHANGE = (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EXDEV)


def _exchange(warehouse: Storage, a: str, b: str) -> bool:
    """Exchange two local directories atomically (renameat2); False where that is unavailable."""
    if not isinstance(warehouse, ArrowStorage) or not warehouse.local or os.environ.get("PYLOG_NO_EXCHANGE"):
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # not Linux, or a libc older than glibc 2.28
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in _NO_EXCHANGE:
        return False
    raise OSError(code, os.strerror(code), f"{a} <-> {b}")


def cleanup(warehouse: Storage, journal: CompactionJournal, journals: "CompactionJournals") -> None:
    """Delete the compaction's trash and staging, then its journal."""
    tables = {e.table for e in journal.partitions} | {journal.table, f"{journal.table}_quarantine"}
    for root in (trash_root, staging_root):
        for table in tables:
            warehouse.delete(root(warehouse, journal.compaction_id, table))
        _delete_if_empty(warehouse, warehouse.parent(root(warehouse, journal.compaction_id, journal.table)))
    journals.delete(journal.compaction_id)


def drop_orphans(warehouse: Storage, tables: tuple[str, ...], journals: "CompactionJournals") -> None:
    """Delete staging and trash of ``tables`` left by compactions that died before their journal."""
    live_ids = set(journals.ids())
    for area in ("_staging", "_trash"):
        for name in warehouse.list_dir(warehouse.join(area)):
            if not name.startswith("compact-") or name in live_ids:
                continue
            run_dir = warehouse.join(area, name)
            for table in tables:
                warehouse.delete(warehouse.child(run_dir, table))
            _delete_if_empty(warehouse, run_dir)


def _delete_if_empty(warehouse: Storage, directory: str) -> None:
    if warehouse.exists(directory) and not warehouse.list_dir(directory):
        warehouse.delete(directory)


class CompactionJournals:
    """``<state>/compactions/<table>/<id>.json`` through the state store's Storage."""

    def __init__(self, storage: Storage, table: str) -> None:
        self.storage, self.table = storage, table
        self.directory = storage.join("compactions", table)

    def ids(self) -> list[str]:
        return [n[:-len(".json")] for n in self.storage.list_dir(self.directory)
                if n.endswith(".json") and not n.startswith(".")]

    def pending(self) -> list[CompactionJournal]:
        paths = [self.storage.child(self.directory, f"{i}.json") for i in self.ids()]
        return [CompactionJournal.from_json(self.storage.read_bytes(path)) for path in paths]

    def write(self, journal: CompactionJournal) -> None:
        self.storage.write_atomic(self.storage.child(self.directory, f"{journal.compaction_id}.json"),
                                  journal.to_json())

    def delete(self, compaction_id: str) -> None:
        self.storage.delete(self.storage.child(self.directory, f"{compaction_id}.json"))


def data_names(warehouse: Storage, directory: str) -> list[str]:
    """The visible Parquet files of a directory (readers skip names starting with . or _)."""
    return [n for n in warehouse.list_dir(directory)
            if n.endswith(".parquet") and not n.startswith((".", "_"))]

