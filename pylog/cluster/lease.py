"""A time-bounded belief that this broker's ZooKeeper session is still alive.

ZooKeeper expires a session once it has heard nothing from the client for the session
timeout. A broker that was paused (SIGSTOP, a long GC-like stall) may serve requests for
a moment after it resumes, before its ZooKeeper client notices that the session is gone,
and in that moment it would still believe it leads its partitions.

The lease closes that gap: a thread makes a small round trip to ZooKeeper every tenth
of the session timeout. A round trip that *started* at time ``t`` proves the session was
alive at ``t``, so it cannot have expired before ``t + session_timeout``; the lease stays
valid until ``t + validity`` with ``validity`` two thirds of the timeout. The monotonic
clock keeps running while a process is stopped, so after a long pause the lease has run
out before any thread of the broker gets to answer a request.

Frequent round trips also keep the session itself alive as long as possible: after a
pause the server has heard from the broker at most a tenth of the timeout before it, so
a pause between two thirds and nine tenths of the timeout costs the broker its lease
(it writes nothing) but not its session (it keeps its partitions).

The reasoning assumes the server grants the requested session timeout, which it does
within its ``[minSessionTimeout, maxSessionTimeout]`` (by default 2 to 20 ticks).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from kazoo.client import KazooClient

log = logging.getLogger(__name__)


class SessionLease:
    def __init__(self, client: KazooClient, session_timeout: float, name: str = "pylog-zk-lease",
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self._clock = clock
        self.validity = session_timeout * 2 / 3
        self.interval = max(session_timeout / 10, 0.05)
        self._valid_until = float("-inf")
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> "SessionLease":
        self._thread.start()
        return self

    def renewed(self, started_at: float) -> None:
        """Record a ZooKeeper round trip of the current session that began at ``started_at``."""
        self._valid_until = max(self._valid_until, started_at + self.validity)

    def valid(self) -> bool:
        return self._clock() < self._valid_until

    def stop(self) -> None:
        self._stopped.set()

    def _run(self) -> None:
        while not self._stopped.is_set():
            started_at = self._clock()
            try:
                self._client.exists("/")
                self.renewed(started_at)
            except Exception:  # noqa: BLE001 -- any failure simply leaves the lease to run out
                log.debug("session lease round trip failed", exc_info=True)
            self._stopped.wait(self.interval)
