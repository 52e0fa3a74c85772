"""Partition reassignment as the controller carries it out (seed 003's three phases).

A request under ``/admin/reassign_partitions`` names each partition's target replicas
(RAR). For each partition, every controller pass takes the next step that applies:

1. RAR not all assigned yet: the assignment becomes RAR + (OAR - RAR). The new replicas
   start following and the leader adds them to the ISR once they have caught up.
2. Every RAR replica in the ISR: leadership moves into RAR if the leader is not in it (a
   new leader epoch), the ISR keeps only RAR, and the assignment becomes RAR, in one
   transaction. Brokers no longer assigned stop their replicas and delete the logs.
3. The partition leaves the request; the request node goes when it is empty.

Everything a step needs is in ZooKeeper (the request, the assignment, the ISR), so a
controller elected halfway through carries on where its predecessor stopped. All writes
go through the controller's guarded transactions (controller epoch check).
"""

from __future__ import annotations

import logging
from typing import AbstractSet, Callable

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from pylog.cluster import layout
from pylog.cluster.layout import PartitionStateNode

log = logging.getLogger(__name__)


def reassignment_step(current: tuple[int, ...], target: tuple[int, ...],
                      state: PartitionStateNode | None, eligible: AbstractSet[int]):
    """The next step for one partition: ("assign", replicas), ("finish", leader, isr),
    ("wait",) or ("done",). Pure."""
    if not set(target) <= set(current):
        return ("assign", tuple(target) + tuple(r for r in current if r not in target))
    if state is None or not set(target) <= set(state.isr):
        return ("wait",)
    if current == target and state.leader in target:
        return ("done",)
    leader = state.leader
    if leader not in target or leader not in eligible:
        candidates = [r for r in target if r in state.isr and r in eligible]
        if not candidates:
            return ("wait",)
        leader = candidates[0]
    return ("finish", leader, tuple(r for r in state.isr if r in target))


class Reassigner:
    """Carries out ``/admin/reassign_partitions`` for the controller.

    ``commit(add_operations)`` runs ZooKeeper operations in one transaction behind the
    controller epoch check (the controller's ``_commit_guarded``).
    """

    def __init__(self, client: KazooClient, broker_id: int, commit: Callable,
                 controller_epoch: Callable[[], int]) -> None:
        self._client = client
        self._broker_id = broker_id
        self._commit = commit
        self._controller_epoch = controller_epoch

    def run(self, eligible: AbstractSet[int]) -> None:
        try:
            data, stat = self._client.get(layout.REASSIGN_PARTITIONS)
        except NoNodeError:
            return
        try:
            targets = layout.decode_reassignment(data)
            originals = layout.decode_reassignment_originals(data)
        except (ValueError, KeyError, TypeError):
            log.error("ignoring unreadable %s; deleting it", layout.REASSIGN_PARTITIONS)
            targets, originals = {}, {}
        remaining = {key: target for key, target in targets.items()
                     if not self._advance(key, target, eligible)}
        if remaining == targets:
            return
        if remaining:
            self._commit(lambda txn: txn.set_data(layout.REASSIGN_PARTITIONS,
                                                  layout.encode_reassignment(remaining,
                                                                             originals),
                                                  version=stat.version))
        else:
            self._commit(lambda txn: txn.delete(layout.REASSIGN_PARTITIONS,
                                                version=stat.version))
            log.info("controller %d: every requested reassignment is complete",
                     self._broker_id)

    def _advance(self, key: tuple[str, int], target: tuple[int, ...],
                 eligible: AbstractSet[int]) -> bool:
        """Take this partition's next step; True once it is done (or impossible)."""
        topic, partition = key
        try:
            data, topic_stat = self._client.get(layout.topic_path(topic))
        except NoNodeError:
            log.warning("reassignment of %s-%d dropped: no such topic", topic, partition)
            return True
        assignment = layout.decode_assignment(data)
        if partition not in assignment or not target or len(set(target)) != len(target):
            log.warning("reassignment of %s-%d to %s dropped: invalid", topic, partition,
                        list(target))
            return True
        state_path = layout.partition_state_path(topic, partition)
        try:
            state_data, state_stat = self._client.get(state_path)
            state = PartitionStateNode.decode(state_data)
        except NoNodeError:
            state, state_stat = None, None
        step = reassignment_step(assignment[partition], target, state, eligible)
        if step[0] == "done":
            return True
        if step[0] == "wait":
            return False
        new_assignment = dict(assignment)
        if step[0] == "assign":
            new_assignment[partition] = step[1]
            log.info("controller %d: reassigning %s-%d: replicas %s -> %s", self._broker_id,
                     topic, partition, list(assignment[partition]), list(step[1]))
            self._commit(lambda txn: txn.set_data(
                layout.topic_path(topic), layout.replace_assignment(data, new_assignment),
                version=topic_stat.version))
            return False
        _, leader, isr = step
        new_assignment[partition] = target
        epoch = state.leader_epoch + (leader != state.leader)
        new_state = PartitionStateNode(leader, epoch, isr, self._controller_epoch())
        log.info("controller %d: reassignment of %s-%d complete: replicas %s, leader %d "
                 "(epoch %d), isr %s", self._broker_id, topic, partition, list(target),
                 leader, epoch, list(isr))

        def operations(txn) -> None:
            txn.set_data(state_path, new_state.encode(), version=state_stat.version)
            txn.set_data(layout.topic_path(topic), layout.replace_assignment(data, new_assignment),
                         version=topic_stat.version)
        self._commit(operations)
        return True
