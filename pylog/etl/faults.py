"""Test-only fault injection for the loader, driven by the ``PYLOG_FAULT`` variable.

The driver reads it once and passes it to the tasks inside their spec, so it works in a
long-lived SparkSession too. Points:

``after_plan``       the driver kills its process group right after writing the plan
``mid_tasks``        the first task finishes; the others wait; once a done marker exists
                     the driver kills its process group
``before_commit``    the driver kills its process group after every task finished,
                     before the offsets snapshot (or the backfill swap) is written
``fail_first_attempt`` every task raises after writing its files on attempt 0, so Spark
                     retries it (needs ``spark.task.maxFailures`` >= 2, e.g. ``local[2,2]``)
``fail_later_tasks`` every task but the first raises after writing its files, on every
                     attempt: the job fails midway with some ranges done
``mid_swap``         a backfill's commit raises after replacing its first partition
``mid_publish``      a scheduled commit kills the driver's process group after moving
                     its first staged file into the table (the offsets are committed)
``compact_before_journal`` ``pylog compact`` kills its process group after writing the
                     compacted files of a table into staging, before its journal exists
``compact_mid_swap`` ``pylog compact`` kills its process group in the middle of the swap:
                     after the first rename of its first journalled partition

"Kills its process group" means SIGKILL to the driver's group, which is spark-submit with
its JVM and Python children when spark-submit was started in a session of its own (as the
tests do); a driver that leads its own group kills only itself.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from pylog.errors import ConfigError
from pylog.etl.errors import InjectedFault

FAULT_ENV = "PYLOG_FAULT"
POINTS = ("after_plan", "mid_tasks", "before_commit", "fail_first_attempt", "fail_later_tasks",
          "mid_swap", "before_swap_journal", "mid_publish", "compact_before_journal", "compact_mid_swap")


def from_env() -> str | None:
    value = os.environ.get(FAULT_ENV) or None
    if value is not None and value not in POINTS:
        raise ConfigError(FAULT_ENV, f"{value!r} is not one of {', '.join(POINTS)}")
    return value


def kill_driver_at(point: str, fault: str | None) -> None:
    if fault != point:
        return
    print(f"PYLOG_FAULT {point}: killing the driver", file=sys.stderr, flush=True)
    sys.stdout.flush()
    if os.getpgrp() == os.getpid():
        os.kill(os.getpid(), signal.SIGKILL)
    os.killpg(os.getpgrp(), signal.SIGKILL)


def stall_task(fault: str | None, index: int, limit_s: float = 300.0) -> None:
    """Under ``mid_tasks``, every task but the first waits here to be killed."""
    if fault == "mid_tasks" and index > 0:
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            time.sleep(0.2)


def fail_attempt(fault: str | None, attempt: int, index: int, name: str) -> None:
    if fault == "fail_first_attempt" and attempt == 0:
        raise InjectedFault(f"task {name}: injected failure on attempt 0")
    if fault == "fail_later_tasks" and index > 0:
        raise InjectedFault(f"task {name}: injected failure")


def fail_at(point: str, fault: str | None) -> None:
    if fault == point:
        raise InjectedFault(f"injected failure at {point}")
