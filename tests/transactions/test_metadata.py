"""The transaction state machine (pure): Kafka's legal transitions, epoch bumps, fencing,
and what a failed write leaves behind."""

import pytest

from pylog.transactions.metadata import (
    MAX_EPOCH, IllegalTransitionError, TxnMetadata, epoch_exhausted)
from pylog.transactions.records import TxnState as S
from pylog.types import TopicPartition

TP = TopicPartition("t", 0)


def written(txn: TxnMetadata, transition) -> TxnMetadata:
    txn.complete(transition)
    return txn


def test_a_transaction_goes_round_and_keeps_its_epoch():
    txn = TxnMetadata("a", 7, -1, 1000)
    written(txn, txn.prepare_epoch_bump(1000, None, now_ms=1))
    assert (txn.producer_epoch, txn.state) == (0, S.EMPTY)
    written(txn, txn.prepare_add_partitions({TP}, now_ms=5))
    assert (txn.state, txn.partitions, txn.start_ms) == (S.ONGOING, {TP}, 5)
    written(txn, txn.prepare_end(commit=True, now_ms=6))
    assert txn.state is S.PREPARE_COMMIT and txn.partitions == {TP}
    written(txn, txn.prepare_complete(now_ms=7))
    assert (txn.state, txn.partitions, txn.producer_epoch) == (S.COMPLETE_COMMIT, set(), 0)


def test_illegal_transitions_and_a_second_pending_change_raise():
    txn = TxnMetadata("a", 7, 0, 1000)
    with pytest.raises(IllegalTransitionError):
        txn.prepare_end(commit=True, now_ms=1)  # Empty cannot become PrepareCommit
    txn.prepare_add_partitions({TP}, now_ms=1)
    with pytest.raises(IllegalTransitionError, match="pending"):
        txn.prepare_add_partitions({TP}, now_ms=2)


def test_kip_360_bumps_once_and_answers_a_retry_with_the_same_epoch():
    txn = TxnMetadata("a", 7, 3, 1000)
    written(txn, txn.prepare_epoch_bump(1000, expected_epoch=3, now_ms=1))
    assert (txn.producer_epoch, txn.last_producer_epoch) == (4, 3)
    written(txn, txn.prepare_epoch_bump(1000, expected_epoch=3, now_ms=2))  # the retry
    assert txn.producer_epoch == 4
    assert txn.prepare_epoch_bump(1000, expected_epoch=1, now_ms=3) is None  # fenced


def test_fencing_bumps_the_epoch_once_even_if_its_write_fails():
    txn = TxnMetadata("a", 7, 2, 1000, state=S.ONGOING, partitions={TP})
    txn.fence_epoch()
    transition = txn.prepare_end(commit=False, now_ms=1, fence=True)
    assert txn.producer_epoch == 3 and transition.value.producer_epoch == 3
    txn.abandon(transition)  # the write failed: the bump stays, remembered
    txn.fence_epoch()
    assert txn.producer_epoch == 3
    written(txn, txn.prepare_end(commit=False, now_ms=2, fence=True))
    written(txn, txn.prepare_complete(now_ms=3))
    assert (txn.state, txn.failed_epoch_fence) == (S.COMPLETE_ABORT, False)


def test_an_exhausted_epoch_gets_a_new_producer_id():
    txn = TxnMetadata("a", 7, MAX_EPOCH - 1, 1000, state=S.COMPLETE_COMMIT)
    assert txn.epoch_exhausted and not epoch_exhausted(MAX_EPOCH - 2)
    written(txn, txn.prepare_new_producer_id(8, 1000, now_ms=1, keep_last_epoch=False))
    assert (txn.producer_id, txn.producer_epoch, txn.previous_producer_id) == (8, 0, 7)
