"""LogManager: every partition log under one or more log dirs.

Per log dir it keeps (see :mod:`layout`): an flock on ``.lock`` so two brokers never share
a dir, ``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint`` and
``replication-offset-checkpoint`` (:mod:`checkpoint`), and ``.clean_shutdown``, written by
:meth:`LogManager.close` after everything is flushed and removed again by
:meth:`LogManager.load`. A dir loaded without the marker had an unclean shutdown: its logs
are recovered from their recovery points.

``replication-offset-checkpoint`` holds the replicated high watermark of each log that has
one. On load it is handed to the log as ``restored_high_watermark``, not applied: the
replica manager above decides. Until it does, the restored value is written back, so a
crash meanwhile does not lose it.

Logs whose ``cleanup.policy`` has ``compact`` are compacted by the cleaner threads
(:mod:`pylog.log.cleaner_manager`), which :meth:`LogManager.start` starts too; their
progress is in each dir's ``cleaner-offset-checkpoint``.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import threading
import time
from pathlib import Path
from typing import Callable, Iterable

from pylog.errors import ConfigError, InvalidTopicError, KafkaStorageError
from pylog.log import layout
from pylog.log.checkpoint import OffsetCheckpointFile, fsync_directory
from pylog.log.cleaner_manager import CleanerConfig, LogCleaner, LogEntry
from pylog.log.config import LogConfig
from pylog.log.log import Log, LogClosedError
from pylog.types import TopicPartition

log = logging.getLogger(__name__)

# Kafka's rule; it also keeps names safe in paths and in the space-separated checkpoints.
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


class LogManager:
    """Opens, creates, flushes, retains and closes the partition logs of a broker.

    Example::

        mgr = LogManager([Path("/var/lib/pylog")], LogConfig())
        mgr.load()
        mgr.start(flush_check_ms=1000, retention_check_ms=300_000)
        log = mgr.get_or_create("events", 0)
        ...
        mgr.close()

    Raises KafkaStorageError if a log dir is locked by another process, InvalidTopicError
    for a topic name Kafka would refuse, ConfigError for an empty ``log_dirs``.
    ``cleaner_config`` sets the cleaner threads of compacted logs (default: one thread).
    ``producer_id_expiration_ms`` (``producer.id.expiration.ms``): idle producers are
    forgotten after this long, checked with retention.
    """

    def __init__(self, log_dirs: Iterable[Path], default_config: LogConfig,
                 clock: Callable[[], float] = time.time,
                 cleaner_config: CleanerConfig | None = None,
                 producer_id_expiration_ms: int = 86_400_000) -> None:
        self.log_dirs = [Path(d) for d in log_dirs]
        if not self.log_dirs:
            raise ConfigError("log_dirs", "at least one log dir is needed")
        self.default_config = default_config
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self._clock = clock
        self._lock = threading.RLock()
        self._logs: dict[TopicPartition, Log] = {}
        self._dir_of: dict[TopicPartition, Path] = {}
        self._count_in = {d: 0 for d in self.log_dirs}  # logs per dir, for placement
        self._lock_files: dict[Path, int] = {}
        # One writer at a time per dir's checkpoint files (log-manager thread, deletes).
        self._checkpoint_locks = {d: threading.Lock() for d in self.log_dirs}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.cleaner = LogCleaner(cleaner_config or CleanerConfig(), self._log_entries, clock)

    # -- loading --------------------------------------------------------------------------

    def _lock_dir(self, log_dir: Path) -> None:
        try:
            log_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(log_dir / layout.LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise KafkaStorageError(f"cannot use log dir {log_dir}: "
                                    f"{exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise KafkaStorageError(f"{log_dir} is in use by another process") from None
        self._lock_files[log_dir] = fd

    def load(self) -> list[TopicPartition]:
        """Open every ``<topic>-<partition>`` dir in the log dirs, recovering them after an
        unclean shutdown. Returns the partitions loaded."""
        loaded = []
        for log_dir in self.log_dirs:
            if log_dir not in self._lock_files:
                self._lock_dir(log_dir)
            marker = log_dir / layout.CLEAN_SHUTDOWN_FILE
            clean = marker.exists()
            had_checkpoints = (log_dir / layout.RECOVERY_POINT_CHECKPOINT).exists()
            loaded_here = []
            recovery_points = OffsetCheckpointFile(log_dir / layout.RECOVERY_POINT_CHECKPOINT).read_or_empty()
            start_offsets = OffsetCheckpointFile(log_dir / layout.LOG_START_OFFSET_CHECKPOINT).read_or_empty()
            high_watermarks = OffsetCheckpointFile(log_dir / layout.REPLICATION_OFFSET_CHECKPOINT).read_or_empty()
            for child in sorted(log_dir.iterdir()):
                tp = layout.parse_partition_dir(child.name)
                if tp is None or not child.is_dir() or tp in self._logs:
                    continue
                opened = Log.open(child, self.default_config, self._clock,
                                  recovery_point=recovery_points.get(tp, 0),
                                  log_start_offset=start_offsets.get(tp, 0),
                                  had_clean_shutdown=clean)
                opened.restored_high_watermark = high_watermarks.get(tp)
                with self._lock:
                    self._logs[tp] = opened
                    self._dir_of[tp] = log_dir
                    self._count_in[log_dir] += 1
                loaded.append(tp)
                loaded_here.append(tp)
            self.cleaner.load_checkpoint(log_dir)
            if not clean and not loaded_here and not had_checkpoints:
                log.info("%s: a new log dir", log_dir)
            else:
                log.info("%s: loaded %d logs after a%s shutdown", log_dir, len(loaded_here),
                         " clean" if clean else "n unclean")
            self._write_checkpoints(log_dir)
            marker.unlink(missing_ok=True)
            fsync_directory(log_dir)
        return loaded

    # -- partitions -----------------------------------------------------------------------

    def get(self, topic: str, partition: int) -> Log | None:
        with self._lock:
            return self._logs.get(TopicPartition(topic, partition))

    def get_or_create(self, topic: str, partition: int, config: LogConfig | None = None) -> Log:
        """The partition's log, created in the least-used log dir if it does not exist.
        A given ``config`` is applied to an existing log too."""
        tp = TopicPartition(topic, partition)
        if not _LEGAL_TOPIC.match(topic) or topic in (".", "..") or partition < 0:
            raise InvalidTopicError(
                f"invalid topic partition {topic!r}/{partition}: topic names are 1 to 249 of "
                f"[a-zA-Z0-9._-], partitions are >= 0")
        with self._lock:
            existing = self._logs.get(tp)
            if existing is not None:
                if config is not None and config != existing.config:
                    existing.update_config(config)
                return existing
            log_dir = self._next_log_dir()
            if log_dir not in self._lock_files:
                self._lock_dir(log_dir)
            created = Log.open(log_dir / layout.partition_dir_name(tp), config or self.default_config,
                               self._clock, had_clean_shutdown=False)
            fsync_directory(log_dir)
            self._logs[tp] = created
            self._dir_of[tp] = log_dir
            self._count_in[log_dir] += 1
            return created

    def _next_log_dir(self) -> Path:
        return min(self.log_dirs, key=self._count_in.__getitem__)

    def partitions(self) -> list[TopicPartition]:
        with self._lock:
            return sorted(self._logs)

    def delete_partition(self, topic: str, partition: int) -> bool:
        """Delete the partition's log and directory; False if there was none."""
        tp = TopicPartition(topic, partition)
        with self._lock:
            removed = self._logs.pop(tp, None)
            log_dir = self._dir_of.pop(tp, None)
            if log_dir is not None:
                self._count_in[log_dir] -= 1
        if removed is None:
            return False
        self.cleaner.forget(tp)
        removed.delete()
        self._write_checkpoints(log_dir)
        return True

    # -- background work ------------------------------------------------------------------

    def flush_all(self) -> None:
        for entry in self._snapshot():
            try:
                entry.flush()
            except LogClosedError:
                pass  # deleted since the snapshot
        self._write_all_checkpoints()

    def run_retention(self, now: float | None = None) -> int:
        """Apply retention to every log; returns the number of segments deleted."""
        deleted = self._each_log(lambda entry: entry.delete_old_segments(now))
        if deleted:
            self._write_all_checkpoints()
        return deleted

    def expire_producers(self, now: float | None = None) -> int:
        """Forget producers idle for ``producer_id_expiration_ms`` in every log."""
        now_ms = int((self._clock() if now is None else now) * 1000)
        return self._each_log(lambda entry: entry.expire_producers(now_ms, self.producer_id_expiration_ms))

    def flush_due(self) -> int:
        """Flush the logs whose ``flush_ms`` has passed; returns how many were flushed."""
        now_ms = int(self._clock() * 1000)
        flushed = self._each_log(lambda entry: entry.flush_if_due(now_ms))
        if flushed:
            self._write_all_checkpoints()
        return flushed

    def _log_entries(self) -> list[LogEntry]:
        with self._lock:
            return [LogEntry(tp, self._dir_of[tp], lg) for tp, lg in self._logs.items()]

    def _each_log(self, task: Callable[[Log], int]) -> int:
        """Sum ``task`` over every log; one log failing does not stop the others."""
        total = 0
        for entry in self._snapshot():
            try:
                total += task(entry)
            except LogClosedError:
                pass  # deleted (or shut down) since the snapshot
            except Exception as error:
                log.warning("%s: %s: %s", entry.directory, type(error).__name__, error)
        return total

    def start(self, flush_check_ms: int = 1000, retention_check_ms: int = 300_000,
              checkpoint_ms: int = 5000) -> None:
        """Start a background thread that flushes (by ``flush_ms``) every ``flush_check_ms``,
        applies retention every ``retention_check_ms`` and writes the checkpoints (the
        replicated high watermarks among them, as Kafka's
        ``replica.high.watermark.checkpoint.interval.ms``) every ``checkpoint_ms``; and
        the cleaner threads. :meth:`close` stops them."""
        if self._thread is not None:
            return
        self.cleaner.start()
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, args=(flush_check_ms, retention_check_ms, checkpoint_ms),
            name="pylog-log-manager", daemon=True)
        self._thread.start()

    def _run(self, flush_check_ms: int, retention_check_ms: int, checkpoint_ms: int) -> None:
        next_flush = next_retention = time.monotonic()
        next_checkpoint = next_flush + checkpoint_ms / 1000
        while not self._stop.is_set():
            now = time.monotonic()
            try:
                if now >= next_flush:
                    self.flush_due()
                    next_flush = now + flush_check_ms / 1000
                if now >= next_retention:
                    self.run_retention()
                    self.expire_producers()
                    next_retention = now + retention_check_ms / 1000
                if now >= next_checkpoint:
                    self._write_all_checkpoints()
                    next_checkpoint = now + checkpoint_ms / 1000
            except Exception:
                log.exception("log manager background task failed")
            self._stop.wait(max(0.0, min(next_flush, next_retention, next_checkpoint)
                                - time.monotonic()))

    def stop(self) -> None:
        """Stop the background threads (if running) and wait for them."""
        self.cleaner.stop()
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    # -- checkpoints and shutdown ---------------------------------------------------------

    def _snapshot(self) -> list[Log]:
        with self._lock:
            return list(self._logs.values())

    def _write_checkpoints(self, log_dir: Path) -> None:
        # The snapshot is taken under the dir's lock too, so the last write is the newest.
        with self._checkpoint_locks[log_dir]:
            with self._lock:
                logs = {tp: lg for tp, lg in self._logs.items() if self._dir_of[tp] == log_dir}
            OffsetCheckpointFile(log_dir / layout.RECOVERY_POINT_CHECKPOINT).write(
                {tp: lg.recovery_point for tp, lg in logs.items()})
            OffsetCheckpointFile(log_dir / layout.LOG_START_OFFSET_CHECKPOINT).write(
                {tp: lg.log_start_offset for tp, lg in logs.items()})
            watermarks = {tp: _high_watermark_to_checkpoint(lg) for tp, lg in logs.items()}
            OffsetCheckpointFile(log_dir / layout.REPLICATION_OFFSET_CHECKPOINT).write(
                {tp: hw for tp, hw in watermarks.items() if hw is not None})

    def write_checkpoints(self) -> None:
        """Write every dir's checkpoint files now (DeleteRecords moved log start offsets)."""
        self._write_all_checkpoints()

    def _write_all_checkpoints(self) -> None:
        for log_dir in self.log_dirs:
            if log_dir in self._lock_files:
                self._write_checkpoints(log_dir)

    def close(self) -> None:
        """Stop background work, flush and close every log, write the checkpoints and the
        clean-shutdown marker in each log dir, and release the dir locks. Idempotent."""
        if self._closed:
            return
        self.stop()
        for entry in self._snapshot():
            entry.close()
        for log_dir, fd in list(self._lock_files.items()):
            self._write_checkpoints(log_dir)
            (log_dir / layout.CLEAN_SHUTDOWN_FILE).touch()
            fsync_directory(log_dir)
            os.close(fd)
        self._lock_files.clear()
        self._closed = True


def _high_watermark_to_checkpoint(partition_log: Log) -> int | None:
    """The replicated high watermark, or the restored one until the replica manager sets it."""
    if partition_log.replicated_high_watermark is not None:
        return partition_log.replicated_high_watermark
    return partition_log.restored_high_watermark
