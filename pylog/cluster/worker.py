"""One background thread that runs named tasks, coalescing repeated requests.

ZooKeeper watch callbacks and session-state listeners run on kazoo's threads and must
not block, so they only *request* work here. Requesting a task that is already pending
does nothing, so a burst of watch events turns into one run. Tasks run in the priority
order given at construction. A task that raises is logged and requested again after
``retry_delay`` seconds (a ZooKeeper connection loss usually heals).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

log = logging.getLogger(__name__)


class CoalescingWorker:
    def __init__(self, name: str, tasks: list[tuple[str, Callable[[], None]]],
                 retry_delay: float = 0.2, clock: Callable[[], float] = time.monotonic) -> None:
        self._tasks = dict(tasks)
        self._order = [task_name for task_name, _ in tasks]
        self._pending: set[str] = set()
        self._retry_at: dict[str, float] = {}
        self._retry_delay = retry_delay
        self._clock = clock
        self._cond = threading.Condition()
        self._stopped = False
        self._idle = True
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> "CoalescingWorker":
        self._thread.start()
        return self

    def request(self, task_name: str) -> None:
        """Ask for ``task_name`` to run soon (at most once more, however often asked)."""
        if task_name not in self._tasks:
            raise KeyError(task_name)
        with self._cond:
            self._pending.add(task_name)
            self._retry_at.pop(task_name, None)
            self._cond.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Block until nothing is pending or running; False if ``timeout`` passed first."""
        deadline = self._clock() + timeout
        with self._cond:
            while self._pending or self._retry_at or not self._idle:
                remaining = deadline - self._clock()
                if remaining <= 0:
                    return False
                self._cond.wait(min(remaining, 0.1))
            return True

    def stop(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def _next_task(self) -> str | None:
        """Wait for a runnable task; None once stopped. Called with the lock held."""
        while not self._stopped:
            now = self._clock()
            for task_name, due in list(self._retry_at.items()):
                if due <= now:
                    del self._retry_at[task_name]
                    self._pending.add(task_name)
            for task_name in self._order:
                if task_name in self._pending:
                    self._pending.discard(task_name)
                    self._idle = False
                    return task_name
            self._idle = True
            self._cond.notify_all()
            timeout = min((due - now for due in self._retry_at.values()), default=None)
            self._cond.wait(timeout)
        return None

    def _run(self) -> None:
        while True:
            with self._cond:
                task_name = self._next_task()
            if task_name is None:
                return
            try:
                self._tasks[task_name]()
            except Exception:  # noqa: BLE001 -- logged, then retried
                log.warning("%s: task %s failed, retrying in %.1fs", self._thread.name,
                            task_name, self._retry_delay, exc_info=True)
                with self._cond:
                    if task_name not in self._pending:
                        self._retry_at[task_name] = self._clock() + self._retry_delay
            finally:
                with self._cond:
                    self._idle = not self._pending
                    self._cond.notify_all()
