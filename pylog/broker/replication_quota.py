"""Replication throttles (Kafka's KIP-73): a byte rate for moving replicas, so that a
reassignment copying a large partition does not take the network from producers and
consumers.

Two broker settings give the rates, changed at run time (``kafka-configs --alter
--entity-type brokers``, or ``kafka-reassign-partitions --execute --throttle``):

* ``leader.replication.throttled.rate``: bytes per second this broker, as a leader, sends to
  throttled followers;
* ``follower.replication.throttled.rate``: bytes per second this broker, as a follower,
  fetches for throttled replicas.

Two topic configs say which replicas are throttled, as ``partition:broker`` pairs or ``*``:
``leader.replication.throttled.replicas`` names the brokers whose leadership of a partition
is throttled, ``follower.replication.throttled.replicas`` the brokers whose fetching of it is.
As in Kafka, a follower in the ISR is never throttled: the throttle slows catching up, never
a replica that producers with acks=all wait for.

The rate is measured as Kafka's quotas measure it: bytes over the last ``samples`` windows
of ``window_s`` seconds, divided by the time they cover but never by less than
``samples - 1`` windows, so a throttle allows a burst of about ``(samples - 1) * rate``
bytes after a quiet spell. Once the measured rate is above the bound, throttled partitions
get no data (the leader answers them empty; the follower leaves them out of its fetch)
until it falls back under. A single fetch may overshoot by up to ``replica.fetch.max.bytes``.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Callable

from pylog.log.config import MAX_LONG, THROTTLE_ALL, throttled_replicas

UNLIMITED = MAX_LONG  # Kafka's Long.MAX_VALUE: no throttle


class ReplicationQuota:
    """The measured byte rate of one side's throttled replication and its bound."""

    def __init__(self, rate: int = UNLIMITED, samples: int = 11, window_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if samples < 2 or window_s <= 0:
            raise ValueError("a quota needs at least 2 samples of a positive window")
        self._rate = rate
        self._samples = samples
        self._window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()
        self._windows: deque[list[float]] = deque()  # [window start, bytes]

    @property
    def rate(self) -> int:
        return self._rate

    @property
    def active(self) -> bool:
        """A bound is set (the rate is not unlimited)."""
        return self._rate < UNLIMITED

    def set_rate(self, rate: int) -> None:
        self._rate = rate

    def record(self, size: int) -> None:
        """``size`` bytes of throttled replication went through just now."""
        if size <= 0:
            return
        now = self._clock()
        with self._lock:
            self._expire(now)
            if self._windows and now - self._windows[-1][0] < self._window_s:
                self._windows[-1][1] += size
            else:
                self._windows.append([now, float(size)])

    def measured(self) -> float:
        """Bytes per second over the retained windows (Kafka's ``Rate``)."""
        now = self._clock()
        with self._lock:
            self._expire(now)
            if not self._windows:
                return 0.0
            elapsed = now - self._windows[0][0]
            total = sum(size for _, size in self._windows)
        return total / max(elapsed, (self._samples - 1) * self._window_s)

    def exceeded(self) -> bool:
        return self.active and self.measured() > self._rate

    def _expire(self, now: float) -> None:
        horizon = now - self._samples * self._window_s
        while self._windows and self._windows[0][0] < horizon:
            self._windows.popleft()


def is_throttled(value: str, partition: int, broker_id: int) -> bool:
    """Whether topic config ``value`` throttles ``partition`` on broker ``broker_id``."""
    if not value:
        return False
    pairs = throttled_replicas(value)
    return pairs == THROTTLE_ALL or (partition, broker_id) in pairs
