"""Checkpoint files: small text files of entries, rewritten whole by temp file + rename.

Every checkpoint has Kafka's framing: a version line, an entry-count line, then one line
per entry. :func:`write_checkpoint_lines` and :func:`read_checkpoint_lines` handle the
framing; each file type formats its own entry lines. The offset checkpoints here
(``recovery-point-offset-checkpoint``: everything below the offset is fsynced, so
recovery starts there; ``log-start-offset-checkpoint``; ``replication-offset-checkpoint``:
the replicated high watermark) hold one offset per partition::

    0                      version
    2                      number of entries
    my-topic 0 1234        topic, partition, offset (topic names have no spaces)
    other 3 0

The leader epoch checkpoint (:mod:`pylog.log.leader_epoch`) uses the same framing.

A crash during a write leaves the previous file intact (the new one is written to
``<name>.tmp``, fsynced, then renamed over it, and the directory is fsynced).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Mapping, Sequence

from pylog.types import TopicPartition
from pylog.log.layout import TEMP_SUFFIX

log = logging.getLogger(__name__)

VERSION = 0


class CorruptCheckpointError(ValueError):
    """A checkpoint file does not follow the format above."""


class OffsetCheckpointFile:
    """Reads and atomically rewrites one checkpoint file.

    Example::

        cp = OffsetCheckpointFile(log_dir / "recovery-point-offset-checkpoint")
        cp.write({TopicPartition("t", 0): 42})
        cp.read()  # {TopicPartition("t", 0): 42}
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def write(self, offsets: Mapping[TopicPartition, int]) -> None:
        write_checkpoint_lines(self.path, [f"{tp.topic} {tp.partition} {offset}"
                                           for tp, offset in sorted(offsets.items())])

    def read(self) -> dict[TopicPartition, int]:
        """Return the offsets; {} if the file does not exist. Raises CorruptCheckpointError."""
        lines = read_checkpoint_lines(self.path)
        if lines is None:
            return {}
        try:
            entries = [line.split(" ") for line in lines]
            result = {TopicPartition(t, int(p)): int(o) for t, p, o in entries}
        except ValueError as exc:
            raise CorruptCheckpointError(f"{self.path}: malformed checkpoint ({exc})") from None
        if len(result) != len(lines):
            raise CorruptCheckpointError(f"{self.path}: a partition appears twice")
        return result

    def read_or_empty(self) -> dict[TopicPartition, int]:
        """Like :meth:`read`, but a corrupt file is logged and treated as missing (safe: it
        only makes recovery start earlier)."""
        try:
            return self.read()
        except CorruptCheckpointError as exc:
            log.warning("ignoring %s", exc)
            return {}


def write_checkpoint_lines(path: Path, entries: Sequence[str]) -> None:
    """Atomically replace ``path`` with the version line, the count and ``entries``."""
    write_text_atomically(path, "\n".join([str(VERSION), str(len(entries)), *entries]) + "\n")


def read_checkpoint_lines(path: Path) -> list[str] | None:
    """The entry lines of the checkpoint at ``path``; None if it does not exist.

    Raises CorruptCheckpointError for an unknown version or a count that does not match.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as exc:
        raise CorruptCheckpointError(f"{path}: not text ({exc})") from None
    lines = text.splitlines()
    try:
        version, count = int(lines[0]), int(lines[1])
    except (IndexError, ValueError):
        raise CorruptCheckpointError(f"{path}: malformed header {lines[:2]!r}") from None
    if version != VERSION:
        raise CorruptCheckpointError(f"{path}: unknown version {lines[0]!r}")
    if len(lines) != 2 + count:
        raise CorruptCheckpointError(f"{path}: expected {count} entries, found {len(lines) - 2}")
    return lines[2:]


def write_text_atomically(path: Path, text: str, mode: int | None = None) -> None:
    """Replace ``path`` with ``text``: write ``<name>.tmp``, fsync, rename, fsync the directory.

    A crash at any point leaves either the old file or the new one, never a mix. ``mode``
    (e.g. ``0o600`` for credentials) is set on the temporary file before anything is
    written to it.
    """
    temp = path.with_name(path.name + TEMP_SUFFIX)
    with open(temp, "w", encoding="utf-8") as f:
        if mode is not None:
            os.fchmod(f.fileno(), mode)
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temp, path)
    fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    """Make a rename or a new file in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
