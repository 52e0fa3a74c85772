"""Incremental fetch sessions (Kafka's KIP-227).

A consumer fetching many partitions sends them all in every Fetch and gets them all back,
data or not: with a thousand idle partitions most of each round trip is the same list twice.
A fetch session keeps the list on the broker. The client opens one with a full Fetch of
``session_id`` 0 and ``session_epoch`` 0; the response names the new session. Each
following Fetch carries that id and the next epoch (1, 2, ...), and lists only the
partitions whose fetch position changed or that join the session (``forgotten_topics_data``
names those that leave); the broker fetches every partition of the session and answers only
those with something new: records, an error, or a high watermark, last stable offset or log
start offset it has not sent yet.

Epoch -1 closes the session (with id 0: a full Fetch outside any session, what librdkafka
and pylog's followers send). An unknown id gets FETCH_SESSION_ID_NOT_FOUND and an epoch
out of turn INVALID_FETCH_SESSION_EPOCH, after which the client starts over with a full
Fetch. The cache holds ``max.incremental.fetch.session.cache.slots`` sessions (0: none are
made) and evicts the least recently used one when full.
"""

from __future__ import annotations

import itertools
import random
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from pylog.errors import KafkaError
from pylog.types import TopicPartition

FINAL_EPOCH = -1
INITIAL_EPOCH = 0
MAX_EPOCH = 2**31 - 1

FetchSessionIdNotFoundError = KafkaError.for_code(70)
InvalidFetchSessionEpochError = KafkaError.for_code(71)


def records_size(result: dict) -> int:
    """The bytes of records in one partition's Fetch answer (bytes or a file region)."""
    records = result["records"]
    return len(records) if isinstance(records, bytes) else records.length


@dataclass
class FetchSession:
    """One client's partitions (each its latest request entry, in order) and what the last
    response told it of each."""

    session_id: int
    epoch: int  # the epoch the next request must carry
    partitions: "OrderedDict[TopicPartition, dict]"
    sent: dict[TopicPartition, tuple[int, int, int]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # Partitions appended to (or otherwise changed) since a Fetch last looked, marked by
    # the broker's AppendWaiters: an incremental Fetch reads those, the ones it names and
    # the ones never answered, not all of them.
    dirty: set = field(default_factory=set)
    waiters: object = field(default=None, repr=False)

    def mark(self, tp: TopicPartition) -> None:
        self.dirty.add(tp)

    def take_dirty(self) -> set:
        # Copy, then remove what was copied: a mark from an appending thread meanwhile
        # stays for the next look (each set operation is atomic; swapping the set is not).
        taken = set(self.dirty)
        self.dirty -= taken
        return taken

    def watch(self, tps) -> None:
        if self.waiters is not None:
            self.waiters.add(list(tps), self.mark)

    def unwatch(self, tps) -> None:
        if self.waiters is not None:
            self.waiters.remove(list(tps), self.mark)

    def update(self, body: dict) -> None:
        """Take an incremental request's partitions and forgotten ones."""
        forgotten = []
        for topic in body.get("forgotten_topics_data") or ():
            for partition in topic["partitions"]:
                tp = TopicPartition(topic["topic"], partition)
                if self.partitions.pop(tp, None) is not None:
                    forgotten.append(tp)
                self.sent.pop(tp, None)
        added = []
        for topic in body["topics"]:
            for p in topic["partitions"]:
                tp = TopicPartition(topic["topic"], p["partition"])
                if tp not in self.partitions:
                    added.append(tp)
                self.partitions[tp] = p
        self.unwatch(forgotten)
        self.watch(added)

    def request_topics(self, only: set | None = None) -> list[dict]:
        """The session's partitions (those in ``only``, if given) as a Fetch request's
        ``topics``."""
        topics: dict[str, list[dict]] = {}
        for tp, entry in self.partitions.items():
            if only is None or tp in only:
                topics.setdefault(tp.topic, []).append(entry)
        return [{"topic": name, "partitions": parts} for name, parts in topics.items()]

    def to_read(self, requested: set) -> set:
        """What an incremental Fetch reads: the partitions it names, those changed since the
        last Fetch, those never answered without an error and those whose position is below
        the high watermark last sent (records the client has not taken yet)."""
        sent = self.sent
        pending = {tp for tp, entry in self.partitions.items()
                   if tp not in sent or entry["fetch_offset"] < sent[tp][0]}
        return requested | self.take_dirty() | pending

    def filter_response(self, response: dict, full: bool) -> dict:
        """Remember what the response tells the client of each partition; unless ``full``
        (the Fetch that opened the session), keep only the partitions with something new."""
        response["session_id"] = self.session_id
        kept_topics = []
        for topic in response["responses"]:
            kept = []
            for p in topic["partitions"]:
                tp = TopicPartition(topic["topic"], p["partition_index"])
                positions = (p["high_watermark"], p["last_stable_offset"], p["log_start_offset"])
                if full or records_size(p) or p["error_code"] or self.sent.get(tp) != positions:
                    kept.append(p)
                    if not p["error_code"]:
                        self.sent[tp] = positions
            if kept:
                kept_topics.append({"topic": topic["topic"], "partitions": kept})
        response["responses"] = kept_topics
        return response


class FetchSessionCache:
    """The broker's fetch sessions, at most ``slots`` of them."""

    def __init__(self, slots: int = 1000, waiters=None) -> None:
        self.slots = slots
        self.waiters = waiters  # the broker's AppendWaiters (None: sessions read everything)
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()
        self._lock = threading.Lock()
        self._ids = itertools.count(random.randrange(1, 1 << 20))

    def __len__(self) -> int:
        return len(self._sessions)

    def session_for(self, body: dict) -> FetchSession | None:
        """The session a Fetch belongs to, its epoch checked and its partitions updated
        from the request (None: a full Fetch outside sessions).

        A new session is made for ``session_id`` 0 with epoch 0 (when the cache has
        slots); its id goes in the response. Raises FetchSessionIdNotFoundError or
        InvalidFetchSessionEpochError.
        """
        session_id, epoch = body.get("session_id", 0), body.get("session_epoch", FINAL_EPOCH)
        if session_id != 0 and epoch in (FINAL_EPOCH, INITIAL_EPOCH):
            self.close(session_id)  # closed; with epoch 0 a new one replaces it
        if epoch == FINAL_EPOCH:
            return None
        if epoch == INITIAL_EPOCH:
            return self._create(body)
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None:
                raise FetchSessionIdNotFoundError(f"fetch session {session_id} not found")
            self._sessions.move_to_end(session_id)
        with session.lock:
            if epoch != session.epoch:
                raise InvalidFetchSessionEpochError(
                    f"fetch session {session_id} expects epoch {session.epoch}, got {epoch}")
            session.epoch = 1 if session.epoch >= MAX_EPOCH else session.epoch + 1
            session.update(body)
        return session

    def _create(self, body: dict) -> FetchSession | None:
        if self.slots <= 0 or body.get("replica_id", -1) >= 0:
            return None
        partitions: OrderedDict[TopicPartition, dict] = OrderedDict()
        for topic in body["topics"]:
            for p in topic["partitions"]:
                partitions[TopicPartition(topic["topic"], p["partition"])] = p
        evicted = []
        with self._lock:
            while len(self._sessions) >= self.slots:
                evicted.append(self._sessions.popitem(last=False)[1])  # least recently used
            session_id = next(self._ids) % MAX_EPOCH or next(self._ids)
            session = FetchSession(session_id, 1, partitions, waiters=self.waiters)
            self._sessions[session_id] = session
        for old in evicted:
            old.unwatch(old.partitions)
        session.watch(partitions)
        return session

    def close(self, session_id: int) -> None:
        with self._lock:
            session = self._sessions.pop(session_id, None)
        if session is not None:
            session.unwatch(session.partitions)
