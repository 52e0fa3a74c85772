"""Realistic sample activity for the demo and the DAG tests: page views on a small shop.

Each event is a JSON object matching the ``page_views`` topic of ``conf/loader.yaml``::

    {"user_id": 1042, "url": "/products/17", "referrer": "https://www.google.com/",
     "duration_ms": 5230, "ts": "2026-11-20T07:14:03.125Z"}

Keyed by user id (a user's views stay in one log partition, in order) and stamped with
the event time as the record timestamp. Times are spread over ``hours`` hours before
``end_ms``; traffic follows a daily curve, so per-hour counts differ. The generator is
seeded, so the same arguments give the same events.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from datetime import datetime, timezone

HOUR_MS = 3_600_000

_PAGES = (["/", "/search", "/cart", "/checkout", "/account", "/help"]
          + [f"/products/{n}" for n in range(1, 41)] + [f"/category/{c}" for c in
                                                         ("books", "garden", "kitchen", "toys", "music")])
_REFERRERS = (None, None, None, "https://www.google.com/", "https://www.google.com/",
              "https://duckduckgo.com/", "https://news.ycombinator.com/", "https://twitter.com/",
              "https://www.bing.com/", "https://newsletter.example.com/weekly")


@dataclass(frozen=True, slots=True)
class PageView:
    user_id: int
    url: str
    referrer: str | None
    duration_ms: int
    ts_ms: int

    def key(self) -> bytes:
        return str(self.user_id).encode()

    def value(self) -> bytes:
        moment = datetime.fromtimestamp(self.ts_ms / 1000, tz=timezone.utc)
        return json.dumps({"user_id": self.user_id, "url": self.url, "referrer": self.referrer,
                           "duration_ms": self.duration_ms,
                           "ts": moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{self.ts_ms % 1000:03d}Z"},
                          separators=(",", ":")).encode()


def page_views(count: int, end_ms: int, hours: int = 6, users: int = 300, seed: int = 7) -> list[PageView]:
    """``count`` page views in the ``hours`` hours before ``end_ms``, oldest first."""
    rng = random.Random(seed)
    start_ms = (end_ms // HOUR_MS - hours) * HOUR_MS
    weights = [1.0 + 0.8 * math.sin(2 * math.pi * ((start_ms // HOUR_MS + h) % 24 - 9) / 24)
               for h in range(hours)]
    views = []
    for _ in range(count):
        hour = rng.choices(range(hours), weights)[0]
        ts_ms = min(start_ms + hour * HOUR_MS + rng.randrange(HOUR_MS), end_ms - 1)
        url = rng.choice(_PAGES)
        views.append(PageView(user_id=1000 + int(rng.paretovariate(1.2) * 7) % users, url=url,
                              referrer=rng.choice(_REFERRERS), duration_ms=int(rng.lognormvariate(8, 1)),
                              ts_ms=ts_ms))
    views.sort(key=lambda v: v.ts_ms)
    return views


def produce(bootstrap: str, topic: str, views: list[PageView], partitions: int | None = None,
            security=None) -> dict[int, int]:
    """Create ``topic`` (with ``partitions`` if given and missing) and send every view
    (``security``: the client's security settings for a secured cluster).

    Returns how many records went to each partition. Raises the client's error if any
    send fails.
    """
    from pylog.client import Admin, Producer

    if partitions is not None:
        with Admin(bootstrap, security=security) as admin:
            if topic not in admin.list_topics():
                admin.create_topic(topic, num_partitions=partitions)
    counts: dict[int, int] = {}
    with Producer(bootstrap, acks="all", linger_ms=5, compression="zstd",
                  security=security) as producer:
        futures = [producer.send(topic, view.value(), key=view.key(), timestamp=view.ts_ms) for view in views]
        producer.flush()
        for future in futures:
            partition = future.result().partition
            counts[partition] = counts.get(partition, 0) + 1
    return counts
