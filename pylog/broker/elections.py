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
or REQUEST_TIMED_OUT after the request's ``timeout_ms``. A standalone broker leads every
partition already: ELECTION_NOT_NEEDED.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

from pylog.cluster.metadata import NO_LEADER, ClusterMetadata, PartitionState
from pylog.errors import (
    ElectionNotNeededError, EligibleLeadersNotAvailableError, InvalidRequestError, KafkaError,
    PreferredLeaderNotAvailableError, RequestTimedOutError, UnknownTopicOrPartitionError)
from pylog.protocol import ApiKey

log = logging.getLogger(__name__)

API_KEY = ApiKey.ELECT_LEADERS
VERSIONS = (0, 2)
PREFERRED, UNCLEAN = 0, 1
POLL_S = 0.05
MAX_WAIT_S = 30.0  # a processor thread waits at most this long, whatever the request says

Partition = tuple[str, int]


class ElectLeadersHandler:
    def __init__(self, metadata: ClusterMetadata,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.metadata = metadata
        self.clock = clock

    def handle(self, version: int, body: dict, session) -> dict:
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
        results: dict[Partition, KafkaError | None] = {}
        eligible = []
        for tp in dict.fromkeys(wanted):
            refusal = self._refusal(tp, kind)
            if refusal is None:
                eligible.append(tp)
            elif named is not None:
                results[tp] = refusal
        if eligible:
            for tp, outcome in self._elect(eligible, kind, body["timeout_ms"]).items():
                results[tp] = outcome
        return {"throttle_time_ms": 0, "error_code": 0,
                "replica_election_results": _by_topic(results)}

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

    def _elect(self, partitions: list[Partition], kind: int,
               timeout_ms: int) -> dict[Partition, KafkaError | None]:
        before = {tp: self._state(tp) for tp in partitions}
        try:
            self.metadata.request_preferred_election(partitions, unclean=kind == UNCLEAN)
        except KafkaError as error:
            return {tp: error for tp in partitions}
        log.info("%s leader election requested for %s",
                 "unclean" if kind == UNCLEAN else "preferred",
                 ", ".join(f"{t}-{p}" for t, p in partitions))
        deadline = self.clock() + min(max(timeout_ms, 0) / 1000, MAX_WAIT_S)
        while True:
            done = {tp: self._elected(tp, kind, before[tp]) for tp in partitions}
            if all(done.values()) or self.clock() >= deadline:
                break
            time.sleep(POLL_S)
        return {tp: None if elected else RequestTimedOutError(
                    f"{tp[0]}-{tp[1]}: the controller did not elect a leader in time")
                for tp, elected in done.items()}

    def _elected(self, tp: Partition, kind: int, before: PartitionState) -> bool:
        state = self._state(tp)
        if state is None:
            return False
        if kind == PREFERRED:
            return state.leader == state.replicas[0]
        return state.leader != NO_LEADER and state.leader_epoch > before.leader_epoch


def _by_topic(results: dict[Partition, KafkaError | None]) -> list[dict]:
    topics: dict[str, list[dict]] = {}
    for (topic, partition), error in results.items():
        topics.setdefault(topic, []).append({
            "partition_id": partition, "error_code": 0 if error is None else error.errno,
            "error_message": None if error is None else str(error)})
    return [{"topic": topic, "partition_result": partitions}
            for topic, partitions in topics.items()]
