"""Fixtures for the log tests: real files in pytest's tmp_path and an injectable clock."""

from __future__ import annotations

import pytest


class ManualClock:
    """A clock in seconds that only moves when told to (``clock.advance(ms=...)``)."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    @property
    def ms(self) -> int:
        return int(self.now * 1000)

    def advance(self, *, ms: int) -> None:
        self.now += ms / 1000


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()
