"""Offset checkpoint files: one offset per partition, rewritten whole by temp file + rename.

Used for ``recovery-point-offset-checkpoint`` (everything below the offset is fsynced, so
recovery starts there) and ``log-start-offset-checkpoint``. Text, Kafka's format::

    0                      version
    2                      number of entries
    my-topic 0 1234        topic, partition, offset (topic names have no spaces)
    other 3 0

A crash during a write leaves the previous file intact (the new one is written to
``<name>.tmp``, fsynced, then renamed over it, and the directory is fsynced).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Mapping

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
        lines = [str(VERSION), str(len(offsets))]
        lines += [f"{tp.topic} {tp.partition} {offset}" for tp, offset in sorted(offsets.items())]
        write_text_atomically(self.path, "\n".join(lines) + "\n")

    def read(self) -> dict[TopicPartition, int]:
        """Return the offsets; {} if the file does not exist. Raises CorruptCheckpointError."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        lines = text.splitlines()
        try:
            if int(lines[0]) != VERSION:
                raise CorruptCheckpointError(f"{self.path}: unknown version {lines[0]!r}")
            count = int(lines[1])
            entries = [line.split(" ") for line in lines[2:2 + count]]
            result = {TopicPartition(t, int(p)): int(o) for t, p, o in entries}
        except (IndexError, ValueError) as exc:
            raise CorruptCheckpointError(f"{self.path}: malformed checkpoint ({exc})") from None
        if len(result) != count or len(lines) != 2 + count:
            raise CorruptCheckpointError(f"{self.path}: expected {count} entries, found {len(lines) - 2}")
        return result

    def read_or_empty(self) -> dict[TopicPartition, int]:
        """Like :meth:`read`, but a corrupt file is logged and treated as missing (safe: it
        only makes recovery start earlier)."""
        try:
            return self.read()
        except CorruptCheckpointError as exc:
            log.warning("ignoring %s", exc)
            return {}


def write_text_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text``: write ``<name>.tmp``, fsync, rename, fsync the directory.

    A crash at any point leaves either the old file or the new one, never a mix.
    """
    temp = path.with_name(path.name + TEMP_SUFFIX)
    with open(temp, "w", encoding="utf-8") as f:
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
