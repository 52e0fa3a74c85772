"""ElectLeaders (API 43, KIP-460): move partition leadership on request, as
``kafka-leader-election.sh --bootstrap-server`` and the admin clients' ``elect_leaders``
ask for it.

* Preferred (type 0): the first replica of each partition leads again, if it is alive and
  in sync. ELECTION_NOT_NEEDED when it already leads, PREFERRED_LEADER_NOT_AVAILABLE when
  it cannot.
* Unclean (type 1): a partition without a leader gets one even if no in-sync replica is
  alive (the first live replica, which may lack acknowledged records: the records only it
  misses are lost). ELECTION_NOT_NEEDED when the partition has a leader,
  ELIGIBLE_LEADERS_NOT_AVAILABLE when none of its replicas is alive.

No partitions named (null) means every partition the election would change; those it
would not are left out of the answer, as in Kafka. The broker hands the partitions to
the controller through ZooKeeper (``/admin/preferred_replica_election``, or pylog's
``/admin/unclean_leader_election``) and answers once their new leaders are in its view,
or REQUEST_TIMED_OUT after the request's ``timeout_ms`` (at most 30 s); meanwhile the
request is parked, as a Produce waiting for its replicas is. A standalone broker leads
every partition already: ELECTION_NOT_NEEDED.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from pylog.cluster.metadata import NO_LEADER, ClusterMetadata, PartitionState
from pylog.errors import (
    ElectionNotNeededError, EligibleLeadersNotAvailableError, InvalidRequestError, KafkaError,
    PreferredLeaderNotAvailableError, RequestTimedOutError, UnknownTopicOrPartitionError)
from pylog.broker.produce import PartitionWaits
from pylog.protocol import ApiKey
from pylog.types import TopicPartition

log = logging.getLogger(__name__)

API_KEY = ApiKey.ELECT_LEADERS
VERSIONS = (0, 2)
PREFERRED, UNCLEAN = 0, 1
MAX_WAIT_S = 30.0  # the longest a request stays parked, whatever it asks

Partition = tuple[str, int]


class ElectionWork(PartitionWaits):
    """An ElectLeaders parked until each partition has its new leader in this broker's
    view (or its deadline passes): no processor thread waits."""

    def settle(self, waiting: "_Waiting", final: bool) -> bool:
        if waiting.elected():
            return True
        if final:
            waiting.result.update(error_code=RequestTimedOutError.errno,
                                  error_message="the controller did not elect a leader in time")
            return True
        return False


class _Waiting:
    def __init__(self, handler: "ElectLeadersHandler", tp: Partition, kind: int,
                 before: PartitionState, result: dict) -> None:
        self.handler, self.tp, self.kind, self.before, self.result = \
            handler, tp, kind, before, result

    def elected(self) -> bool:
        state = self.handler._state(self.tp)
        if state is None:
            return False
        if self.kind == PREFERRED:
            return state.leader == state.replicas[0]
        return state.leader != NO_LEADER and state.leader_epoch > self.before.leader_epoch


class ElectLeadersHandler:
    """``wake(partitions)`` tells the network layer that a parked request on these
    partitions may be done (the broker's AppendWaiters.notify); the handler calls it when
    the cluster metadata changes."""

    def __init__(self, metadata: ClusterMetadata, clock: Callable[[], float] = time.monotonic,
                 wake: Callable[[TopicPartition], None] | None = None) -> None:
        self.metadata = metadata
        self.clock = clock
        self._wake = wake
        self._works: list[ElectionWork] = []
        self._lock = threading.Lock()
        metadata.add_listener(self._on_metadata_change)

    def _on_metadata_change(self) -> None:
        with self._lock:
            self._works = [work for work in self._works if work.pending]
            waiting = [tp for work in self._works for tp in list(work.pending)]
        if self._wake is not None:
            for tp in waiting:
                self._wake(tp)

    def handle(self, version: int, body: dict, session) -> dict | ElectionWork:
        kind = body["election_type"] if version >= 1 else PREFERRED
        if kind not in (PREFERRED, UNCLEAN):
            return {"throttle_time_ms": 0, "error_code": InvalidRequestError.errno,
                    "replica_election_results": []}
        named = body["topic_partitions"]
        if named is None:
            wanted = [(name, p) for name, meta in sorted(self.metadata.topics().items())
                      for p in sorted(meta.partitions)]
        else:
            wanted = [(t["topic"], p) for t in named for p in t["partition_id"]]
        results: dict[Partition, dict] = {}
        eligible = []
        for tp in dict.fromkeys(wanted):
            refusal = self._refusal(tp, kind)
            if refusal is None:
                eligible.append(tp)
                results[tp] = _result(tp[1], None)
            elif named is not None:
                results[tp] = _result(tp[1], refusal)
        response = {"throttle_time_ms": 0, "error_code": 0,
                    "replica_election_results": _by_topic(results)}
        if not eligible:
            return response
        before = {tp: self._state(tp) for tp in eligible}
        try:
            self.metadata.request_preferred_election(eligible, unclean=kind == UNCLEAN)
        except KafkaError as error:
            for tp in eligible:
                results[tp].update(_result(tp[1], error))
            return response
        log.info("%s leader election requested for %s",
                 "unclean" if kind == UNCLEAN else "preferred",
                 ", ".join(f"{t}-{p}" for t, p in eligible))
        work = ElectionWork(response, {
            TopicPartition(*tp): _Waiting(self, tp, kind, before[tp], results[tp])
            for tp in eligible}, self.clock() + min(max(body["timeout_ms"], 0) / 1000,
                                                    MAX_WAIT_S))
        with self._lock:
            self._works.append(work)
        return work.attempt(final=False) or work

    def _state(self, tp: Partition) -> PartitionState | None:
        meta = self.metadata.topic(tp[0])
        return None if meta is None else meta.partitions.get(tp[1])

    def _refusal(self, tp: Partition, kind: int) -> KafkaError | None:
        """Why ``tp`` cannot or need not be elected; None if it can."""
        state = self._state(tp)
        if state is None:
            return UnknownTopicOrPartitionError(f"{tp[0]}-{tp[1]} does not exist")
        if not hasattr(self.metadata, "request_preferred_election"):
            return ElectionNotNeededError("a standalone broker leads every partition")
        live = {b.broker_id for b in self.metadata.brokers()}
        if kind == PREFERRED:
            preferred = state.replicas[0]
            if state.leader == preferred:
                return ElectionNotNeededError(f"its preferred replica {preferred} leads")
            if preferred not in live or preferred not in state.isr:
                return PreferredLeaderNotAvailableError(
                    f"its preferred replica {preferred} is not alive and in sync "
                    f"(isr {list(state.isr)})")
            return None
        if state.leader != NO_LEADER and state.leader in live:
            return ElectionNotNeededError(f"broker {state.leader} leads it")
        if not live & set(state.replicas):
            return EligibleLeadersNotAvailableError(
                f"none of its replicas {list(state.replicas)} is alive")
        return None


def _result(partition: int, error: KafkaError | None) -> dict:
    return {"partition_id": partition, "error_code": 0 if error is None else error.errno,
            "error_message": None if error is None else str(error)}


def _by_topic(results: dict[Partition, dict]) -> list[dict]:
    topics: dict[str, list[dict]] = {}
    for (topic, _), result in results.items():
        topics.setdefault(topic, []).append(result)
    return [{"topic": topic, "partition_result": partitions}
            for topic, partitions in topics.items()]
