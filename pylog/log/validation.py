"""What the log accepts: checks on records before anything is written.

The records are one or more back-to-back v2 batches, from a producer (the log assigns
their offsets) or from the leader (a follower keeps the leader's offsets). Only headers
are read and each batch's CRC-32C checked; the records inside stay opaque (and compressed),
except in a compacted topic, where a producer's records are decoded to refuse a null key
(INVALID_RECORD, as Kafka does: the cleaner could not keep such a record). A producer may
not write control batches (transaction markers come from the coordinator through
WriteTxnMarkers) nor a transactional batch without a producer id: INVALID_RECORD, as in
Kafka's ``LogValidator``.

A follower takes the leader's batches as they are in its log, compacted ones included:
those may hold fewer records than their offset range (see :mod:`pylog.records.filtering`).
"""

from __future__ import annotations

from pylog.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
)
from pylog.log.config import MAX_LONG, LogConfig
from pylog.records.filtering import scan_records
from pylog.records.header import (
    CONTROL_BIT, LOG_OVERHEAD, TRANSACTIONAL_BIT, BatchHeader, checked_batch_headers)


class UnexpectedAppendOffsetError(OffsetOutOfRangeError):
    """A follower's batches do not start at its log end, or leave a gap or an overlap
    between them. Nothing was written; the follower must truncate or fetch again."""


def validate_append(view: memoryview, config: LogConfig, *,
                    check_batch_size: bool = True) -> list[tuple[int, BatchHeader]]:
    """``(position, header)`` of every batch in ``view``, or an error if any is bad.

    Raises InvalidRecordError (no batches), RecordListTooLargeError (more than
    ``segment_bytes``), a CorruptRecordError subclass (framing, magic, CRC, offsets
    or counts), or MessageTooLargeError (a batch over ``max_batch_size``, unless
    ``check_batch_size`` is off: a follower takes what its leader accepted, as in Kafka).
    Off, it also accepts compacted batches (fewer records than offsets, or none). With it
    on, a compacted topic's record with a null key raises InvalidRecordError.
    """
    if len(view) == 0:
        raise InvalidRecordError("the records are empty: expected at least one record batch")
    if len(view) > config.segment_bytes:
        raise RecordListTooLargeError(
            f"{len(view)} bytes of records exceed the segment size {config.segment_bytes}")
    batches = checked_batch_headers(view)
    max_batch_size = config.max_batch_size
    for position, header in batches:
        last_offset_delta, records_count = header.last_offset_delta, header.records_count
        if not check_batch_size:
            if last_offset_delta < 0 or not 0 <= records_count <= last_offset_delta + 1:
                raise CorruptRecordError(
                    f"batch at position {position}: lastOffsetDelta {last_offset_delta}, "
                    f"recordsCount {records_count}")
            continue
        if header.batch_length + LOG_OVERHEAD > max_batch_size:
            raise MessageTooLargeError(
                f"batch at position {position} is {header.size} bytes, "
                f"more than the limit of {max_batch_size}")
        if last_offset_delta < 0 or records_count <= 0:
            raise CorruptRecordError(
                f"batch at position {position}: lastOffsetDelta {last_offset_delta}, "
                f"recordsCount {records_count}")
        if records_count != last_offset_delta + 1:
            # A producer's batch holds offsets 0..n-1 with no gaps.
            raise CorruptRecordError(
                f"batch at position {position}: recordsCount {records_count} does "
                f"not match lastOffsetDelta {last_offset_delta} + 1")
        if header.attributes & (CONTROL_BIT | TRANSACTIONAL_BIT):
            if header.is_control:
                raise InvalidRecordError(
                    f"batch at position {position} is a control batch: clients may not "
                    "write control records")
            if header.producer_id < 0:
                raise InvalidRecordError(
                    f"batch at position {position} is transactional without a producer id")
        if config.compact:
            _check_keys(view, position, header)
    return batches


class KeylessRecordError(InvalidRecordError):
    """Records without a key sent to a compacted topic; ``batch_indexes`` are their
    indexes in the batch, which Kafka reports per record (ProduceResponse v8+
    record_errors) so a producer can tell them from the rest of the batch."""

    def __init__(self, message: str, batch_indexes: list[int]) -> None:
        super().__init__(message)
        self.batch_indexes = batch_indexes


def _check_keys(view: memoryview, position: int, header: BatchHeader) -> None:
    keys = scan_records(view, position, header).keys
    keyless = [index for index, key in enumerate(keys) if key is None]
    if keyless:
        raise KeylessRecordError(
            f"batch at position {position} has {len(keyless)} record(s) with a null key; "
            "a compacted topic needs a key on every record", keyless)


class RecordTimestampError(InvalidTimestampError):
    """Records timestamped outside the topic's ``message.timestamp.before.max.ms`` /
    ``after.max.ms`` window; ``batch_indexes`` are their indexes in the batch (Kafka
    reports them per record, as ProduceResponse v8+ record_errors)."""

    def __init__(self, message: str, batch_indexes: list[int]) -> None:
        super().__init__(message)
        self.batch_indexes = batch_indexes


def check_timestamps(view: memoryview, batches: list[tuple[int, BatchHeader]],
                     config: LogConfig, now_ms: int) -> None:
    """Raise RecordTimestampError unless every record's timestamp lies within
    [``now_ms`` - before bound, ``now_ms`` + after bound] (``message.timestamp.before.max.ms``
    and ``after.max.ms``, or ``difference.max.ms`` where one is unset), as Kafka's ``LogValidator``
    checks a CreateTime topic's records: each of them, as the batch's first and max
    timestamps need not bound them all (a delta may be negative; the max is the
    producer's word)."""
    low = now_ms - config.before_bound_ms
    high = now_ms + config.after_bound_ms
    for position, header in batches:
        timestamps = scan_records(view, position, header).timestamps
        bad = [index for index, t in enumerate(timestamps) if not low <= t <= high]
        if bad:
            raise RecordTimestampError(
                f"batch at position {position}: timestamp {timestamps[bad[0]]} of record "
                f"{bad[0]} is out of range: timestamps must lie within [{low}, {high}] "
                f"({_bounds(config)})", bad)


def _bounds(config: LogConfig) -> str:
    """The configs that set the timestamp window, as the topic has them."""
    said = [f"message.timestamp.before.max.ms {config.timestamp_before_max_ms}",
            f"message.timestamp.after.max.ms {config.timestamp_after_max_ms}"]
    if config.timestamp_difference_max_ms != MAX_LONG:
        said.append(f"message.timestamp.difference.max.ms {config.timestamp_difference_max_ms}")
    return ", ".join(said)


def check_follower_offsets(batches: list[tuple[int, BatchHeader]], log_end_offset: int) -> None:
    """Raise UnexpectedAppendOffsetError unless the batches continue the log exactly: the
    first starts at ``log_end_offset`` and each next one where the previous one ends."""
    expected = log_end_offset
    for position, header in batches:
        if header.base_offset != expected:
            raise UnexpectedAppendOffsetError(
                f"batch at position {position} starts at offset {header.base_offset}, expected "
                f"{expected} (the log ends at {log_end_offset})")
        expected = header.next_offset
