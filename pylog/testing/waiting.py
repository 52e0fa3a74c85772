"""Polling for a condition in tests against real processes."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_until(condition: Callable[[], T], timeout: float = 30.0, message: str = "condition",
               interval: float = 0.05) -> T:
    """Call ``condition`` until it returns something truthy and return that; fail with
    AssertionError naming ``message`` once ``timeout`` seconds have passed.

    >>> wait_until(lambda: broker.alive(), timeout=10, message="the broker to start")
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {message}")
        time.sleep(interval)
