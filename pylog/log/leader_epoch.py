"""The leader epoch cache (KIP-101): the first offset written in each leader epoch.

A follower asks the leader for the end offset of its latest epoch and truncates to it,
instead of to its high watermark, so it neither keeps records the leader never had nor
drops records the leader committed. One cache per partition, kept in
``<partition dir>/leader-epoch-checkpoint``, text in Kafka's format::

    0             version
    2             number of entries
    0 0           epoch, offset of the first record written in it
    3 1200

Epochs and start offsets both strictly increase down the file (an epoch in which nothing
was written is replaced by the next one, as in Kafka). The file is rewritten whole
(temp file, fsync, rename, directory fsync: :func:`checkpoint.write_checkpoint_lines`)
after every change; changes are rare (a new leader, a truncation, retention).

After a crash: entries may point past the log end (an epoch is recorded before its
first batch is written, and the log may have been cut by recovery); :class:`pylog.log.Log`
trims them when it opens. A missing or unreadable file is rebuilt from the
``partitionLeaderEpoch`` field of the batch headers (:func:`epochs_from_headers`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from pylog.log.checkpoint import CorruptCheckpointError, read_checkpoint_lines, write_checkpoint_lines
from pylog.records.header import BatchHeader

log = logging.getLogger(__name__)

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


@dataclass(frozen=True, slots=True)
class EpochEntry:
    """Leader epoch ``epoch`` starts at ``start_offset``."""

    epoch: int
    start_offset: int


class LeaderEpochCache:
    """The epoch entries of one partition, persisted after every change.

    Not thread-safe for writers: :class:`pylog.log.Log` calls it under its lock. Readers
    may call without it (the entry list is replaced, never changed in place).

    Example::

        cache = LeaderEpochCache.load(partition_dir / "leader-epoch-checkpoint")
        cache.assign(3, 1200)
        cache.end_offset_for(2, log_end_offset=1500)   # (2, 1200) if epoch 2 was known
    """

    def __init__(self, path: Path, entries: Iterable[EpochEntry] = ()) -> None:
        self.path = Path(path)
        self._entries: tuple[EpochEntry, ...] = ()
        for entry in entries:
            self._add(entry.epoch, entry.start_offset)

    @classmethod
    def load(cls, path: Path) -> "LeaderEpochCache":
        """The cache stored at ``path``; empty (with a warning) if the file is unreadable."""
        cache = read_epoch_checkpoint(path)
        return cache if cache is not None else cls(path)

    # -- reads ----------------------------------------------------------------------------

    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        """The newest epoch, or -1 if there is none."""
        entries = self._entries
        return entries[-1].epoch if entries else UNDEFINED_EPOCH

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """``(epoch, end_offset)`` for a follower's OffsetsForLeaderEpoch request, as Kafka's
        ``LeaderEpochFileCache.endOffsetFor``:

        * requested is -1, or newer than every known epoch (or none is known): ``(-1, -1)``;
        * requested is the latest epoch: ``(requested, log_end_offset)``;
        * requested is older than the first known epoch (retention deleted it):
          ``(requested, start offset of the first epoch)``;
        * otherwise: the largest known epoch <= requested, ending where the first epoch
          greater than requested starts.
        """
        entries = self._entries
        if requested_epoch == UNDEFINED_EPOCH or not entries or requested_epoch > entries[-1].epoch:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == entries[-1].epoch:
            return requested_epoch, log_end_offset
        later = next(i for i, e in enumerate(entries) if e.epoch > requested_epoch)
        epoch = entries[later - 1].epoch if later > 0 else requested_epoch
        return epoch, entries[later].start_offset

    # -- changes (each one persisted) -----------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; True if that was new.

        An epoch equal to the latest is ignored; an older one is ignored with a warning.
        A newer epoch starting where the latest one started replaces it (nothing was
        written in that one). Raises ValueError for a negative value, or for a start offset
        below the latest entry's (start offsets never decrease; the log truncates the cache
        before it appends below them).
        """
        _check_entry(self.path, epoch, start_offset)
        latest = self.latest_epoch
        if epoch <= latest:
            if epoch < latest:
                log.warning("%s: ignoring epoch %d at offset %d, older than the latest epoch %d",
                            self.path, epoch, start_offset, latest)
            return False
        self._add(epoch, start_offset)
        self._write()
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop the entries starting at or after ``end_offset`` (the log was cut there)."""
        kept = tuple(e for e in self._entries if e.start_offset < end_offset)
        if kept != self._entries:
            self._replace(kept)

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop the entries wholly below ``start_offset`` (the new log start); the epoch that
        holds ``start_offset`` now starts there."""
        entries = self._entries
        below = sum(1 for e in entries if e.start_offset <= start_offset)
        if below == 0:
            return
        kept = (EpochEntry(entries[below - 1].epoch, start_offset),) + entries[below:]
        if kept != entries:
            self._replace(kept)

    def clear(self) -> None:
        self._replace(())

    def flush(self) -> None:
        """Write the entries out (every change does; this is for a freshly built cache)."""
        self._write()

    # -- internals ------------------------------------------------------------------------

    def _add(self, epoch: int, start_offset: int) -> None:
        _check_entry(self.path, epoch, start_offset)
        entries = self._entries
        if entries:
            latest = entries[-1]
            if epoch <= latest.epoch or start_offset < latest.start_offset:
                raise ValueError(f"{self.path}: epoch {epoch} at offset {start_offset} does not "
                                 f"follow epoch {latest.epoch} at offset {latest.start_offset}")
            if start_offset == latest.start_offset:
                entries = entries[:-1]  # that epoch wrote nothing; Kafka drops it too
        self._entries = entries + (EpochEntry(epoch, start_offset),)

    def _replace(self, entries: tuple[EpochEntry, ...]) -> None:
        self._entries = entries
        self._write()

    def _write(self) -> None:
        write_checkpoint_lines(self.path, [f"{e.epoch} {e.start_offset}" for e in self._entries])

    def __repr__(self) -> str:
        body = ", ".join(f"{e.epoch}@{e.start_offset}" for e in self._entries)
        return f"LeaderEpochCache({body})"


def _check_entry(path: Path, epoch: int, start_offset: int) -> None:
    if epoch < 0 or start_offset < 0:
        raise ValueError(f"{path}: invalid epoch entry {epoch} at offset {start_offset}")


def read_epoch_checkpoint(path: Path) -> LeaderEpochCache | None:
    """The cache stored at ``path``; None when the file is missing or unreadable (with a
    warning), so the caller can rebuild it."""
    try:
        lines = read_checkpoint_lines(path)
        if lines is None:
            return None
        pairs = (line.split(" ") for line in lines)
        return LeaderEpochCache(path, [EpochEntry(int(epoch), int(offset)) for epoch, offset in pairs])
    except (CorruptCheckpointError, ValueError) as exc:
        log.warning("%s: ignoring an unreadable leader epoch checkpoint: %s", path, exc)
        return None


def epochs_from_headers(headers: Iterable[BatchHeader]) -> list[EpochEntry]:
    """The epoch entries implied by batch headers in offset order: each batch whose
    ``partitionLeaderEpoch`` is newer than every earlier one starts that epoch. Batches
    without an epoch (-1) and older epochs are skipped, as :meth:`LeaderEpochCache.assign`
    would."""
    entries: list[EpochEntry] = []
    latest = UNDEFINED_EPOCH
    for header in headers:
        if header.partition_leader_epoch > latest:
            latest = header.partition_leader_epoch
            entries.append(EpochEntry(latest, header.base_offset))
    return entries
