"""WriteTxnMarkers (api key 27, v0-1): the transaction coordinator ends transactions here.

For each marker of the request (a producer id and epoch, COMMIT or ABORT, the coordinator
epoch) and each of its partitions, the broker appends the marker as the partition's leader
(:meth:`pylog.log.Log.append_marker`): it completes the producer's open transaction there,
an ABORT adds an entry to the aborted-transaction index, and the last stable offset can
move past the transaction once the marker is replicated. The append is an acks=all one:
the request is parked, as an acks=all Produce is, until the high watermark has passed
every marker of the request, then answered per partition:

* NONE -- written and replicated to the in-sync replicas;
* UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER -- not written (the coordinator
  finds the new leader and sends the marker again);
* TRANSACTION_COORDINATOR_FENCED -- a marker from an older coordinator epoch than the
  producer's last one; INVALID_PRODUCER_EPOCH -- a marker for an older producer epoch;
* NOT_ENOUGH_REPLICAS (nothing written), NOT_ENOUGH_REPLICAS_AFTER_APPEND,
  REQUEST_TIMED_OUT (after ``request.timeout.ms``, default 30 s): retriable.

Marker listeners: ``service.add_marker_listener(callback)`` registers
``callback(topic, partition, producer_id, commit, marker_offset)``, called once for each
marker written and replicated (not for a refused or timed-out one), as Kafka calls the
group coordinator's ``onTransactionCompleted``: the group coordinator makes a
transaction's offset commits (TxnOffsetCommit) visible, or drops them, when the marker
reaches a ``__consumer_offsets`` partition it loads. A callback runs on a network thread
and must be quick; an exception in it is logged and does not fail the request.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from pylog.broker.partitions import PartitionLogs
from pylog.broker.produce import PendingAppend, still_waiting
from pylog.errors import KafkaError, RequestTimedOutError
from pylog.protocol import ApiKey
from pylog.types import TopicPartition

log = logging.getLogger(__name__)

API_KEY = ApiKey.WRITE_TXN_MARKERS
VERSIONS = (0, 1)
DEFAULT_TIMEOUT_MS = 30000
# (topic, partition, producer_id, commit, marker_offset)
MarkerListener = Callable[[str, int, int, bool, int], None]


@dataclass
class _PendingMarker:
    """One marker written to one partition, waiting for the high watermark to pass it."""

    tp: TopicPartition
    producer_id: int
    commit: bool
    offset: int
    result: dict
    waiting: PendingAppend | None  # None standalone: wait on the log's high watermark
    log: object = None


@dataclass
class MarkerWork:
    """A WriteTxnMarkers request whose markers wait for replication; ``attempt`` until
    it returns the response body."""

    response: dict
    pending: list[_PendingMarker]
    deadline: float
    notify: Callable[[_PendingMarker], None]
    partitions: list[TopicPartition] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.partitions = list(dict.fromkeys(p.tp for p in self.pending))

    def attempt(self, final: bool) -> dict | None:
        still = []
        for marker in self.pending:
            error = _outcome(marker, final)
            if error is False:
                still.append(marker)
                continue
            if error is None:
                self.notify(marker)
            else:
                marker.result["error_code"] = error.errno
        self.pending = still
        return None if still else self.response


def _outcome(marker: _PendingMarker, final: bool):
    """False while waiting; else None (replicated) or the error to answer with."""
    if marker.waiting is not None:
        return still_waiting(marker.waiting, final)
    if marker.log.high_watermark > marker.offset:
        return None
    if final:
        return RequestTimedOutError(f"{marker.tp}: the marker at {marker.offset} was not "
                                    "flushed in time")
    return False


class TxnMarkerService:
    """Serves WriteTxnMarkers for the partitions this broker leads.

    Example (in the broker)::

        markers = TxnMarkerService(logs, clock)
        dispatcher.serve(API_KEY, VERSIONS, markers.handle)
        markers.add_marker_listener(group_coordinator.on_transaction_completed)
    """

    def __init__(self, logs: PartitionLogs, clock: Callable[[], float],
                 timeout_ms: int = DEFAULT_TIMEOUT_MS) -> None:
        self.logs = logs
        self.clock = clock
        self.timeout_ms = timeout_ms
        self._listeners: list[MarkerListener] = []
        self._lock = threading.Lock()

    def add_marker_listener(self, callback: MarkerListener) -> None:
        """Call ``callback(topic, partition, producer_id, commit, marker_offset)`` once
        for every marker written and replicated from now on."""
        with self._lock:
            self._listeners.append(callback)

    def remove_marker_listener(self, callback: MarkerListener) -> None:
        with self._lock:
            self._listeners.remove(callback)

    def handle(self, version: int, body: dict, session=None) -> dict | MarkerWork:
        """The handler ``Dispatcher.serve`` takes: the response, or a MarkerWork to park."""
        markers_out, pending = [], []
        for marker in body["markers"]:
            topics_out = []
            for topic in marker["topics"]:
                partitions_out = []
                for index in topic["partition_indexes"]:
                    result = {"partition_index": index, "error_code": 0}
                    partitions_out.append(result)
                    waiting = self._append(TopicPartition(topic["name"], index), marker, result)
                    if waiting is not None:
                        pending.append(waiting)
                topics_out.append({"name": topic["name"], "partitions": partitions_out})
            markers_out.append({"producer_id": marker["producer_id"], "topics": topics_out})
        response = {"markers": markers_out}
        if not pending:
            return response
        work = MarkerWork(response, pending, self.clock() + self.timeout_ms / 1000, self._notify)
        return work.attempt(final=False) or work

    def write(self, body: dict, poll_s: float = 0.005) -> dict:
        """Answer a WriteTxnMarkers request body in-process (the broker's own transaction
        coordinator writing markers to partitions it leads): blocks until the markers are
        replicated or the request's timeout passed."""
        answer = self.handle(1, body)
        while not isinstance(answer, dict):
            time.sleep(poll_s)
            response = answer.attempt(final=self.clock() >= answer.deadline)
            if response is not None:
                return response
        return answer

    def _append(self, tp: TopicPartition, marker: dict, result: dict) -> _PendingMarker | None:
        producer_id, commit = marker["producer_id"], marker["transaction_result"]
        try:
            if self.logs.replicas is None:
                partition_log = self.logs.leader_log(tp.topic, tp.partition)
                info = partition_log.append_marker(producer_id, marker["producer_epoch"], commit,
                                                   marker["coordinator_epoch"])
                return _PendingMarker(tp, producer_id, commit, info.first_offset, result, None,
                                      partition_log)
            info, replica, epoch = self.logs.replicas.append_marker_as_leader(
                tp, producer_id, marker["producer_epoch"], commit, marker["coordinator_epoch"])
        except KafkaError as error:
            log.debug("marker for producer %d on %s refused: %s", producer_id, tp, error)
            result["error_code"] = error.errno
            return None
        return _PendingMarker(tp, producer_id, commit, info.first_offset, result,
                              PendingAppend(result, replica, epoch, info.first_offset + 1))

    def _notify(self, marker: _PendingMarker) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for callback in listeners:
            try:
                callback(marker.tp.topic, marker.tp.partition, marker.producer_id, marker.commit,
                         marker.offset)
            except Exception:  # a listener's bug must not fail the request
                log.exception("marker listener failed for %s", marker.tp)
