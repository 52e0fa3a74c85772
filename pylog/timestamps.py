"""Timestamps as users write them (ISO-8601) to the epoch milliseconds Kafka uses."""

from __future__ import annotations

from datetime import datetime, timezone


def epoch_ms(value: str | datetime) -> int:
    """``2026-11-20T00:00:00Z`` (or a datetime) -> epoch milliseconds; no zone means UTC.

    Raises ValueError for anything that is not an ISO-8601 timestamp.
    """
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        moment = datetime.fromisoformat(value.strip())
    else:
        raise ValueError(f"not a timestamp: {value!r}")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1000)
