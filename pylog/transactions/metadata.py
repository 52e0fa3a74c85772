"""One transactional id's state in the coordinator, and its legal transitions.

A change is prepared first (``prepare_*``: the state to write, with ``pending`` set so
no other change starts), written to ``__transaction_state``, and applied only once the
write is replicated (``complete``) or dropped if it failed (``abandon``). This is
Kafka's TransactionMetadata with transactions version 1 (EndTxn up to v4): the epoch is
bumped by InitProducerId and by fencing, not by every transaction.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pylog.transactions.records import TxnState, TxnValue
from pylog.types import TopicPartition

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767

S = TxnState
# The states each state may be entered from (Kafka's TransactionState.validPreviousStates).
_VALID_PREVIOUS = {
    S.EMPTY: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.ONGOING: {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.PREPARE_COMMIT: {S.ONGOING},
    S.PREPARE_ABORT: {S.ONGOING, S.PREPARE_EPOCH_FENCE},
    S.COMPLETE_COMMIT: {S.PREPARE_COMMIT},
    S.COMPLETE_ABORT: {S.PREPARE_ABORT},
    S.DEAD: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.PREPARE_EPOCH_FENCE: {S.ONGOING},
}


class IllegalTransitionError(Exception):
    """A transition Kafka's state machine does not allow: a bug, never a client error."""


def epoch_exhausted(epoch: int) -> bool:
    """Epochs stop one short of the maximum, so a producer can always be fenced."""
    return epoch >= MAX_EPOCH - 1


@dataclass(frozen=True, slots=True)
class Transition:
    """A prepared change: what is written, and the last epoch kept in memory."""

    value: TxnValue
    last_producer_epoch: int
    epoch_fence: bool = False

    @property
    def state(self) -> TxnState:
        return self.value.state


@dataclass
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    previous_producer_id: int = NO_PRODUCER_ID
    pending: TxnState | None = None
    failed_epoch_fence: bool = False  # an epoch fence's write failed: do not bump again

    @classmethod
    def restore(cls, transactional_id: str, value: TxnValue) -> "TxnMetadata":
        return cls(transactional_id, value.producer_id, value.producer_epoch, value.timeout_ms,
                   value.state, set(value.partitions), value.start_ms, value.last_update_ms,
                   previous_producer_id=value.previous_producer_id)

    @property
    def epoch_exhausted(self) -> bool:
        return epoch_exhausted(self.producer_epoch)

    # -- preparing changes ------------------------------------------------------------

    def _prepare(self, state: TxnState, producer_id: int, epoch: int, last_epoch: int,
                 timeout_ms: int, partitions, start_ms: int, update_ms: int) -> Transition:
        if self.pending is not None:
            raise IllegalTransitionError(f"{self.transactional_id}: {state.wire_name} while "
                                         f"{self.pending.wire_name} is pending")
        if self.state not in _VALID_PREVIOUS[state]:
            raise IllegalTransitionError(f"{self.transactional_id}: {self.state.wire_name} "
                                         f"cannot become {state.wire_name}")
        self.pending = state
        return Transition(TxnValue(producer_id, epoch, timeout_ms, state, frozenset(partitions),
                                   update_ms, start_ms), last_epoch)

    def prepare_epoch_bump(self, timeout_ms: int, expected_epoch: int | None,
                           now_ms: int) -> Transition | None:
        """InitProducerId on an idle id: the next epoch, or the current one for a retry
        of the call that bumped it (KIP-360); None if ``expected_epoch`` is fenced."""
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last = self.producer_epoch, self.last_producer_epoch
        else:
            return None
        return self._prepare(S.EMPTY, self.producer_id, epoch, last, timeout_ms, (), -1, now_ms)

    def prepare_new_producer_id(self, producer_id: int, timeout_ms: int, now_ms: int,
                                keep_last_epoch: bool) -> Transition:
        """InitProducerId after the epochs of the current producer id ran out."""
        last = self.producer_epoch if keep_last_epoch else NO_PRODUCER_EPOCH
        return self._prepare(S.EMPTY, producer_id, 0, last, timeout_ms, (), -1, now_ms)

    def prepare_add_partitions(self, added, now_ms: int) -> Transition:
        start = now_ms if self.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT) \
            else self.start_ms
        return self._prepare(S.ONGOING, self.producer_id, self.producer_epoch,
                             self.last_producer_epoch, self.timeout_ms,
                             self.partitions | set(added), start, now_ms)

    def fence_epoch(self) -> None:
        """Bump the epoch in memory before aborting for a new producer or a timeout, so
        the old producer is fenced at once (not again after a failed fence)."""
        if self.producer_epoch >= MAX_EPOCH:
            raise IllegalTransitionError(f"{self.transactional_id}: epoch {MAX_EPOCH} "
                                         "cannot be fenced")
        if not self.failed_epoch_fence:
            self.producer_epoch += 1
        self.last_producer_epoch = NO_PRODUCER_EPOCH
        self.pending = S.PREPARE_EPOCH_FENCE

    def prepare_end(self, commit: bool, now_ms: int, fence: bool = False) -> Transition:
        """PrepareCommit or PrepareAbort; ``fence``: the abort follows ``fence_epoch``."""
        state = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
        if fence:
            self.pending = None
        transition = self._prepare(state, self.producer_id, self.producer_epoch,
                                   self.last_producer_epoch, self.timeout_ms, self.partitions,
                                   self.start_ms, now_ms)
        return Transition(transition.value, transition.last_producer_epoch, fence)

    def prepare_complete(self, now_ms: int) -> Transition:
        state = S.COMPLETE_COMMIT if self.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
        return self._prepare(state, self.producer_id, self.producer_epoch, self.producer_epoch,
                             self.timeout_ms, (), self.start_ms, now_ms)

    def prepare_dead(self) -> Transition:
        return self._prepare(S.DEAD, self.producer_id, self.producer_epoch,
                             self.last_producer_epoch, self.timeout_ms, (), self.start_ms,
                             self.last_update_ms)

    # -- applying them ------------------------------------------------------------------

    def complete(self, transition: Transition) -> None:
        """The write of ``transition`` is replicated: it becomes the state."""
        value = transition.value
        if self.pending is not value.state:
            raise IllegalTransitionError(f"{self.transactional_id}: completing "
                                         f"{value.state.wire_name}, pending {self.pending}")
        if value.state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            self.failed_epoch_fence = False
        if value.producer_id != self.producer_id:
            self.previous_producer_id = self.producer_id
        self.producer_id = value.producer_id
        self.producer_epoch = value.producer_epoch
        self.last_producer_epoch = transition.last_producer_epoch
        self.timeout_ms = value.timeout_ms
        self.state = value.state
        self.partitions = set(value.partitions)
        self.start_ms = value.start_ms
        self.last_update_ms = value.last_update_ms
        self.pending = None

    def abandon(self, transition: Transition) -> None:
        """The write of ``transition`` failed: nothing changes (an epoch fence's bump
        stays, remembered so the next fence does not bump again)."""
        if transition.epoch_fence:
            self.failed_epoch_fence = True
        self.pending = None
