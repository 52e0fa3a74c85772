"""AlterPartitionReassignments (45) and ListPartitionReassignments (46), KIP-455: move
partition replicas through a broker, as ``kafka-reassign-partitions.sh
--bootstrap-server`` and the admin clients do.

Alter adds partitions to ``/admin/reassign_partitions``, next to those already moving (a
partition named again gets its new target), and the controller carries them out as it
does for ``pylog partitions reassign`` (:mod:`pylog.cluster.reassignment`). Each entry
also keeps the partition's replicas from before ("original_replicas"): null replicas
cancel a pending reassignment, which sends the partition back to them (and is then
listed as moving back until it is there). Per partition: UNKNOWN_TOPIC_OR_PARTITION,
INVALID_REPLICA_ASSIGNMENT (no replicas, a broker twice, a broker not registered),
NO_REASSIGNMENT_IN_PROGRESS (cancelling what is not moving).

List answers each pending partition's replicas now, and which are being added and
removed. A standalone broker answers as a cluster of one: Alter takes a partition's own
broker as its target (nothing to move), refuses any other (INVALID_REPLICA_ASSIGNMENT)
and has nothing to cancel; List answers nothing.
"""

from __future__ import annotations

import logging

from pylog.cluster.metadata import ClusterMetadata
from pylog.errors import (
    InvalidReplicaAssignmentError, InvalidRequestError, KafkaError,
    NoReassignmentInProgressError, UnknownTopicOrPartitionError)
from pylog.protocol import ApiKey

log = logging.getLogger(__name__)

ALTER_API_KEY, LIST_API_KEY = ApiKey.ALTER_PARTITION_REASSIGNMENTS, \
    ApiKey.LIST_PARTITION_REASSIGNMENTS
VERSIONS = (0, 0)

Partition = tuple[str, int]


class ReassignmentHandlers:
    def __init__(self, metadata: ClusterMetadata) -> None:
        self.metadata = metadata

    @property
    def _clustered(self) -> bool:
        return hasattr(self.metadata, "alter_reassignments")

    def alter(self, version: int, body: dict, session) -> dict:
        requested = {(t["name"], p["partition_index"]): p["replicas"]
                     for t in body["topics"] for p in t["partitions"]}
        errors: dict[Partition, KafkaError | None] = {}
        live = {b.broker_id for b in self.metadata.brokers()}
        if not self._clustered:
            return self._alter_standalone(requested, live)
        checked: dict[Partition, tuple[int, ...] | None] = {}
        for tp, replicas in requested.items():
            try:
                self._replicas(tp)
                if replicas is not None:
                    _check_replicas(tp, replicas, live)
                checked[tp] = None if replicas is None else tuple(replicas)
            except KafkaError as error:
                errors[tp] = error

        def change(targets: dict, originals: dict) -> None:
            for tp, replicas in checked.items():
                errors.pop(tp, None)  # (a retry after a lost race starts again)
                current = self._replicas(tp)
                if replicas is not None:
                    if tp not in targets:
                        originals[tp] = current
                    targets[tp] = replicas
                elif tp not in targets:
                    errors[tp] = NoReassignmentInProgressError(
                        f"{tp[0]}-{tp[1]} is not being reassigned")
                elif tp in originals:
                    targets[tp] = originals[tp]  # back to where it was
                elif not set(targets[tp]) <= set(current):
                    del targets[tp]  # no replica added yet: nothing to undo
                else:
                    errors[tp] = InvalidRequestError(
                        f"{tp[0]}-{tp[1]}: its replicas from before the reassignment are "
                        f"not known (it was started through ZooKeeper); reassign it to "
                        f"them instead")

        if checked:
            try:
                self.metadata.alter_reassignments(change)
                log.info("reassignments requested: %s", ", ".join(
                    f"{t}-{p} -> {'cancel' if r is None else list(r)}"
                    for (t, p), r in sorted(checked.items()) if (t, p) not in errors))
            except KafkaError as error:
                errors.update({tp: error for tp in checked})
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                "responses": _by_topic(requested, errors)}

    def list(self, version: int, body: dict, session) -> dict:
        response = {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                    "topics": []}
        if not self._clustered:
            return response
        try:
            targets, originals = self.metadata.reassignments()
        except KafkaError as error:
            return dict(response, error_code=error.errno, error_message=str(error))
        wanted = None if body["topics"] is None else {
            (t["name"], p) for t in body["topics"] for p in t["partition_indexes"]}
        topics: dict[str, list[dict]] = {}
        for tp, target in sorted(targets.items()):
            if wanted is not None and tp not in wanted:
                continue
            try:
                current = self._replicas(tp)
            except KafkaError:
                continue
            before = originals.get(tp, current)
            topics.setdefault(tp[0], []).append({
                "partition_index": tp[1], "replicas": list(current),
                "adding_replicas": [r for r in target if r not in before],
                "removing_replicas": [r for r in before if r not in target]})
        response["topics"] = [{"name": name, "partitions": partitions}
                              for name, partitions in topics.items()]
        return response

    def _alter_standalone(self, requested: dict[Partition, list[int] | None],
                          live: set[int]) -> dict:
        """A standalone broker's answer, as a one-broker cluster's: every partition is
        already on its only broker, so a valid target (that broker) is done at once,
        nothing is ever moving to cancel, and any other broker is not registered."""
        errors: dict[Partition, KafkaError | None] = {}
        for tp, replicas in requested.items():
            try:
                self._replicas(tp)
                if replicas is None:
                    raise NoReassignmentInProgressError(f"{tp[0]}-{tp[1]} is not being reassigned")
                _check_replicas(tp, replicas, live)
            except KafkaError as error:
                errors[tp] = error
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                "responses": _by_topic(requested, errors)}

    def _replicas(self, tp: Partition) -> tuple[int, ...]:
        meta = self.metadata.topic(tp[0])
        state = None if meta is None else meta.partitions.get(tp[1])
        if state is None:
            raise UnknownTopicOrPartitionError(f"{tp[0]}-{tp[1]} does not exist")
        return tuple(state.replicas)


def _check_replicas(tp: Partition, replicas: list[int], live: set[int]) -> None:
    if not replicas:
        raise InvalidReplicaAssignmentError(f"{tp[0]}-{tp[1]}: no replicas given")
    if len(set(replicas)) != len(replicas):
        raise InvalidReplicaAssignmentError(f"{tp[0]}-{tp[1]}: a broker is named twice in "
                                            f"{replicas}")
    unknown = sorted(set(replicas) - live)
    if unknown:
        raise InvalidReplicaAssignmentError(
            f"{tp[0]}-{tp[1]}: broker(s) {unknown} are not registered")


def _by_topic(requested: dict[Partition, object], errors: dict[Partition, KafkaError | None]
              ) -> list[dict]:
    topics: dict[str, list[dict]] = {}
    for tp in requested:
        error = errors.get(tp)
        topics.setdefault(tp[0], []).append({
            "partition_index": tp[1], "error_code": 0 if error is None else error.errno,
            "error_message": None if error is None else str(error)})
    return [{"name": name, "partitions": partitions} for name, partitions in topics.items()]
