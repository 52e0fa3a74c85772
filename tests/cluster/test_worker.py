"""CoalescingWorker: coalesced requests, priority order, retry after a failure."""

import threading

from pylog.cluster.worker import CoalescingWorker


def test_requests_made_while_a_task_runs_coalesce_into_one_more_run():
    started, release = threading.Event(), threading.Event()
    runs = []

    def slow():
        runs.append("slow")
        started.set()
        release.wait(5)

    worker = CoalescingWorker("test-coalesce", [("slow", slow)]).start()
    try:
        worker.request("slow")
        assert started.wait(5)
        for _ in range(50):
            worker.request("slow")
        release.set()
        assert worker.wait_idle(5)
        assert runs == ["slow", "slow"]
    finally:
        worker.stop()


def test_pending_tasks_run_in_priority_order():
    gate = threading.Event()
    order = []
    worker = CoalescingWorker("test-order", [
        ("first", lambda: order.append("first")),
        ("second", lambda: order.append("second")),
        ("blocker", lambda: gate.wait(5)),
    ]).start()
    try:
        worker.request("blocker")
        worker.request("second")
        worker.request("first")
        gate.set()
        assert worker.wait_idle(5)
        assert order == ["first", "second"]
    finally:
        worker.stop()


def test_a_failing_task_is_retried():
    attempts = []

    def flaky():
        attempts.append(1)
        if len(attempts) < 3:
            raise ConnectionError("ZooKeeper went away")

    worker = CoalescingWorker("test-retry", [("flaky", flaky)], retry_delay=0.01).start()
    try:
        worker.request("flaky")
        assert worker.wait_idle(5)
        assert len(attempts) == 3
    finally:
        worker.stop()
