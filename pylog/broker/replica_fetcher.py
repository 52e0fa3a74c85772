"""Follower fetching: one thread per source broker, all its partitions in each request.

A ``ReplicaFetcher`` keeps one connection to one leader broker and loops:

1. Partitions added since the last round are first truncated (KIP-101/279): the follower
   asks the leader, with OffsetForLeaderEpoch, where its own latest leader epoch ends on
   the leader, and truncates its log there (or at its log end, if that is lower). A
   former leader's unreplicated tail goes; replicas never diverge. A follower with no
   epochs yet (an empty or old log) truncates to its high watermark.
2. One Fetch with ``replica_id`` = this broker, every partition at its log end, long
   polling (``replica.fetch.wait.max.ms``). Batches are appended as the leader stored
   them (``Log.append_as_follower``) and the high watermark becomes min(leader's, own
   log end).

Errors: a partition the leader does not lead in our epoch (NOT_LEADER_OR_FOLLOWER,
FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH) waits ``replica.fetch.backoff.ms`` and tries
again until the replica manager moves it; OFFSET_OUT_OF_RANGE below the leader's log
start (retention ran there) restarts the log at the leader's start. A broken connection
is re-opened after the backoff. The thread never holds a partition's lock while waiting
on the network.

Throttled replicas (``follower.replication.throttled.replicas``, while this replica is out
of the ISR) count against the follower throttle; while it is over its rate they are left out
of the fetch for a backoff (see pylog.broker.replication_quota).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from pylog.broker.replication_quota import ReplicationQuota
from pylog.client.connection import BrokerConnection
from pylog.errors import KafkaError, PylogError
from pylog.log import Log
from pylog.protocol import ApiKey
from pylog.types import BrokerEndpoint, TopicPartition

log = logging.getLogger(__name__)

NONE = 0
OFFSET_OUT_OF_RANGE = 1
EARLIEST = -2
LATEST = -1


@dataclass
class FetchTarget:
    """A partition this fetcher follows, in one leader epoch."""

    log: Log
    leader_epoch: int
    truncated: bool = False
    retry_at: float = 0.0
    on_fetched: Callable[[], None] | None = field(default=None, repr=False)


class ReplicaFetcher(threading.Thread):
    """Fetches every partition led by ``leader_id`` that this broker follows."""

    def __init__(self, local_id: int, leader_id: int,
                 address_of: Callable[[int], BrokerEndpoint | None], *,
                 max_wait_ms: int = 500, max_bytes: int = 10 * 1024 * 1024,
                 partition_max_bytes: int = 1024 * 1024, backoff_ms: int = 200,
                 security=None, quota: ReplicationQuota | None = None,
                 throttles: Callable[[TopicPartition], bool] = lambda tp: False,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(name=f"pylog-replica-fetcher-{local_id}-from-{leader_id}", daemon=True)
        self.local_id = local_id
        self.leader_id = leader_id
        self._address_of = address_of
        self._max_wait_ms = max_wait_ms
        self._max_bytes = max_bytes
        self._partition_max_bytes = partition_max_bytes
        self._backoff = backoff_ms / 1000
        self._clock = clock
        self._security = security  # the inter-broker listener's client settings
        self._quota = quota  # the follower replication throttle
        self._throttles = throttles  # which partitions it applies to, now
        self._cond = threading.Condition()
        self._targets: dict[TopicPartition, FetchTarget] = {}
        self._stopping = False
        self._connection: BrokerConnection | None = None

    # -- called by the replica manager ------------------------------------------------

    def set_security(self, security) -> None:
        """Client settings for the next connection to the leader."""
        self._security = security

    def add(self, tp: TopicPartition, target: FetchTarget) -> None:
        with self._cond:
            self._targets[tp] = target
            self._cond.notify_all()

    def remove(self, tp: TopicPartition) -> None:
        with self._cond:
            self._targets.pop(tp, None)

    def partitions(self) -> list[TopicPartition]:
        with self._cond:
            return list(self._targets)

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        connection = self._connection
        if connection is not None:
            connection.close()

    # -- the loop -------------------------------------------------------------------------

    def run(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and not self._ready():
                    self._cond.wait(self._backoff if self._targets else None)
                if self._stopping:
                    break
            try:
                connection = self._connect()
                self._truncate(connection)
                self._fetch(connection)
            except PylogError as error:
                if self._stopping:
                    break
                log.info("broker %d fetching from broker %d: %s; retrying", self.local_id,
                         self.leader_id, error)
                self._disconnect()
                self._sleep(self._backoff)
            except Exception:  # noqa: BLE001 -- keep replicating; the next round may work
                if self._stopping:
                    break
                log.exception("broker %d: replica fetcher for broker %d failed; retrying",
                              self.local_id, self.leader_id)
                self._disconnect()
                self._sleep(self._backoff)
        self._disconnect()

    def _ready(self) -> bool:
        now = self._clock()
        return any(t.retry_at <= now for t in self._targets.values())

    def _sleep(self, seconds: float) -> None:
        with self._cond:
            if not self._stopping:
                self._cond.wait(seconds)

    def _connect(self) -> BrokerConnection:
        if self._connection is not None and self._connection.connected:
            return self._connection
        endpoint = self._address_of(self.leader_id)
        if endpoint is None:
            raise PylogError(f"broker {self.leader_id} is not registered")
        timeout = self._max_wait_ms / 1000 + 10
        self._connection = BrokerConnection(endpoint.host, endpoint.port,
                                            client_id=f"pylog-replica-{self.local_id}",
                                            timeout_s=timeout, security=self._security)
        self._connection.connect()
        return self._connection

    def _disconnect(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _due(self, truncated: bool) -> dict[TopicPartition, FetchTarget]:
        now = self._clock()
        with self._cond:
            return {tp: t for tp, t in self._targets.items()
                    if t.truncated == truncated and t.retry_at <= now}

    def _still(self, tp: TopicPartition, target: FetchTarget) -> bool:
        with self._cond:
            return self._targets.get(tp) is target

    def _back_off(self, target: FetchTarget) -> None:
        target.retry_at = self._clock() + self._backoff

    # -- truncation (OffsetForLeaderEpoch) ------------------------------------------------

    def _truncate(self, connection: BrokerConnection) -> None:
        due = self._due(truncated=False)
        if not due:
            return
        asking = {tp: t for tp, t in due.items() if t.log.latest_epoch >= 0}
        for tp, target in due.items():
            if tp not in asking:
                self._truncate_to(tp, target, target.log.high_watermark)
        if not asking:
            return
        response = connection.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, {
            "replica_id": self.local_id,
            "topics": _by_topic(asking, lambda tp, t: {
                "partition": tp.partition, "current_leader_epoch": t.leader_epoch,
                "leader_epoch": t.log.latest_epoch})})
        for topic in response["topics"]:
            for p in topic["partitions"]:
                tp = TopicPartition(topic["topic"], p["partition"])
                target = asking.get(tp)
                if target is None or not self._still(tp, target):
                    continue
                if p["error_code"] != NONE:
                    log.debug("%s: OffsetForLeaderEpoch error %d", tp, p["error_code"])
                    self._back_off(target)
                    continue
                self._truncate_to(tp, target, self._truncation_offset(target.log, p))

    @staticmethod
    def _truncation_offset(partition_log: Log, answer: dict) -> int:
        """KIP-279: the leader's end of our latest epoch, or of the latest epoch we share."""
        epoch, end_offset = answer["leader_epoch"], answer["end_offset"]
        if end_offset < 0:
            return partition_log.high_watermark
        if epoch != partition_log.latest_epoch:
            local_epoch, local_end = partition_log.end_offset_for_epoch(epoch)
            if local_epoch == epoch:
                end_offset = min(end_offset, local_end)
        return min(end_offset, partition_log.log_end_offset)

    def _truncate_to(self, tp: TopicPartition, target: FetchTarget, offset: int) -> None:
        partition_log = target.log
        if offset < partition_log.log_end_offset:
            log.info("broker %d: truncating %s from %d to %d before following broker %d "
                     "(leader epoch %d)", self.local_id, tp, partition_log.log_end_offset,
                     offset, self.leader_id, target.leader_epoch)
            partition_log.truncate_to(offset)
        target.truncated = True

    # -- fetching -------------------------------------------------------------------------

    def _fetch(self, connection: BrokerConnection) -> None:
        due = self._due(truncated=True)
        throttled = set()
        if self._quota is not None and self._quota.active:
            throttled = {tp for tp in due if self._throttles(tp)}
            if throttled and self._quota.exceeded():
                for tp in throttled:  # over the follower throttle: wait, fetch the others
                    self._back_off(due.pop(tp))
                throttled = set()
        if not due:
            return
        response = connection.request(ApiKey.FETCH, {
            "replica_id": self.local_id, "max_wait_ms": self._max_wait_ms, "min_bytes": 1,
            "max_bytes": self._max_bytes, "isolation_level": 0, "session_id": 0,
            "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": _by_topic(due, lambda tp, t: {
                "partition": tp.partition, "current_leader_epoch": t.leader_epoch,
                "fetch_offset": t.log.log_end_offset, "last_fetched_epoch": -1,
                "log_start_offset": t.log.log_start_offset,
                "partition_max_bytes": self._partition_max_bytes})})
        if response.get("error_code", 0) != NONE:
            raise KafkaError.for_code(response["error_code"])(
                f"fetch from broker {self.leader_id} failed")
        for topic in response["responses"]:
            for p in topic["partitions"]:
                tp = TopicPartition(topic["topic"], p["partition_index"])
                target = due.get(tp)
                if target is not None and self._still(tp, target):
                    if tp in throttled and p["records"] is not None:
                        self._quota.record(len(p["records"]))
                    self._apply(connection, tp, target, p)

    def _apply(self, connection: BrokerConnection, tp: TopicPartition, target: FetchTarget,
               p: dict) -> None:
        error = p["error_code"]
        partition_log = target.log
        if error == OFFSET_OUT_OF_RANGE:
            self._handle_out_of_range(connection, tp, target)
            return
        if error != NONE:
            log.debug("%s: fetch error %d from broker %d", tp, error, self.leader_id)
            self._back_off(target)
            return
        records = p["records"]
        if records is not None and len(records):
            partition_log.append_as_follower(records)
        partition_log.set_high_watermark(min(p["high_watermark"], partition_log.log_end_offset))
        # The leader's log start (DeleteRecords, retention), as far as this log has records.
        leader_start = min(p.get("log_start_offset", -1), partition_log.high_watermark)
        if leader_start > partition_log.log_start_offset:
            partition_log.increment_log_start_offset(leader_start)
        if target.on_fetched is not None:
            target.on_fetched()

    def _handle_out_of_range(self, connection: BrokerConnection, tp: TopicPartition,
                             target: FetchTarget) -> None:
        """Our log end is outside the leader's log: below its start (retention), or
        above its end (should not happen after truncation, but never serve a fork)."""
        earliest, latest = (self._list_offset(connection, tp, target, which)
                            for which in (EARLIEST, LATEST))
        partition_log = target.log
        if earliest is None or latest is None:
            self._back_off(target)
            return
        if partition_log.log_end_offset > latest:
            log.warning("broker %d: %s log end %d is past the leader's %d; truncating",
                        self.local_id, tp, partition_log.log_end_offset, latest)
            partition_log.truncate_to(latest)
        elif partition_log.log_end_offset < earliest:
            log.warning("broker %d: %s restarts at the leader's log start %d (ours ended %d)",
                        self.local_id, tp, earliest, partition_log.log_end_offset)
            partition_log.truncate_fully_and_start_at(earliest)
        else:
            self._back_off(target)

    def _list_offset(self, connection: BrokerConnection, tp: TopicPartition,
                     target: FetchTarget, which: int) -> int | None:
        response = connection.request(ApiKey.LIST_OFFSETS, {
            "replica_id": self.local_id, "isolation_level": 0,
            "topics": [{"name": tp.topic, "partitions": [{
                "partition_index": tp.partition, "current_leader_epoch": target.leader_epoch,
                "timestamp": which, "max_num_offsets": 1}]}]})
        for topic in response["topics"]:
            for p in topic["partitions"]:
                if p["error_code"] == NONE:
                    return p["offset"]
        return None


def _by_topic(targets: dict[TopicPartition, FetchTarget], entry) -> list[dict]:
    topics: dict[str, list[dict]] = {}
    for tp, target in targets.items():
        topics.setdefault(tp.topic, []).append(entry(tp, target))
    return [{"topic": name, "partitions": parts} for name, parts in topics.items()]
