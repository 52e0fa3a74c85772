"""Transactions in a real Log on disk: the last stable offset with open, committed and
aborted transactions and the high watermark, the aborted-transaction index (.txnindex)
across a clean reopen, a crash, truncation and retention, the cleaner dropping aborted
records, and a model test of the LSO and the aborted list."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch

from pylog.errors import (
    InvalidProducerEpochError, InvalidTxnStateError, OutOfOrderSequenceNumberError,
    TransactionCoordinatorFencedError)
from pylog.log import Log, LogConfig, layout
from pylog.log.cleaner import Cleaner
from pylog.log.producer_state import SENTINEL
from pylog.log.transaction_index import ENTRY_SIZE, AbortedTxn, decode_entries
from pylog.records.batch import build_batch, decode_batch
from pylog.records.control import TxnMarker, build_marker_batch, read_marker
from pylog.records.header import iter_batch_headers, read_batch_header

from tests.examples import examples
from tests.log.conftest import ManualClock


class Producer:
    """A transactional producer writing to one log: its id, epoch and next sequence."""

    def __init__(self, log: Log, producer_id: int, clock: ManualClock, epoch: int = 0) -> None:
        self.log, self.producer_id, self.clock, self.epoch, self.sequence = log, producer_id, clock, epoch, 0

    def send(self, *records: tuple[bytes | None, bytes]) -> int:
        batch = build_batch([(k, v, (), self.clock.ms) for k, v in records],
                            producer_id=self.producer_id, producer_epoch=self.epoch,
                            base_sequence=self.sequence, is_transactional=True)
        self.sequence += len(records)
        return self.log.append(batch).first_offset

    def end(self, commit: bool, coordinator_epoch: int = 0) -> int:
        return self.log.append_marker(self.producer_id, self.epoch, commit, coordinator_epoch).first_offset


def plain(log: Log, clock: ManualClock, *records: tuple[bytes | None, bytes]) -> int:
    return log.append(build_batch([(k, v, (), clock.ms) for k, v in records])).first_offset


def committed_values(log: Log) -> list[bytes]:
    """What a read_committed consumer gets: records below the LSO, minus those of aborted
    transactions (a producer's transactional records from the transaction's first offset
    up to its marker)."""
    values, offset = [], log.log_start_offset
    while True:
        read = log.read(offset, 1 << 20, committed=True)
        if read.region is None:
            return values
        with read.region as region:
            data = region.read_bytes()
        aborted = read.aborted_transactions
        for position, header in iter_batch_headers(data):
            offset = header.next_offset
            if header.is_control:
                continue
            if header.is_transactional and any(
                    t.producer_id == header.producer_id and t.first_offset <= header.base_offset <= t.last_offset
                    for t in aborted):
                continue
            values += [r.value for r in decode_batch(data, position).records]


def test_the_last_stable_offset_follows_open_and_ended_transactions(tmp_path, clock):
    log = Log.open(tmp_path / "t-0", LogConfig(), clock)
    a, b = Producer(log, 1, clock), Producer(log, 2, clock)
    plain(log, clock, (None, b"p0"))
    assert log.last_stable_offset == log.high_watermark == 1
    first_a = a.send((None, b"a1"), (None, b"a2"))
    first_b = b.send((None, b"b1"))
    plain(log, clock, (None, b"p1"))
    assert log.last_stable_offset == first_a and log.high_watermark == 5
    assert log.open_transactions() == {first_a: 1, first_b: 2}
    a.end(commit=True)
    assert log.last_stable_offset == first_b
    abort_offset = b.end(commit=False)
    assert log.last_stable_offset == log.high_watermark == 7
    assert log.aborted_transactions(0, 7) == [AbortedTxn(2, first_b, abort_offset, abort_offset + 1)]
    assert log.aborted_transactions(abort_offset + 1, 7) == []
    assert committed_values(log) == [b"p0", b"a1", b"a2", b"p1"]
    log.close()


def test_a_transaction_stays_unstable_until_the_high_watermark_passes_its_marker(tmp_path, clock):
    log = Log.open(tmp_path / "t-0", LogConfig(), clock)
    log.set_high_watermark(0)
    a = Producer(log, 1, clock)
    plain(log, clock, (None, b"p0"))
    a.send((None, b"a1"))
    assert log.last_stable_offset == 0  # capped by the high watermark
    log.set_high_watermark(2)
    assert log.last_stable_offset == 1  # the open transaction
    marker = a.end(commit=False)
    log.set_high_watermark(marker)  # the marker is not replicated yet
    assert log.last_stable_offset == 1
    read = log.read(0, 1 << 20, committed=True)
    with read.region as region:
        assert [h.base_offset for _, h in iter_batch_headers(region.read_bytes())] == [0]
    log.set_high_watermark(marker + 1)
    assert log.last_stable_offset == marker + 1
    log.close()


def test_markers_are_fenced(tmp_path, clock):
    log = Log.open(tmp_path / "t-0", LogConfig(), clock)
    a = Producer(log, 1, clock)
    a.send((None, b"x"))
    log.append_marker(1, 2, False, 5)  # the coordinator bumped the epoch: the producer is fenced
    with pytest.raises(TransactionCoordinatorFencedError):
        log.append_marker(1, 2, True, 4)
    with pytest.raises(InvalidProducerEpochError):
        log.append_marker(1, 1, True, 5)
    with pytest.raises(InvalidProducerEpochError):
        a.send((None, b"late"))
    assert log.log_end_offset == 2
    log.close()


def _three_segments(directory: Path, clock: ManualClock) -> tuple[Log, list[AbortedTxn], int]:
    """A log whose aborted transactions span segments, with one transaction left open."""
    log = Log.open(directory, LogConfig(segment_bytes=300, index_interval_bytes=64), clock)
    a, b, c = Producer(log, 1, clock), Producer(log, 2, clock), Producer(log, 3, clock)
    first_a = a.send((None, b"a" * 40))
    first_b = b.send((None, b"b" * 40))
    for i in range(4):
        plain(log, clock, (None, b"p" * 40))
    abort_a = a.end(commit=False)
    b.end(commit=True)
    first_b2 = b.send((None, b"b" * 40))
    abort_b2 = b.end(commit=False)
    open_first = c.send((None, b"c" * 40))
    plain(log, clock, (None, b"after"))
    assert len(log.segments) >= 3
    expected = [AbortedTxn(1, first_a, abort_a, first_b), AbortedTxn(2, first_b2, abort_b2, abort_b2 + 1)]
    return log, expected, open_first


def test_the_aborted_index_survives_a_clean_reopen_and_a_crash(tmp_path, clock):
    directory = tmp_path / "t-0"
    log, expected, open_first = _three_segments(directory, clock)
    end = log.log_end_offset
    assert log.aborted_transactions(0, end) == expected
    assert log.last_stable_offset == open_first
    files = sorted(directory.glob("*.txnindex"))
    assert sum(p.stat().st_size for p in files) == 2 * ENTRY_SIZE
    assert [e for p in files for e in decode_entries(p.read_bytes())] == expected
    crashed = tmp_path / "crashed"
    shutil.copytree(directory, crashed)  # the files as a crash would leave them
    log.close()

    reopened = Log.open(directory, log.config, clock, had_clean_shutdown=True, recovery_point=end)
    assert reopened.aborted_transactions(0, end) == expected
    assert reopened.last_stable_offset == open_first
    reopened.close()

    for lost in list(crashed.glob("*.txnindex")) + list(crashed.glob("*.snapshot")):
        lost.unlink()  # not yet written when the broker died
    recovered = Log.open(crashed, log.config, clock)
    assert recovered.aborted_transactions(0, end) == expected
    assert recovered.last_stable_offset == open_first
    assert recovered.open_transactions() == {open_first: 3}
    recovered.close()


def test_the_search_starts_at_the_fetch_offset_segment(tmp_path, clock):
    log, expected, _ = _three_segments(tmp_path / "t-0", clock)
    # A read from past the first abort reports only the second.
    second = expected[1]
    assert log.aborted_transactions(expected[0].last_offset + 1, log.log_end_offset) == [second]
    read = log.read(second.first_offset, 1 << 20, committed=True)
    read.region.close()
    assert read.aborted_transactions == [second]
    log.close()


def test_truncation_trims_the_index_and_reopens_the_transaction(tmp_path, clock):
    log, expected, _ = _three_segments(tmp_path / "t-0", clock)
    last = expected[1]
    log.truncate_to(last.last_offset)  # the second ABORT marker goes
    assert log.aborted_transactions(0, log.log_end_offset) == [expected[0]]
    assert log.open_transactions() == {last.first_offset: 2}
    assert log.last_stable_offset == last.first_offset
    log.truncate_to(expected[0].first_offset + 1)
    assert log.aborted_transactions(0, log.log_end_offset) == []
    assert not list((tmp_path / "t-0").glob("*.txnindex"))
    log.close()


def test_retention_deletes_the_index_with_its_segment(tmp_path, clock):
    directory = tmp_path / "t-0"
    log, expected, _ = _three_segments(directory, clock)
    first_index = layout.txn_index_file(directory, log.segments[0].base_offset)
    first_index_entries = [e for e in expected if e.last_offset < log.segments[1].base_offset]
    assert first_index.exists() == bool(first_index_entries)
    log.update_config(LogConfig(segment_bytes=300, retention_ms=1000))
    clock.advance(ms=60_000)
    assert log.delete_old_segments() > 0
    assert not first_index.exists()
    remaining = {p.name for p in directory.glob("*.txnindex")}
    assert remaining <= {layout.segment_file_name(s.base_offset, layout.TXN_INDEX_SUFFIX)
                         for s in log.segments}
    log.close()


def test_the_cleaner_drops_aborted_records_and_keeps_the_markers(tmp_path, clock):
    config = LogConfig(segment_bytes=400, cleanup_policy="compact", retention_ms=None,
                       index_interval_bytes=100)
    log = Log.open(tmp_path / "t-0", config, clock)
    a, b = Producer(log, 1, clock), Producer(log, 2, clock)
    a.send((b"k1", b"committed"))
    a.end(commit=True)
    b.send((b"k1", b"aborted"), (b"k2", b"aborted"))
    b.end(commit=False)
    plain(log, clock, (b"k3", b"plain"))
    open_first = Producer(log, 3, clock).send((b"k1", b"open"))
    plain(log, clock, (b"k4", b"later"))
    log.roll()
    before = committed_values(log)
    end = Cleaner(dedupe_buffer_bytes=1 << 20).clean(log, 0, clock.ms).end
    assert end <= open_first  # nothing at or above the last stable offset is cleaned
    data = b"".join(_read_region(log, s.base_offset) for s in log.segments)
    headers = [h for _, h in iter_batch_headers(data)]
    values = [r.value for p, h in iter_batch_headers(data) if not h.is_control
              for r in decode_batch(data, p).records]
    assert b"aborted" not in values and b"committed" in values
    assert sum(h.is_control for h in headers) == 2
    assert committed_values(log) == before
    assert len(log.aborted_transactions(0, log.log_end_offset)) == 1  # the index went along
    log.close()


def _read_region(log: Log, offset: int) -> bytes:
    read = log.read(offset, 1 << 20, up_to_log_end=True)
    if read.region is None:
        return b""
    with read.region as region:
        return region.read_bytes()


# -- the model test ---------------------------------------------------------------------------

operation = st.one_of(
    st.tuples(st.just("plain"), st.just(0)),
    st.tuples(st.just("send"), st.integers(1, 3)),
    st.tuples(st.just("commit"), st.integers(1, 3)),
    st.tuples(st.just("abort"), st.integers(1, 3)),
    st.tuples(st.just("replicate"), st.integers(0, 3)),
    st.tuples(st.just("reopen"), st.just(0)),
)


@settings(max_examples=examples(30), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(operation, min_size=1, max_size=30))
def test_the_lso_and_the_aborted_list_match_a_model(tmp_path_factory, operations):
    clock = ManualClock()
    directory = tmp_path_factory.mktemp("model") / "t-0"
    config = LogConfig(segment_bytes=400)
    log = Log.open(directory, config, clock)
    log.set_high_watermark(0)
    producers = {p: Producer(log, p, clock) for p in (1, 2, 3)}
    open_txns: dict[int, int] = {}  # producer -> first offset
    ended: list[tuple[int, int]] = []  # (first, marker) of completed transactions
    aborted: list[AbortedTxn] = []
    hw = 0
    for op, arg in operations:
        end = log.log_end_offset
        if op == "plain":
            plain(log, clock, (None, b"p"))
        elif op == "send":
            open_txns.setdefault(arg, end)
            producers[arg].send((None, b"t"))
        elif op in ("commit", "abort"):
            first = open_txns.pop(arg, end)
            producers[arg].end(commit=op == "commit")
            ended.append((first, end))
            if op == "abort":
                aborted.append(AbortedTxn(arg, first, end, min(open_txns.values(), default=end + 1)))
        elif op == "replicate":
            hw = min(log.log_end_offset, hw + arg)
            log.set_high_watermark(hw)
        else:
            log.close()
            log = Log.open(directory, config, clock, had_clean_shutdown=True,
                           recovery_point=end)
            log.set_high_watermark(hw)
            for producer in producers.values():
                producer.log = log
        unstable = list(open_txns.values()) + [first for first, marker in ended if marker >= hw]
        assert log.last_stable_offset == min([hw] + unstable)
        assert log.aborted_transactions(0, log.log_end_offset + 1) == aborted
    log.close()


def test_a_follower_builds_the_same_transaction_state(tmp_path, clock):
    leader, expected, open_first = _three_segments(tmp_path / "leader", clock)
    follower = Log.open(tmp_path / "follower", leader.config, clock)
    offset = 0
    while offset < leader.log_end_offset:  # as the replica fetcher copies the leader's batches
        data = _read_region(leader, offset)
        follower.append_as_follower(data)
        offset = follower.log_end_offset
    end = leader.log_end_offset
    assert follower.aborted_transactions(0, end) == leader.aborted_transactions(0, end) == expected
    assert follower.open_transactions() == leader.open_transactions() == {open_first: 3}
    assert follower.last_stable_offset == leader.last_stable_offset == open_first
    follower.truncate_to(expected[1].last_offset)  # the new leader's log ends before the marker
    assert follower.aborted_transactions(0, end) == expected[:1]
    leader.close()
    follower.close()


def test_a_segment_rebuilt_after_a_clean_shutdown_gets_its_aborted_entries_back(tmp_path, clock):
    directory = tmp_path / "t-0"
    log, expected, open_first = _three_segments(directory, clock)
    end = log.log_end_offset
    bases = [s.base_offset for s in log.segments]
    log.close()
    holding_first_abort = max(b for b in bases if b <= expected[0].last_offset)
    layout.index_file(directory, holding_first_abort).unlink()  # forces that segment's recovery
    layout.txn_index_file(directory, holding_first_abort).unlink()
    reopened = Log.open(directory, log.config, clock, had_clean_shutdown=True, recovery_point=end)
    assert reopened.aborted_transactions(0, end) == expected
    assert reopened.last_stable_offset == open_first
    reopened.close()


def test_entry_and_marker_bytes():
    entry = AbortedTxn(producer_id=7, first_offset=10, last_offset=12, last_stable_offset=13)
    assert entry.encode() == (b"\x00\x00" + (7).to_bytes(8, "big") + (10).to_bytes(8, "big")
                              + (12).to_bytes(8, "big") + (13).to_bytes(8, "big"))
    assert decode_entries(entry.encode() * 2) == [entry, entry]
    batch = build_marker_batch(7, 3, TxnMarker(commit=False, coordinator_epoch=5), 1_700_000_000_000)
    theirs = DefaultRecordBatch(bytearray(batch))  # kafka-python's reading of it
    assert theirs.validate_crc() and theirs.is_control_batch and theirs.is_transactional
    assert (theirs.producer_id, theirs.producer_epoch, theirs.base_sequence) == (7, 3, -1)
    (record,) = list(theirs)
    assert record.key == b"\x00\x00\x00\x00"  # version 0, ABORT
    assert record.value == b"\x00\x00\x00\x00\x00\x05"  # version 0, coordinator epoch 5
    assert read_marker(batch, 0, read_batch_header(batch)) == TxnMarker(False, 5)


# -- verification guards (KIP-890 part 1) ------------------------------------------------

def txn_batch(clock: ManualClock, producer_id: int, epoch: int, sequence: int,
              transactional: bool = True) -> bytes:
    return build_batch([(None, b"v", (), clock.ms)], producer_id=producer_id,
                       producer_epoch=epoch, base_sequence=sequence,
                       is_transactional=transactional)


def test_a_transaction_opens_only_with_its_producers_current_guard(tmp_path, clock):
    log = Log.open(tmp_path / "t-0", LogConfig(), clock)
    with pytest.raises(InvalidTxnStateError):  # nothing verified
        log.append(txn_batch(clock, 7, 0, 0), allow_transactional=SENTINEL)
    guard = log.start_verification(7, 0, 0)
    assert log.start_verification(7, 0, 0) is guard  # a verification under way keeps it
    # A marker meanwhile (the transaction ended while the batch was on its way) drops it.
    log.append_marker(7, 0, commit=True, coordinator_epoch=0)
    with pytest.raises(InvalidTxnStateError):
        log.append(txn_batch(clock, 7, 0, 0), allow_transactional=guard)
    assert log.open_transactions() == {}

    guard = log.start_verification(7, 0, 0)
    # Another batch of the producer past the sequence being verified waits for it.
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append(txn_batch(clock, 7, 0, 1, transactional=False))
    first = log.append(txn_batch(clock, 7, 0, 0), allow_transactional=guard).first_offset
    assert log.open_transactions() == {first: 7}
    # With the transaction open nothing is left to verify; the next batches continue it.
    assert log.start_verification(7, 0, 1) is None
    log.append(txn_batch(clock, 7, 0, 1), allow_transactional=SENTINEL)
    log.append_marker(7, 0, commit=False, coordinator_epoch=0)
    # Transactional appends without verification (True: the coordinators' own batches)
    # open transactions as before.
    log.append(txn_batch(clock, 7, 0, 2), allow_transactional=True)
    assert list(log.open_transactions().values()) == [7]
    log.close()
