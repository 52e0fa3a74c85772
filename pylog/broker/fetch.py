"""Fetch (long poll, zero copy) and ListOffsets.

A Fetch reads every requested partition as a ``FileRegion`` of its segment file; the
network layer writes the response header and then ``os.sendfile``s each region. When
fewer than ``min_bytes`` are available the request is parked (``FetchWork``) and tried
again when an append to one of its partitions wakes it, or when ``max_wait_ms`` passes.
No data past the high watermark is ever returned; the first batch comes whole even if
it is larger than the size limits. From v7 a consumer may keep its partitions in a fetch
session and send only what changed (pylog.broker.fetch_sessions).

A follower's Fetch (``replica_id`` >= 0, cluster mode) first tells the replica manager
where the follower's log ends (which moves the high watermark and the ISR), then reads up
to the log end rather than the high watermark. A broker that is not one of the
partition's replicas gets NOT_LEADER_OR_FOLLOWER for it. ``current_leader_epoch`` is
fenced: FENCED_LEADER_EPOCH when older than the leader's, UNKNOWN_LEADER_EPOCH when newer.
A partition under the leader replication throttle (for a follower out of the ISR) counts
against it, and gets positions but no records while it is over its rate
(pylog.broker.replication_quota).

Isolation: every partition reports ``last_stable_offset`` (the high watermark capped by
the oldest open or unreplicated transaction, :attr:`pylog.log.Log.last_stable_offset`).
A read_committed Fetch (``isolation_level`` 1) returns nothing at or above it, and the
aborted transactions (producer id, first offset) overlapping the records it returns, an
empty list if none, as Kafka does (null for read_uncommitted); the consumer drops those
producers' records up to their ABORT markers. A parked read_committed Fetch wakes as any
other: the last stable offset only moves with an append (a marker) or the high
watermark, and both wake it. Followers fetch read_uncommitted, up to the log end.

A Fetch or ListOffsets with ``replica_id`` -2 (Kafka's debugging consumer, which replica
verification uses) is served by any replica of the partition, up to its log end.

ListOffsets: -2 is the log start, -1 the high watermark (the last stable offset with
``isolation_level`` 1, the log end for a follower), anything else a timestamp looked up
through the time index and refined to the first record at or after it (with
``isolation_level`` 1, none at or above the last stable offset).
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

from pylog.broker.fetch_sessions import (
    FINAL_EPOCH, INITIAL_EPOCH, FetchSession, FetchSessionCache, FetchSessionIdNotFoundError,
    records_size)
from pylog.broker.partitions import PartitionLogs
from pylog.errors import (
    InvalidRequestError, KafkaError, OffsetNotAvailableError, PylogError, UnsupportedVersionError)
from pylog.records import decode_batch
from pylog.types import TopicPartition

log = logging.getLogger(__name__)

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3  # the record with the largest timestamp (KIP-734, ListOffsets v7)
EARLIEST_LOCAL = -4  # the first offset in local storage (KIP-405, v8): the log start here
LATEST_TIERED = -5  # the last offset in tiered storage (KIP-1005, v9): none here
# The special timestamps each ListOffsets version knows; any other negative one is refused
# with UNSUPPORTED_VERSION, as Kafka refuses it.
_SPECIAL_SINCE = {LATEST: 0, EARLIEST: 0, MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9}
READ_COMMITTED = 1
DEBUGGING_REPLICA_ID = -2
MIN_FETCH_VERSION = 4
FIRST_SESSION_VERSION = 7  # Fetch v7 brought sessions (KIP-227)


@dataclass
class FetchWork:
    """One Fetch request in progress; ``attempt`` until it returns a response body."""

    body: dict
    logs: PartitionLogs
    deadline: float  # clock seconds
    partitions: list[TopicPartition] = field(default_factory=list)

    refused: dict[TopicPartition, KafkaError] = field(default_factory=dict)
    session: FetchSession | None = None  # the fetch session it belongs to (KIP-227)
    incremental: bool = False  # the request listed only what changed in its session
    # Partitions appended to (or otherwise changed) since the last attempt, added by the
    # waiter's wake; a woken attempt reads only those and reuses the others' answers.
    changed: set = field(default_factory=set)
    _unchanged: dict = field(default_factory=dict)  # (topic, partition) -> positions-only answer
    # An incremental session Fetch reads some of its session's partitions and waits on all.
    watched: list | None = None

    def __post_init__(self) -> None:
        self._reading = {TopicPartition(t["topic"], p["partition"])
                         for t in self.body["topics"] for p in t["partitions"]}
        self.partitions = self.watched if self.watched is not None else list(self._reading)
        self.replica_id = self.body.get("replica_id", -1)
        self.throttled: set[tuple[str, int]] = set()  # this attempt's leader-throttled reads
        self.read_committed = self.body.get("isolation_level", 0) == READ_COMMITTED
        if self.replica_id >= 0 and self.logs.replicas is not None:
            self._record_follower_positions()

    def _read_more(self, woken: set) -> set:
        """The session's partitions changed since this Fetch began (marked in the session,
        or ``woken`` this Fetch): read from now on. Returns them."""
        session = self.session
        with session.lock:
            more = session.take_dirty() | woken
            topics = {t["topic"]: t for t in self.body["topics"]}
            for tp in more - self._reading:
                entry = session.partitions.get(tp)
                if entry is None:
                    continue  # forgotten meanwhile
                self._reading.add(tp)
                topic = topics.get(tp.topic)
                if topic is None:
                    topic = topics[tp.topic] = {"topic": tp.topic, "partitions": []}
                    self.body["topics"].append(topic)
                topic["partitions"].append(entry)
        return more

    def _record_follower_positions(self) -> None:
        for topic in self.body["topics"]:
            for p in topic["partitions"]:
                tp = TopicPartition(topic["topic"], p["partition"])
                try:
                    self.logs.replicas.follower_fetch(tp, self.replica_id,
                                                      p.get("current_leader_epoch", -1),
                                                      p["fetch_offset"],
                                                      p.get("log_start_offset", -1))
                except KafkaError as error:
                    self.refused[tp] = error

    @property
    def from_follower(self) -> bool:
        return self.replica_id >= 0 and self.logs.replicas is not None

    @property
    def debugging(self) -> bool:
        """replica_id -2 (Kafka's debugging consumer, used by replica verification):
        served by any replica, leader or follower, up to its log end."""
        return self.replica_id == DEBUGGING_REPLICA_ID

    def attempt(self, final: bool) -> dict | None:
        """The response body if ready (or ``final``); None to keep waiting."""
        remaining = self.body["max_bytes"]
        if remaining <= 0:
            remaining = 1
        total = 0
        failed = False
        from_follower = self.from_follower
        self.throttled.clear()
        throttled_bytes = 0
        # A woken attempt re-reads what changed; the first, a deadline's and a re-check
        # after parking (nothing marked changed) read everything.
        changed, self.changed = self.changed, set()
        if self.incremental and self.watched is not None:
            changed |= self._read_more(changed)
        reuse = self._unchanged if changed and not final else {}
        unchanged: dict = {}
        topics_out: list[dict] = []
        response = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0,
                    "responses": topics_out}
        try:
            for topic in self.body["topics"]:
                partitions_out: list[dict] = []
                topics_out.append({"topic": topic["topic"], "partitions": partitions_out})
                for p in topic["partitions"]:
                    # As Kafka: only the first partition with records gets its first batch
                    # whole whatever its size (so a consumer always makes progress); the
                    # others fit in what is left of max_bytes or wait for the next Fetch.
                    # (A follower, whose fetcher keeps its partitions in one order, gets
                    # a batch of each, so none of them falls behind for good.)
                    key = (topic["topic"], p["partition"])
                    cached = reuse.get(key)
                    if cached is not None and TopicPartition(*key) not in changed:
                        result = dict(cached)
                    else:
                        result = self._read(topic["topic"], p, remaining,
                                            min_one=total == 0 or from_follower)
                    partitions_out.append(result)
                    size = records_size(result)
                    total += size
                    remaining -= size
                    failed = failed or result["error_code"] != 0
                    if key in self.throttled:
                        throttled_bytes += size
                    elif not size and not result["error_code"]:
                        unchanged[key] = result
        except BaseException:
            # e.g. EMFILE duplicating a descriptor: give back the regions already taken.
            close_regions(response)
            raise
        self._unchanged = unchanged
        if final or failed or total >= self.body["min_bytes"]:
            if throttled_bytes:
                self.logs.replicas.leader_quota.record(throttled_bytes)
            if self.session is not None:
                with self.session.lock:
                    self.session.filter_response(response, full=not self.incremental)
            return response
        close_regions(response)
        return None

    def _read(self, topic: str, p: dict, remaining: int, min_one: bool = True) -> dict:
        result = {"partition_index": p["partition"], "error_code": 0, "high_watermark": -1,
                  "last_stable_offset": -1, "log_start_offset": -1,
                  "aborted_transactions": None, "preferred_read_replica": -1,
                  "records": b""}
        try:
            refused = self.refused.get(TopicPartition(topic, p["partition"]))
            if refused is not None:
                raise refused
            if self.debugging:
                partition_log = self.logs.replica_log(topic, p["partition"])
            else:
                partition_log = self.logs.leader_log(topic, p["partition"],
                                                     p.get("current_leader_epoch", -1))
            budget = min(p["partition_max_bytes"], remaining)
            if self.from_follower and self.logs.replicas.leader_throttles(
                    TopicPartition(topic, p["partition"]), self.replica_id):
                if self.logs.replicas.leader_quota.exceeded():
                    budget = 0  # over the leader throttle: positions only, for now
                else:
                    self.throttled.add((topic, p["partition"]))
            to_log_end = self.from_follower or self.debugging
            committed = self.read_committed and not to_log_end
            if not to_log_end and p["fetch_offset"] == partition_log.high_watermark:
                budget = 0  # caught up: nothing to read, positions only (a cheap answer)
            if budget > 0:
                read = partition_log.read(p["fetch_offset"], budget, up_to_log_end=to_log_end,
                                          committed=committed, min_one=min_one)
                hw, stable, start = read.high_watermark, read.last_stable_offset, read.log_start_offset
                if read.region is not None:
                    result["records"] = read.region
                if read.aborted_transactions is not None:
                    result["aborted_transactions"] = [
                        {"producer_id": t.producer_id, "first_offset": t.first_offset}
                        for t in read.aborted_transactions]
            else:  # the request's byte budget is spent: report positions only
                hw, start = partition_log.high_watermark, partition_log.log_start_offset
                stable = partition_log.last_stable_offset
                if committed:
                    result["aborted_transactions"] = []
            result.update(high_watermark=hw, last_stable_offset=stable, log_start_offset=start)
        except KafkaError as error:
            result["error_code"] = error.errno
        return result


def close_regions(response: dict) -> None:
    """Close every file region of a Fetch response that will not be sent."""
    for topic in response.get("responses", ()):
        for p in topic["partitions"]:
            region = p.get("records")
            if hasattr(region, "close"):
                region.close()


def start_fetch(body: dict, version: int, logs: PartitionLogs, now: float,
                max_bytes: int | None = None,
                sessions: FetchSessionCache | None = None) -> FetchWork | dict:
    """A FetchWork to attempt (and maybe park), or an immediate error body. ``max_bytes``
    (``fetch.max.bytes``) caps what a consumer's request may ask for, as in Kafka; a
    follower's is its own (``replica.fetch.response.max.bytes``)."""
    if version < MIN_FETCH_VERSION:
        raise UnsupportedVersionError(f"Fetch v{version} is not supported; use v4 or later")
    session, watched = None, None
    incremental = body.get("session_epoch", FINAL_EPOCH) > INITIAL_EPOCH
    if sessions is None or version < FIRST_SESSION_VERSION:
        if body.get("session_id", 0) != 0 or incremental:
            # No fetch sessions: tell the client to fall back to full fetches.
            return _session_error(FetchSessionIdNotFoundError.errno)
    else:
        try:
            session = sessions.session_for(body)
        except KafkaError as error:
            return _session_error(error.errno)
        if session is not None and incremental:
            requested = {TopicPartition(t["topic"], p["partition"])
                         for t in body["topics"] for p in t["partitions"]}
            with session.lock:
                topics = session.request_topics(session.to_read(requested)
                                                if sessions.waiters is not None else None)
                watched = list(session.partitions)
            body = dict(body, topics=topics)
    if max_bytes is not None and body.get("replica_id", -1) < 0 and body["max_bytes"] > max_bytes:
        body["max_bytes"] = max_bytes
    return FetchWork(body, logs, now + max(body["max_wait_ms"], 0) / 1000, session=session,
                     incremental=watched is not None, watched=watched)


def _session_error(code: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "session_id": 0, "responses": []}


def handle_list_offsets(body: dict, version: int, logs: PartitionLogs) -> dict:
    """Each partition's offset for its timestamp. A partition named twice gets
    INVALID_REQUEST for each entry, as in Kafka: one answer could not tell which
    timestamp it is for."""
    named = Counter((t["name"], p["partition_index"])
                    for t in body["topics"] for p in t["partitions"])
    topics_out = []
    for topic in body["topics"]:
        partitions_out = []
        for p in topic["partitions"]:
            result = {"partition_index": p["partition_index"], "error_code": 0,
                      "old_style_offsets": [], "timestamp": -1, "offset": -1,
                      "leader_epoch": -1}
            if named[topic["name"], p["partition_index"]] > 1:
                result["error_code"] = InvalidRequestError.errno
                partitions_out.append(result)
                continue
            try:
                timestamp = p["timestamp"]
                if timestamp < 0 and version < _SPECIAL_SINCE.get(timestamp, version + 1):
                    raise UnsupportedVersionError(
                        f"timestamp {timestamp} is not known to ListOffsets v{version}")
                replica_id = body.get("replica_id", -1)
                if replica_id == DEBUGGING_REPLICA_ID:
                    partition_log = logs.replica_log(topic["name"], p["partition_index"])
                else:
                    partition_log = logs.leader_log(topic["name"], p["partition_index"],
                                                    p.get("current_leader_epoch", -1))
                if (replica_id >= 0 or replica_id == DEBUGGING_REPLICA_ID) \
                        and p["timestamp"] == LATEST:
                    offset, timestamp = partition_log.log_end_offset, -1
                else:
                    committed = body.get("isolation_level", 0) == READ_COMMITTED
                    lookup = _lookup_committed if committed else _lookup
                    offset, timestamp = lookup(partition_log, p["timestamp"])
                    if replica_id == -1:
                        _check_caught_up(logs, topic["name"], p, partition_log, offset,
                                         partition_log.last_stable_offset if committed
                                         else partition_log.high_watermark)
                result.update(offset=offset, timestamp=timestamp,
                              leader_epoch=max(partition_log.latest_epoch, 0),
                              old_style_offsets=[] if offset < 0 else [offset])
            except KafkaError as error:
                result["error_code"] = error.errno
            partitions_out.append(result)
        topics_out.append({"name": topic["name"], "partitions": partitions_out})
    return {"throttle_time_ms": 0, "topics": topics_out}


def _check_caught_up(logs: PartitionLogs, topic: str, p: dict, partition_log, offset: int,
                     fetchable: int) -> None:
    """KIP-207: a new leader's high watermark starts where its own replica knew it, which
    may be below the previous leader's until the followers fetch again. Until it reaches
    the offset where this leader's epoch began, the latest offset (or a timestamp's, when
    not found below the fetchable end) could go back: OFFSET_NOT_AVAILABLE, which clients
    retry, as Kafka answers a consumer."""
    timestamp = p["timestamp"]
    if timestamp in (EARLIEST, EARLIEST_LOCAL) or (timestamp != LATEST and 0 <= offset < fetchable):
        return
    if logs.leader_epoch_start(topic, p["partition_index"]) > partition_log.high_watermark:
        raise OffsetNotAvailableError(
            f"{topic}-{p['partition_index']}: the high watermark {partition_log.high_watermark} "
            f"has not reached this leader's epoch start yet")


def _lookup(partition_log, timestamp: int) -> tuple[int, int]:
    if timestamp == LATEST:
        return partition_log.high_watermark, -1
    if timestamp in (EARLIEST, EARLIEST_LOCAL):  # every record is local: no tiered storage
        return partition_log.log_start_offset, -1
    if timestamp == LATEST_TIERED:  # nothing is tiered
        return -1, -1
    if timestamp == MAX_TIMESTAMP:
        found = partition_log.batch_of_max_timestamp()
        if found is None:
            return -1, -1
        # The batch's first record with that timestamp, as Kafka 3.8 answers (KAFKA-16310).
        return _first_record_at_or_after(partition_log, found[0], found[1], found[1])
    found = partition_log.offset_for_timestamp(timestamp)
    if found is None:
        return -1, -1
    return _first_record_at_or_after(partition_log, found[0], timestamp, found[1])


def _lookup_committed(partition_log, timestamp: int) -> tuple[int, int]:
    """As :func:`_lookup`, for isolation read_committed: the latest offset is the last
    stable offset, and a timestamp found at or above it is not found."""
    stable = partition_log.last_stable_offset
    if timestamp == LATEST:
        return stable, -1
    offset, found = _lookup(partition_log, timestamp)
    return (offset, found) if offset < stable or timestamp in (EARLIEST, EARLIEST_LOCAL) \
        else (-1, -1)


def _first_record_at_or_after(partition_log, batch_offset: int, timestamp: int,
                              batch_max_timestamp: int) -> tuple[int, int]:
    """Narrow a batch-level time index hit to the exact record (Kafka's answer)."""
    try:
        read = partition_log.read(batch_offset, 1)
    except PylogError:
        return batch_offset, batch_max_timestamp
    if read.region is None:
        return batch_offset, batch_max_timestamp
    with read.region as region:
        raw = region.read_bytes()
    try:
        batch = decode_batch(raw)
    except PylogError:
        return batch_offset, batch_max_timestamp
    for record in batch.records:
        if record.offset >= batch_offset and record.timestamp >= timestamp:
            return record.offset, record.timestamp
    return batch_offset, batch_max_timestamp
