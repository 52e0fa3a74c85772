"""Shared test configuration. Area-specific fixtures live in each tests/<area>/conftest.py.

``make test`` runs the modules on several pytest-xdist workers, a module to a worker
(``--dist loadfile``: the tests of a module share its broker, ZooKeeper or SparkSession),
in the order collected here: modules with a test marked ``slow`` first, the longest
(``slow(minutes=N)``, a rough figure; 1 when not given) first of all, so the workers start
on the long ones and the run does not end with one of them running alone.
"""

from __future__ import annotations


def pytest_collection_modifyitems(session, config, items):
    minutes: dict[str, float] = {}
    for item in items:
        marker = item.get_closest_marker("slow")
        if marker is not None:
            module = item.module.__name__
            minutes[module] = max(minutes.get(module, 0), marker.kwargs.get("minutes", 1))
    items.sort(key=lambda item: -minutes.get(item.module.__name__, 0))
