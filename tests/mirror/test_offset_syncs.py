"""Offset syncs against a reference model: a source partition with gaps (control and
aborted records), mirrored in transactions to a target whose offsets have gaps of their own
(markers, aborted attempts); a position translates to a target offset from which a reader
reads exactly the records from that position on, or to nothing while the mirror has not
copied that far."""

from __future__ import annotations

import random

import pytest

from pylog.mirror.offset_syncs import (
    OffsetSync,
    OffsetSyncStore,
    decode_syncs,
    encode_syncs,
)


def mirror_model(rng: random.Random, records: int):
    """(source offsets of the records, their target offsets, runs per transaction, the
    mirror's committed source position)."""
    source, offset = [], 0
    for _ in range(records):
        offset += 1 + (rng.random() < 0.2) * rng.randint(1, 3)    # gaps in the source
        source.append(offset)
    target, transactions, t, i = [], [], 0, 0
    while i < len(source):
        n = rng.randint(1, 12)
        chunk = source[i:i + n]
        t += rng.randint(0, 4)         # aborted attempts before this transaction
        runs, first = [], None
        for k, s in enumerate(chunk):
            target.append(t)
            if first is None or s != runs[-1][0] + runs[-1][2]:
                if runs:
                    runs[-1][3] = s
                runs.append([s, t, 0, s + 1])
            runs[-1][2] += 1
            t += 1
            first = s
        t += 1                          # the commit marker
        i += n
        position = source[i] if i < len(source) else chunk[-1] + 1
        runs[-1][3] = position
        transactions.append([OffsetSync(*r) for r in runs])
    return source, target, transactions, position


@pytest.mark.parametrize("seed", range(20))
def test_translation_matches_the_model(seed):
    rng = random.Random(seed)
    source, target, transactions, position = mirror_model(rng, rng.randint(1, 80))
    store = OffsetSyncStore()
    for runs in transactions:
        topic, partition, decoded = decode_syncs(encode_syncs("t", 3, runs))
        assert (topic, partition, decoded) == ("t", 3, runs)
        store.add("t", 3, decoded)
    store.add("t", 3, transactions[0])       # a replayed old sync changes nothing
    for c in range(0, position + 3):
        # A reader starting at the translation reads exactly the records from c on: it
        # lies after the last record before c, at or before the first record from c on
        # (what lies between is markers and aborted records, which it does not see).
        earlier = [tgt for src, tgt in zip(source, target) if src < c]
        later = [tgt for src, tgt in zip(source, target) if src >= c]
        translated = store.translate("t", 3, c)
        if not later and c > position:
            assert translated is None, c
            continue
        assert translated is not None, c
        assert (earlier[-1] if earlier else -1) < translated <= (later[0] if later
                                                                  else target[-1] + 1), c
    assert store.translate("t", 4, 0) is None


def test_a_bounded_store_keeps_the_newest_runs():
    store = OffsetSyncStore(max_runs=2)
    store.add("t", 0, [OffsetSync(0, 0, 5, 5), OffsetSync(5, 6, 5, 10), OffsetSync(10, 12, 5, 15)])
    assert store.runs("t", 0) == [OffsetSync(5, 6, 5, 10), OffsetSync(10, 12, 5, 15)]
    assert store.translate("t", 0, 0) == 6      # older than kept: the oldest kept run's start
