"""Errors of the loader. All are PylogError; the CLI prints them as one line.

Terminal errors need a person (a config change or a decision); retrying the same run
id after fixing the cause finishes the run without duplicating anything.
"""

from __future__ import annotations

from pylog.errors import PylogError


class LoaderError(PylogError):
    """The load cannot go on; the message says what to do."""


class TableLockedError(LoaderError):
    """Another live run (scheduled or backfill) is working on the table."""


class RetentionGapError(LoaderError):
    """Committed offsets point at records retention already deleted (policy ``fail``)."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__(
            f"topic {topic} partition {partition}: records [{start}, {end}) were deleted by "
            f"retention before they were loaded (the log now starts at {end}). Set "
            f"topics.{topic}.on_retention_gap: earliest to load from {end} and record the gap.")
        self.topic, self.partition, self.start, self.end = topic, partition, start, end


class BadRecordThresholdError(LoaderError):
    """More records were quarantined than the topic allows; offsets were not committed."""


class InjectedFault(LoaderError):
    """Raised by the test-only fault hooks (PYLOG_FAULT)."""
