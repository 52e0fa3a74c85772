"""The cleaner threads of a LogManager (Kafka's ``LogCleaner`` and ``LogCleanerManager``).

Each of ``log.cleaner.threads`` threads repeatedly picks the dirtiest compacted log (the
largest share of bytes not cleaned yet, at least its ``min.cleanable.dirty.ratio``) that no
other thread is cleaning, runs one :class:`pylog.log.cleaner.Cleaner` pass over it, and
records where the next pass starts in the log dir's ``cleaner-offset-checkpoint`` (Kafka's
checkpoint format, :mod:`pylog.log.checkpoint`)::

    0
    1
    my-compacted-topic 0 48213

With nothing to clean it sleeps ``log.cleaner.backoff.ms``. A log that fails to clean is
skipped for that long too. A lost or stale checkpoint only makes the next pass re-read
more of the log: cleaning is idempotent.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NamedTuple

from pylog.errors import ConfigError
from pylog.log import layout
from pylog.log.checkpoint import OffsetCheckpointFile
from pylog.log.cleaner import (
    Cleaner, CleaningAbortedError, CleanResult, SegmentsChangedError, cleanable_range)
from pylog.log.log import Log, LogClosedError
from pylog.types import TopicPartition

log = logging.getLogger(__name__)

class LogEntry(NamedTuple):
    """A partition's log as the cleaner sees it."""

    tp: TopicPartition
    log_dir: Path
    log: Log


@dataclass(frozen=True, slots=True)
class _Picked:
    """The log a thread cleans next, marked in progress."""

    tp: TopicPartition
    log_dir: Path
    log: Log
    first_dirty: int
    abort: threading.Event


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """Broker-wide cleaner settings (``log.cleaner.*`` in ``server.properties``).

    Raises ConfigError naming the field for an invalid value.
    """

    enabled: bool = True
    """Run the cleaner threads (``log.cleaner.enable``)."""
    threads: int = 1
    """Threads cleaning logs in parallel (``log.cleaner.threads``)."""
    dedupe_buffer_size: int = 128 << 20
    """Memory for the offset maps of all threads, bytes (``log.cleaner.dedupe.buffer.size``)."""
    backoff_ms: int = 15000
    """Sleep this long when no log needs cleaning (``log.cleaner.backoff.ms``)."""

    def __post_init__(self) -> None:
        for key, low in (("threads", 0), ("dedupe_buffer_size", 1 << 20), ("backoff_ms", 1)):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(key, f"must be an integer of at least {low}, got {value!r}")


class LogCleaner:
    """Cleaner threads over the logs ``logs()`` returns; LogManager owns one.

    Example::

        cleaner = LogCleaner(CleanerConfig(threads=1), manager_logs, [log_dir])
        cleaner.load_checkpoint(log_dir)
        cleaner.start()
        ...
        cleaner.stop()
    """

    def __init__(self, config: CleanerConfig, logs: Callable[[], list[LogEntry]],
                 clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self._logs = logs
        self._clock = clock
        self._lock = threading.Condition()
        self._checkpoints: dict[Path, dict[TopicPartition, int]] = {}
        self._in_progress: dict[TopicPartition, threading.Event] = {}  # tp -> its abort event
        self._retry_after: dict[TopicPartition, float] = {}
        self._write_locks: dict[Path, threading.Lock] = {}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._running = False  # started and not stopped (even with no threads)

    # -- checkpoints ------------------------------------------------------------------------

    def load_checkpoint(self, log_dir: Path) -> None:
        """Read ``log_dir``'s ``cleaner-offset-checkpoint`` (a corrupt one counts as empty)."""
        offsets = OffsetCheckpointFile(log_dir / layout.CLEANER_OFFSET_CHECKPOINT).read_or_empty()
        with self._lock:
            self._checkpoints[log_dir] = offsets

    def first_dirty(self, tp: TopicPartition, log_dir: Path) -> int:
        """Where the next pass over ``tp`` starts mapping (0: from the log start)."""
        with self._lock:
            return self._checkpoints.get(log_dir, {}).get(tp, 0)

    def _record(self, tp: TopicPartition, log_dir: Path, offset: int) -> None:
        with self._lock:
            self._checkpoints.setdefault(log_dir, {})[tp] = offset
            lock = self._write_locks.setdefault(log_dir, threading.Lock())
        with lock:
            live = {entry.tp for entry in self._logs() if entry.log_dir == log_dir}
            with self._lock:
                offsets = {p: o for p, o in self._checkpoints[log_dir].items() if p in live}
            OffsetCheckpointFile(log_dir / layout.CLEANER_OFFSET_CHECKPOINT).write(offsets)

    def forget(self, tp: TopicPartition) -> None:
        """Abort a pass over ``tp`` (waiting for it to stop) and drop its checkpoint entry:
        call before deleting the partition."""
        with self._lock:
            abort = self._in_progress.get(tp)
            if abort is not None:
                abort.set()
            while tp in self._in_progress:
                self._lock.wait()
            for offsets in self._checkpoints.values():
                offsets.pop(tp, None)

    # -- one pass ---------------------------------------------------------------------------

    def clean_once(self, cleaner: Cleaner | None = None) -> CleanResult | None:
        """Clean the dirtiest log that needs it, if any; returns what was done."""
        now = self._clock()
        picked = self._grab_dirtiest(int(now * 1000))
        if picked is None:
            return None
        tp, log_dir, target, first_dirty, abort = (picked.tp, picked.log_dir, picked.log,
                                                   picked.first_dirty, picked.abort)
        cleaner = cleaner or Cleaner(self._map_budget())
        started = time.monotonic()
        try:
            result = cleaner.clean(target, first_dirty, int(now * 1000), abort=abort)
        except (CleaningAbortedError, LogClosedError):
            return None
        except SegmentsChangedError as exc:
            log.info("%s", exc)
            return None
        except Exception:
            log.exception("%s: cleaning failed; retrying in %d ms", target.directory,
                          self.config.backoff_ms)
            with self._lock:
                self._retry_after[tp] = now + self.config.backoff_ms / 1000
            return None
        finally:
            with self._lock:
                del self._in_progress[tp]
                self._lock.notify_all()
        self._record(tp, log_dir, result.end)
        if result.end <= first_dirty:  # e.g. the high watermark holds it back: wait
            with self._lock:
                self._retry_after[tp] = now + self.config.backoff_ms / 1000
        elapsed = max(time.monotonic() - started, 1e-9)
        log.info("%s: cleaned offsets up to %d: %d segments into %d, %.1f MB read, %.1f MB "
                 "written (%.1f MB/s), %d keys mapped", target.directory, result.end,
                 result.segments_before, result.segments_after, result.bytes_read / 1e6,
                 result.bytes_written / 1e6, result.bytes_read / 1e6 / elapsed, result.map_entries)
        return result

    def _map_budget(self) -> int:
        return self.config.dedupe_buffer_size // max(self.config.threads, 1)

    def _grab_dirtiest(self, now_ms: int) -> _Picked | None:
        """The log to clean, now marked in progress; None if no log needs cleaning."""
        best = None
        for tp, log_dir, target in self._logs():
            config = target.config
            if not config.compact:
                continue
            with self._lock:
                if tp in self._in_progress or self._retry_after.get(tp, 0) * 1000 > now_ms:
                    continue
            first_dirty = self.first_dirty(tp, log_dir)
            try:
                view = target.cleaner_view()
            except LogClosedError:
                continue
            try:
                cleanable = cleanable_range(view, first_dirty, now_ms)
            finally:
                view.close()
            ratio = cleanable.dirty_ratio
            if cleanable.dirty_bytes and (ratio >= config.min_cleanable_dirty_ratio
                                          or cleanable.overdue_ms > 0):
                if best is None or ratio > best[0]:
                    best = (ratio, tp, log_dir, target, cleanable.first_dirty)
        if best is None:
            return None
        _, tp, log_dir, target, first_dirty = best
        with self._lock:
            if tp in self._in_progress:
                return None
            abort = self._in_progress[tp] = threading.Event()
        return _Picked(tp, log_dir, target, first_dirty, abort)

    # -- threads ----------------------------------------------------------------------------

    def start(self) -> None:
        """Start ``threads`` cleaner threads (none if disabled)."""
        self._running = True
        if self._threads or not self.config.enabled:
            return
        self._stop.clear()
        for n in range(self.config.threads):
            thread = threading.Thread(target=self._run, name=f"pylog-cleaner-{n}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _run(self) -> None:
        cleaner = Cleaner(self._map_budget(), self._stop)
        while not self._stop.is_set():
            try:
                done = self.clean_once(cleaner)
            except Exception:
                log.exception("cleaner thread failed")
                done = None
            if done is None:
                self._stop.wait(self.config.backoff_ms / 1000)

    def reconfigure(self, config: CleanerConfig) -> None:
        """Run with ``config`` from now on (``log.cleaner.threads`` and the others changed
        while the broker runs): running threads stop, aborting their passes as ``stop``
        does, and the new ones start, as Kafka restarts its cleaner."""
        running = self._running
        self.stop()
        self.config = config
        if running:
            self.start()
        log.info("log cleaner: %d threads, %d bytes of key maps, %d ms backoff",
                 config.threads if config.enabled else 0, config.dedupe_buffer_size,
                 config.backoff_ms)

    def stop(self) -> None:
        """Abort the passes under way (their cleaned files are discarded) and join the threads."""
        self._running = False
        self._stop.set()
        with self._lock:
            for abort in self._in_progress.values():
                abort.set()
        for thread in self._threads:
            thread.join()
        self._threads = []
