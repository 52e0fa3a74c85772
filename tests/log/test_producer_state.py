"""Idempotent appends in the log: duplicates, gaps and old epochs against a reference
model, and the producer state across snapshots, crashes, truncation and followers."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from pylog.errors import InvalidProducerEpochError, OutOfOrderSequenceNumberError
from pylog.log import layout
from pylog.log.config import LogConfig
from pylog.log.log import Log
from pylog.log.producer_snapshot import CorruptSnapshotError, decode_snapshot, encode_snapshot, snapshot_offsets
from pylog.log.producer_state import ProducerStateManager
from pylog.records.header import iter_batch_headers

TIMESTAMP = 1_700_000_000_000


def idempotent_batch(producer_id: int, epoch: int, base_sequence: int, count: int,
                     timestamp_ms: int = TIMESTAMP) -> bytes:
    """A producer's batch built by kafka-python's record builder."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=producer_id, producer_epoch=epoch,
                                        base_sequence=base_sequence, batch_size=1 << 30)
    for i in range(count):
        builder.append(i, timestamp=timestamp_ms, key=None, value=f"{base_sequence}+{i}".encode(), headers=[])
    return bytes(builder.build())


def plain_batch(count: int = 1) -> bytes:
    return idempotent_batch(-1, -1, -1, count)


def log_headers(partition_log: Log) -> list[tuple[int, int, int, int, int]]:
    """(base offset, producer id, epoch, base sequence, last offset delta) of every batch."""
    found, offset = [], partition_log.log_start_offset
    while offset < partition_log.log_end_offset:  # a read returns one segment's batches
        with partition_log.read(offset, 1 << 30, up_to_log_end=True).region as region:
            data = region.read_bytes()
        for _, h in iter_batch_headers(data):
            found.append((h.base_offset, h.producer_id, h.producer_epoch, h.base_sequence,
                          h.last_offset_delta))
            offset = h.next_offset
    return found


# -- reference model ------------------------------------------------------------------------

class ModelProducer:
    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.batches: list[tuple[int, int, int]] = []  # (first seq, last seq, first offset)


def model_append(model: dict, end: int, pid: int, epoch: int, seq: int, count: int):
    """What Kafka answers: ("dup", offset), ("error", class) or ("ok", offset)."""
    producer = model.get(pid)
    last = (seq + count - 1) % 2**31
    if producer is not None and producer.epoch == epoch:
        for first_seq, last_seq, offset in producer.batches:
            if (first_seq, last_seq) == (seq, last):
                return "dup", offset
    if producer is not None:
        if epoch < producer.epoch:
            return "error", InvalidProducerEpochError
        if epoch > producer.epoch and seq != 0:
            return "error", OutOfOrderSequenceNumberError
        if epoch == producer.epoch and seq != (producer.batches[-1][1] + 1) % 2**31:
            return "error", OutOfOrderSequenceNumberError
    if producer is None or producer.epoch != epoch:
        producer = model[pid] = ModelProducer(epoch)
    producer.batches = (producer.batches + [(seq, last, end)])[-5:]
    return "ok", end


@st.composite
def operations(draw):
    """A batch per step, relative to what the producer did so far: in order, a repeat of
    one of its recent batches, a gap, an old or a new epoch, a plain batch."""
    kinds = st.sampled_from(["next", "next", "next", "dup", "dup", "gap", "old_epoch",
                             "new_epoch", "new_epoch_bad", "plain", "wrap"])
    return [(draw(kinds), draw(st.integers(1, 2)), draw(st.integers(1, 4)), draw(st.integers(0, 7)))
            for _ in range(draw(st.integers(1, 40)))]


def choose_batch(kind: str, sent: dict, pid: int, count: int, pick: int):
    """(epoch, seq, count) of the next batch of ``pid`` given what it ``sent``."""
    history = sent.setdefault(pid, [])
    epoch = history[-1][0] if history else 0
    next_seq = (history[-1][1] + history[-1][2]) % 2**31 if history else 0
    if kind == "dup" and history:
        return history[-1 - pick % min(len(history), 7)]  # sometimes older than the five kept
    if kind == "gap":
        return epoch, (next_seq + 1 + pick) % 2**31, count
    if kind == "old_epoch" and epoch > 0:
        return epoch - 1, next_seq, count
    if kind == "new_epoch":
        return epoch + 1, 0, count
    if kind == "new_epoch_bad":
        return epoch + 1, 1 + pick, count
    if kind == "wrap" and not history:
        return epoch, 2**31 - 1 - pick % 3, count  # an unknown producer: any sequence
    return epoch, next_seq, count


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations())
def test_appends_match_the_reference_model(ops) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        partition_log = Log.open(Path(tmp) / "t-0", LogConfig(segment_bytes=400))
        model: dict = {}
        sent: dict = {}
        written = []
        for kind, pid, count, pick in ops:
            end = partition_log.log_end_offset
            if kind == "plain":
                partition_log.append(plain_batch(count))
                written.append((end, -1, -1, -1, count - 1))
                continue
            epoch, seq, count = choose_batch(kind, sent, pid, count, pick)
            expected = model_append(model, end, pid, epoch, seq, count)
            batch = idempotent_batch(pid, epoch, seq, count)
            if expected[0] == "error":
                with pytest.raises(expected[1]):
                    partition_log.append(batch)
                continue
            info = partition_log.append(batch)
            assert info.first_offset == expected[1]
            if expected[0] == "ok":
                assert info.record_count == count
                written.append((end, pid, epoch, seq, count - 1))
                sent[pid].append((epoch, seq, count))
            else:
                assert info.record_count == 0
        assert log_headers(partition_log) == written
        # Whatever the crash point, the state rebuilt from snapshots plus headers agrees.
        reopened = Log.open(Path(tmp) / "t-0", LogConfig(segment_bytes=400))
        for pid in model:
            assert reopened.producer_state(pid) == partition_log.producer_state(pid)
        partition_log.close()
        reopened.close()


# -- durability -----------------------------------------------------------------------------

def test_a_duplicate_is_answered_with_its_first_offsets(tmp_path: Path) -> None:
    partition_log = Log.open(tmp_path / "t-0", LogConfig())
    partition_log.append(plain_batch(2))
    first = partition_log.append(idempotent_batch(5, 0, 0, 3))
    partition_log.append(idempotent_batch(5, 0, 3, 1))
    again = partition_log.append(idempotent_batch(5, 0, 0, 3))
    assert (again.first_offset, again.last_offset) == (first.first_offset, first.last_offset) == (2, 4)
    assert [h[0] for h in log_headers(partition_log)] == [0, 2, 5]


def test_state_survives_a_clean_close_through_a_snapshot_at_the_log_end(tmp_path: Path) -> None:
    partition_log = Log.open(tmp_path / "t-0", LogConfig())
    partition_log.append(idempotent_batch(9, 2, 0, 4))
    partition_log.close()
    assert snapshot_offsets(tmp_path / "t-0") == [4]
    reopened = Log.open(tmp_path / "t-0", LogConfig(), had_clean_shutdown=True)
    assert reopened.append(idempotent_batch(9, 2, 0, 4)).first_offset == 0
    with pytest.raises(InvalidProducerEpochError):
        reopened.append(idempotent_batch(9, 1, 4, 1))
    assert reopened.log_end_offset == 4


def test_a_crash_rebuilds_from_the_roll_snapshot_and_the_headers_after_it(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    partition_log = Log.open(directory, LogConfig(segment_bytes=300))
    for seq in range(0, 12, 2):
        partition_log.append(idempotent_batch(3, 0, seq, 2))
    assert len(partition_log.segments) > 1
    assert snapshot_offsets(directory) == [s.base_offset for s in partition_log.segments[1:]]
    last = partition_log.segments[-1]
    # The crash tears the last batch: recovery cuts it, and the state must forget it.
    size = os.path.getsize(layout.log_file(directory, last.base_offset))
    os.truncate(layout.log_file(directory, last.base_offset), size - 5)
    reopened = Log.open(directory, LogConfig(segment_bytes=300), recovery_point=0)
    assert reopened.log_end_offset == 10
    assert reopened.append(idempotent_batch(3, 0, 8, 2)).first_offset == 8  # duplicate
    assert reopened.append(idempotent_batch(3, 0, 10, 2)).first_offset == 10  # written again
    assert reopened.log_end_offset == 12


def test_a_corrupt_snapshot_is_deleted_and_the_log_scanned_instead(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    partition_log = Log.open(directory, LogConfig())
    partition_log.append(idempotent_batch(4, 0, 0, 3))
    partition_log.close()
    snapshot = layout.snapshot_file(directory, 3)
    snapshot.write_bytes(snapshot.read_bytes()[:-1] + b"\xff")
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(snapshot.read_bytes())
    reopened = Log.open(directory, LogConfig(), had_clean_shutdown=True)
    assert not snapshot.exists()
    assert reopened.append(idempotent_batch(4, 0, 0, 3)).record_count == 0
    with pytest.raises(OutOfOrderSequenceNumberError):
        reopened.append(idempotent_batch(4, 0, 5, 1))


def test_snapshot_bytes_round_trip() -> None:
    state = ProducerStateManager()
    from pylog.records.header import read_batch_header
    for seq in range(0, 14, 2):
        state.apply(read_batch_header(idempotent_batch(77, 3, seq, 2)), seq * 10)
    copy = decode_snapshot(encode_snapshot(state))
    assert copy.producers == state.producers
    assert len(copy.producers[77].batches) == 5


def test_truncation_forgets_the_batches_it_removes(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    partition_log = Log.open(directory, LogConfig(segment_bytes=300))
    for seq in range(0, 12, 2):
        partition_log.append(idempotent_batch(6, 0, seq, 2))
    partition_log.truncate_to(4)
    assert all(offset <= 4 for offset in snapshot_offsets(directory))
    assert partition_log.append(idempotent_batch(6, 0, 2, 2)).record_count == 0
    info = partition_log.append(idempotent_batch(6, 0, 4, 2))
    assert (info.first_offset, info.record_count) == (4, 2)
    partition_log.truncate_fully_and_start_at(100)
    assert snapshot_offsets(directory) == []
    assert partition_log.append(idempotent_batch(6, 0, 77, 1)).first_offset == 100  # unknown again


def test_a_follower_builds_the_leaders_state(tmp_path: Path) -> None:
    leader = Log.open(tmp_path / "leader" / "t-0", LogConfig())
    follower = Log.open(tmp_path / "follower" / "t-0", LogConfig())
    leader.append(plain_batch(1))
    leader.append(idempotent_batch(8, 1, 0, 2), leader_epoch=3)
    leader.append(idempotent_batch(8, 1, 2, 2), leader_epoch=3)
    with leader.read(0, 1 << 20, up_to_log_end=True).region as region:
        follower.append_as_follower(region.read_bytes())
    assert follower.producer_state(8) == leader.producer_state(8)
    assert follower.append(idempotent_batch(8, 1, 0, 2)).first_offset == 1
    with pytest.raises(OutOfOrderSequenceNumberError):
        follower.append(idempotent_batch(8, 1, 6, 1))


def test_idle_producers_expire(tmp_path: Path) -> None:
    partition_log = Log.open(tmp_path / "t-0", LogConfig())
    partition_log.append(idempotent_batch(1, 0, 0, 1, timestamp_ms=TIMESTAMP))
    partition_log.append(idempotent_batch(2, 0, 0, 1, timestamp_ms=TIMESTAMP + 5000))
    assert partition_log.expire_producers(TIMESTAMP + 10_000, expiration_ms=8000) == 1
    assert partition_log.producer_state(1) is None
    assert partition_log.producer_state(2) is not None
    # Forgotten, producer 1 may continue at any sequence (Kafka's rule for unknown ids).
    assert partition_log.append(idempotent_batch(1, 0, 42, 1)).record_count == 1
