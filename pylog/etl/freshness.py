"""Refuse to apply a scheduled plan on top of offsets it was not planned from.

A scheduled plan reads from the committed offsets of the snapshot it was planned from
(``TablePlan.base_run_id`` / ``base_offsets``). If another run committed since, the plan
is stale: its ranges overlap what that run loaded, and committing its end offsets could
move the committed offsets backwards. Its map tasks refuse to write and its commit
refuses to commit; the plan must be discarded and the load run under a new run id.
"""

from __future__ import annotations

from pylog.etl.errors import LoaderError
from pylog.etl.model import OffsetsSnapshot, TablePlan


class StalePlanError(LoaderError):
    """A plan was made from offsets that are no longer the committed ones."""


def check_fresh(plan: TablePlan, snapshot: OffsetsSnapshot | None) -> None:
    """Raise StalePlanError unless ``snapshot`` is the one ``plan`` was made from.

    A snapshot written by the plan's own run (a commit finished before a crash) is fine.
    """
    if snapshot is not None and snapshot.run_id == plan.run_id:
        return
    current = dict(snapshot.offsets) if snapshot else {}
    current_run = snapshot.run_id if snapshot else None
    if plan.base_offsets is not None:
        if current_run != plan.base_run_id or current != plan.base_offsets:
            raise StalePlanError(
                f"table {plan.table}: run {plan.run_id!r} was planned from the offsets committed by "
                f"{_name(plan.base_run_id)}, but {_name(current_run)} has committed since "
                f"(now {_offsets(current)}); its plan is stale and will not be committed. "
                f"Start the load with a new run id.")
        return
    behind = {p: s for p, s in plan.start_offsets.items() if p in current and s < current[p]}
    if behind:  # a plan written before plans recorded their base
        raise StalePlanError(
            f"table {plan.table}: run {plan.run_id!r} starts partitions {sorted(behind)} before the "
            f"committed offsets ({_offsets(current)}); its plan is stale and will not be committed. "
            f"Start the load with a new run id.")


def check_forward(plan: TablePlan, current: dict[int, int], new: dict[int, int]) -> None:
    """Raise StalePlanError if committing ``new`` would move any committed offset backwards."""
    backwards = {p: (current[p], new[p]) for p in new if p in current and new[p] < current[p]}
    if backwards:
        moves = ", ".join(f"partition {p}: {old} -> {to}" for p, (old, to) in sorted(backwards.items()))
        raise StalePlanError(f"table {plan.table}: run {plan.run_id!r} would move committed offsets "
                             f"backwards ({moves}); not committing. Start the load with a new run id.")


def _name(run_id: str | None) -> str:
    return f"run {run_id!r}" if run_id is not None else "no run"


def _offsets(offsets: dict[int, int]) -> str:
    return "{" + ", ".join(f"{p}: {o}" for p, o in sorted(offsets.items())) + "}"
