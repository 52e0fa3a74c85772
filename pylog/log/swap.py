"""Swapping cleaned segments in for their originals, safely across a crash (Kafka's protocol).

The cleaner replaces a group of consecutive segments ``[B, E)`` by one cleaned segment with
the same base offset ``B`` and the same end ``E`` (its last batch ends at ``E - 1``)::

    1. write  B.log.cleaned, B.index.cleaned, B.timeindex.cleaned (and B.txnindex.cleaned
       if the group has aborted transactions); fsync them
    2. rename each to B.<ext>.swap (the .log last); fsync the directory
    3. delete the original segments' files
    4. rename each B.<ext>.swap to B.<ext> (the .log last); fsync the directory

Recovery (:func:`recover_swaps`, run before a partition's segments are opened):

* ``*.cleaned`` files are deleted: the cleaning was not finished, the originals are intact.
* a ``B.log.swap`` is complete (step 2 renames it only after the fsync of step 1), so the
  swap is completed: every segment file with a base offset in ``[B, E)`` is deleted (the
  originals, or the cleaned segment's own indexes if step 4 had begun), the index swaps
  are renamed, then the log swap. A missing index is rebuilt from the log by the loader.
* index ``.swap`` files without a ``.log.swap`` are deleted (rebuilt by the loader).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Sequence

from pylog.errors import CorruptRecordError
from pylog.log import layout
from pylog.log.checkpoint import fsync_directory
from pylog.log.config import LogConfig
from pylog.log.file_records import FileRecords
from pylog.log.index import CorruptIndexError
from pylog.log.segment import LogSegment

log = logging.getLogger(__name__)

_EXTENSIONS = (layout.INDEX_SUFFIX, layout.TIME_INDEX_SUFFIX, layout.LOG_SUFFIX)  # .log last


def segment_paths(directory: Path, base_offset: int, suffix: str = "") -> list[Path]:
    """The index, time index and log file of a segment (in the order they are renamed),
    with ``suffix`` (``.cleaned``, ``.swap``) appended to each name."""
    return [directory / (layout.segment_file_name(base_offset, ext) + suffix) for ext in _EXTENSIONS]


def txn_index_path(directory: Path, base_offset: int, suffix: str = "") -> Path:
    """The segment's transaction index, renamed before the others when it exists (a
    segment without aborted transactions has none)."""
    return directory / (layout.segment_file_name(base_offset, layout.TXN_INDEX_SUFFIX) + suffix)


def _all_paths(directory: Path, base_offset: int, suffix: str = "") -> list[Path]:
    return [txn_index_path(directory, base_offset, suffix)] + segment_paths(directory, base_offset, suffix)


def cleaned_to_swap(directory: Path, base_offset: int) -> None:
    """Step 2: the cleaned segment becomes the one recovery completes."""
    for cleaned, swap in zip(_all_paths(directory, base_offset, layout.CLEANED_SUFFIX),
                             _all_paths(directory, base_offset, layout.SWAP_SUFFIX)):
        if cleaned.exists() or layout.TXN_INDEX_SUFFIX not in cleaned.name:
            os.replace(cleaned, swap)
    fsync_directory(directory)


def swap_to_final(directory: Path, base_offset: int) -> None:
    """Step 4 (the originals are gone): give the cleaned segment its final names."""
    for swap, final in zip(_all_paths(directory, base_offset, layout.SWAP_SUFFIX),
                           _all_paths(directory, base_offset)):
        if swap.exists():
            os.replace(swap, final)
    fsync_directory(directory)


def install_cleaned(directory: Path, old: Sequence[LogSegment], config: LogConfig,
                    max_batch_size: int) -> LogSegment:
    """Steps 2 to 4 for the cleaned segment written for the consecutive segments ``old``
    (its base offset is the first one's), then open it, sealed, with their creation time.
    Indexes that do not match its log are rebuilt from it (batches up to
    ``max_batch_size``)."""
    base = old[0].base_offset
    created_ms = old[-1].created_ms
    cleaned_to_swap(directory, base)
    for segment in old:
        segment.delete()
    swap_to_final(directory, base)
    new = LogSegment.open(directory, base, config, created_ms=created_ms, active=False)
    try:
        new.load()
    except (CorruptIndexError, CorruptRecordError) as exc:
        log.warning("%s: rebuilding the indexes of cleaned segment %d (%s)", directory, base, exc)
        new.recover(max_batch_size)
    new.seal()
    return new


def discard_cleaned(directory: Path, base_offset: int) -> None:
    """Remove an unfinished cleaned segment (the originals stay)."""
    for path in _all_paths(directory, base_offset, layout.CLEANED_SUFFIX):
        path.unlink(missing_ok=True)


def recover_swaps(directory: Path) -> int:
    """Complete or discard what a crash left mid-swap in a partition directory (see the
    module docstring). Returns the number of swaps completed."""
    if not directory.is_dir():
        return 0
    log_swaps, index_swaps = [], []
    for path in directory.iterdir():
        name = path.name
        if name.endswith(layout.CLEANED_SUFFIX):
            log.info("%s: discarding an unfinished cleaned file", path)
            path.unlink()
        elif name.endswith(layout.SWAP_SUFFIX):
            parsed = layout.parse_segment_file(name[:-len(layout.SWAP_SUFFIX)])
            if parsed is None:
                continue
            (log_swaps if parsed[1] == layout.LOG_SUFFIX else index_swaps).append((parsed[0], path))
    completed = 0
    for base, path in sorted(log_swaps):
        end = _end_offset(path)
        if end is None:
            log.error("%s: unreadable swap file left in place", path)
            continue
        for other in list(directory.iterdir()):
            parsed = layout.parse_segment_file(other.name)
            if parsed is not None and base <= parsed[0] < end:
                other.unlink()
        log.warning("%s: completing the swap of a cleaned segment (offsets %d..%d)",
                    directory, base, end - 1)
        swap_to_final(directory, base)
        completed += 1
    for _, path in index_swaps:
        if path.exists():
            path.unlink()  # its log was already renamed; the loader rebuilds the index
    if log_swaps or index_swaps:
        fsync_directory(directory)
    return completed


def _end_offset(path: Path) -> int | None:
    """The offset after the last batch of a ``.log`` file, from its headers; None if a
    header cannot be read (or the file is empty)."""
    records = FileRecords.open(path)
    try:
        end = None
        for _, header in records.headers():
            end = header.next_offset
        return end
    except CorruptRecordError:
        return None
    finally:
        os.close(records.fd)
