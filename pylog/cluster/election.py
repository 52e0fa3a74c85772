"""Leader election and ISR rules the controller applies to one partition (pure).

Given a partition's assigned replicas (preferred first), its current state node, the live
brokers and those in controlled shutdown, ``elect`` returns the leader and ISR the
partition should have:

- A live leader that is not shutting down stays. Replicas that are dead or shutting down
  leave the ISR (Kafka's OfflineReplica transition), so acks=all stops waiting for them.
- Otherwise the new leader is the first assigned replica that is in the ISR, alive and not
  shutting down (clean election); the ISR keeps only such replicas.
- With no such replica: a leader that is shutting down keeps leading (there is nobody to
  hand over to); with ``unclean`` the first live replica leads with itself as the whole
  ISR, accepting the loss of what only the old ISR had; otherwise the partition is offline
  (leader -1) and keeps its ISR, so that one of those replicas leads it when it returns.
- ``preferred``: move leadership to the first assigned replica when it is in the ISR,
  alive and not shutting down (preferred leader election).

A new partition (no state yet) is led by its first live replica with every live replica
in the ISR: all of them hold the same empty log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import AbstractSet, Sequence

from pylog.cluster.layout import PartitionStateNode
from pylog.cluster.metadata import NO_LEADER


@dataclass(frozen=True, slots=True)
class Election:
    leader: int
    isr: tuple[int, ...]


def elect(current: PartitionStateNode | None, replicas: Sequence[int], live: AbstractSet[int],
          shutting_down: AbstractSet[int] = frozenset(), *, unclean: bool = False,
          preferred: bool = False) -> Election:
    """The leader and ISR the partition should have (see the module docstring)."""
    eligible = [r for r in replicas if r in live and r not in shutting_down]
    if current is None:
        alive = [r for r in replicas if r in live]
        leader = eligible[0] if eligible else (alive[0] if alive else NO_LEADER)
        return Election(leader, tuple(alive) if alive else tuple(replicas[:1]))
    in_sync = [r for r in current.isr if r in eligible]
    leader = current.leader
    if preferred and replicas and replicas[0] in in_sync:
        leader = replicas[0]
    if leader in eligible:
        isr = tuple(r for r in current.isr if r in eligible or r == leader)
        if leader not in isr:
            isr = (leader,) + isr
        return Election(leader, isr)
    candidates = [r for r in replicas if r in in_sync]
    if candidates:
        return Election(candidates[0], tuple(in_sync))
    if leader in replicas and leader in live and leader in shutting_down:
        return Election(leader, (leader,))  # shutting down, but the only one in sync
    if unclean and eligible:
        return Election(eligible[0], (eligible[0],))
    return Election(NO_LEADER, current.isr or tuple(replicas[:1]))
