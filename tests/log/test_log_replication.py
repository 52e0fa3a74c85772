"""What the Log offers replication: leader epochs, follower appends, the replicated high
watermark, and keeping the epoch cache in step with truncation and retention."""

from __future__ import annotations

import pytest

from pylog.errors import BatchCrcError, OffsetOutOfRangeError
from pylog.log import EpochEntry, Log, LogConfig, UnexpectedAppendOffsetError
from pylog.log import layout
from pylog.records.header import iter_batch_headers
from tests.log.batches import make_batch
from tests.log.test_log import read_all

EPOCH_FILE = layout.LEADER_EPOCH_CHECKPOINT


def leader_log(directory, config=LogConfig(), epochs=(1, 1, 3, 3, 3, 4)) -> Log:
    """A log with one 2-record batch per epoch in ``epochs``, appended as leader."""
    log = Log.open(directory, config)
    for i, epoch in enumerate(epochs):
        log.append(make_batch(2, tag=i), leader_epoch=epoch)
    return log


def test_leader_append_stamps_the_epoch_and_records_where_it_starts(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig())
    sent = [make_batch(2), make_batch(3, tag=1), make_batch(1, tag=2), make_batch(2, tag=3)]
    log.append(sent[0], leader_epoch=1)
    log.append(sent[1] + sent[2], leader_epoch=5)
    log.append(sent[3])  # no epoch: the batch is stored as the producer sent it
    assert log.epoch_entries == [EpochEntry(1, 0), EpochEntry(5, 2)] and log.latest_epoch == 5
    assert (tmp_path / "t-0" / EPOCH_FILE).read_text() == "0\n2\n1 0\n5 2\n"
    stored = read_all(log)
    headers = list(iter_batch_headers(stored, verify_crc=True))  # the CRC still holds
    assert [h.partition_leader_epoch for _, h in headers] == [1, 5, 5, 0]
    for (pos, h), original in zip(headers, sent):  # only baseOffset and the epoch differ
        assert stored[pos + 8:pos + 12] + stored[pos + 16:pos + h.size] == original[8:12] + original[16:]
    log.close()


def test_end_offset_for_epoch_uses_the_log_end(tmp_path):
    log = leader_log(tmp_path / "t-0")
    assert log.log_end_offset == 12
    assert [log.end_offset_for_epoch(e) for e in range(6)] == [
        (0, 0), (1, 4), (1, 4), (3, 10), (4, 12), (-1, -1)]
    log.close()


def test_a_new_leader_records_its_epoch_before_writing(tmp_path):
    log = leader_log(tmp_path / "t-0", epochs=[1, 3])
    log.assign_leader_epoch(5)
    assert log.epoch_entries == [EpochEntry(1, 0), EpochEntry(3, 2), EpochEntry(5, 4)]
    assert log.end_offset_for_epoch(3) == (3, 4) and log.end_offset_for_epoch(5) == (5, 4)
    log.assign_leader_epoch(6)  # elected again before writing: epoch 5 held nothing
    log.assign_leader_epoch(2)  # older: ignored
    assert log.epoch_entries == [EpochEntry(1, 0), EpochEntry(3, 2), EpochEntry(6, 4)]
    log.append(make_batch(2), leader_epoch=6)
    assert log.end_offset_for_epoch(3) == (3, 4) and log.end_offset_for_epoch(6) == (6, 6)
    log.close()


def test_the_epoch_cache_survives_a_reopen_and_is_rebuilt_from_batch_headers(tmp_path):
    cfg = LogConfig(segment_bytes=400)
    log = leader_log(tmp_path / "t-0", cfg, epochs=[0, 0, 2, 2, 2, 2, 7, 9, 9, 9])
    expected = log.epoch_entries
    assert expected == [EpochEntry(0, 0), EpochEntry(2, 4), EpochEntry(7, 12), EpochEntry(9, 14)]
    assert len(log.segments) > 2
    log.close()
    path = tmp_path / "t-0" / EPOCH_FILE
    for damage in (None, path.unlink, lambda: path.write_text("0\n3\n1 1\n")):
        if damage is not None:
            damage()
        log = Log.open(tmp_path / "t-0", cfg, had_clean_shutdown=True)
        assert log.epoch_entries == expected
        assert path.read_text() == "0\n4\n0 0\n2 4\n7 12\n9 14\n"
        log.close()


def test_a_stale_checkpoint_is_trimmed_to_the_log_on_open(tmp_path):
    log = leader_log(tmp_path / "t-0", epochs=[1, 2])
    log.close()
    (tmp_path / "t-0" / EPOCH_FILE).write_text("0\n4\n0 0\n1 0\n2 2\n3 4\n")  # 3 starts at the end
    log = Log.open(tmp_path / "t-0", LogConfig(), log_start_offset=1)
    assert log.epoch_entries == [EpochEntry(1, 1), EpochEntry(2, 2)]
    log.close()


def test_follower_append_keeps_the_leaders_offsets_and_epochs(tmp_path):
    leader = leader_log(tmp_path / "leader-0", LogConfig(segment_bytes=500))
    # max_batch_size is below the batches' size: a follower takes what its leader accepted.
    follower = Log.open(tmp_path / "follower-0", LogConfig(segment_bytes=500, max_batch_size=100))
    woken = []
    follower.add_append_listener(lambda lg: woken.append(lg.log_end_offset))
    while follower.log_end_offset < leader.log_end_offset:
        result = leader.read(follower.log_end_offset, 250)
        with result.region as region:
            info = follower.append_as_follower(region.read_bytes())
        assert info.first_offset == woken[-1] - info.record_count
    assert read_all(follower) == read_all(leader)  # same bytes, same offsets
    assert follower.epoch_entries == leader.epoch_entries
    assert woken[-1] == 12 and info.last_offset == 11
    leader.close()
    follower.close()


@pytest.mark.parametrize("first_base, second_base", [(7, 10), (3, 6), (5, 9), (5, 7)])
def test_follower_append_refuses_a_gap_or_an_overlap_and_writes_nothing(tmp_path, first_base, second_base):
    follower = Log.open(tmp_path / "t-0", LogConfig())
    follower.append_as_follower(with_base(make_batch(5), 0))
    size = follower.size_bytes
    records = with_base(make_batch(3, tag=1), first_base) + with_base(make_batch(2, tag=2), second_base)
    with pytest.raises(UnexpectedAppendOffsetError, match="expected") as caught:
        follower.append_as_follower(records)
    assert isinstance(caught.value, OffsetOutOfRangeError)
    assert (follower.size_bytes, follower.log_end_offset) == (size, 5)
    follower.close()


def test_follower_append_validates_batches_and_ignores_nothing_else(tmp_path):
    follower = Log.open(tmp_path / "t-0", LogConfig())
    woken = []
    follower.add_append_listener(woken.append)
    info = follower.append_as_follower(b"")
    assert (info.first_offset, info.record_count, woken) == (0, 0, [])
    bad = bytearray(make_batch(2))
    bad[-1] ^= 1
    with pytest.raises(BatchCrcError):
        follower.append_as_follower(bytes(bad))
    assert follower.size_bytes == 0 and follower.epoch_entries == []
    follower.append_as_follower(with_base(make_batch(2), 0, epoch=-1))  # no epoch: cache untouched
    assert follower.epoch_entries == [] and len(woken) == 1
    follower.close()


def with_base(batch: bytes, base_offset: int, epoch: int | None = None) -> bytes:
    """``batch`` as a leader would send it: its baseOffset (and maybe epoch) set."""
    raw = bytearray(batch)
    raw[0:8] = base_offset.to_bytes(8, "big")
    if epoch is not None:
        raw[12:16] = epoch.to_bytes(4, "big", signed=True)
    return bytes(raw)


def test_the_replicated_high_watermark_limits_readers(tmp_path):
    log = leader_log(tmp_path / "t-0")
    woken = []
    log.add_append_listener(lambda lg: woken.append(lg.high_watermark))
    assert log.replicated_high_watermark is None and log.high_watermark == 12
    log.set_high_watermark(4)
    assert (log.replicated_high_watermark, log.high_watermark, woken) == (4, 4, [4])
    with log.read(0, 1 << 20).region as region:
        assert [h.base_offset for _, h in iter_batch_headers(region.read_bytes())] == [0, 2]
    assert log.read(4, 1 << 20).region is None and log.read(4, 1 << 20).high_watermark == 4
    result = log.read(4, 1 << 20, up_to_log_end=True)  # a follower's fetch
    with result.region as region:
        assert [h.base_offset for _, h in iter_batch_headers(region.read_bytes())] == [4, 6, 8, 10]
    assert result.high_watermark == 4
    assert log.offset_for_timestamp(0) == (0, 1_700_000_000_000)
    log.set_high_watermark(4)
    assert woken == [4]  # did not move: nobody woken
    log.set_high_watermark(100)
    assert log.replicated_high_watermark == 12 and woken == [4, 12]
    log.set_high_watermark(-3)
    assert log.replicated_high_watermark == 0
    log.append(make_batch(2, tag=99), leader_epoch=4)
    assert log.high_watermark == 0 and log.log_end_offset == 14
    log.close()


def test_the_limit_combines_with_expose_unflushed(tmp_path):
    log = leader_log(tmp_path / "t-0", LogConfig(expose_unflushed=False))
    log.set_high_watermark(6)
    assert log.high_watermark == 0  # nothing flushed yet
    log.flush()
    assert log.high_watermark == 6
    log.close()


def test_truncation_drops_epochs_and_clamps_the_limit(tmp_path):
    log = leader_log(tmp_path / "t-0")
    log.set_high_watermark(10)
    log.truncate_to(7)  # inside the batch 6..7: that batch goes too
    assert log.log_end_offset == 6 and log.replicated_high_watermark == 6
    assert log.epoch_entries == [EpochEntry(1, 0), EpochEntry(3, 4)]
    assert (tmp_path / "t-0" / EPOCH_FILE).read_text() == "0\n2\n1 0\n3 4\n"
    log.truncate_to(4)
    assert log.epoch_entries == [EpochEntry(1, 0)] and log.latest_epoch == 1
    log.truncate_fully_and_start_at(50)  # a follower below its leader's log start
    assert (log.log_start_offset, log.log_end_offset, log.epoch_entries) == (50, 50, [])
    assert log.replicated_high_watermark == 50
    assert log.append_as_follower(with_base(make_batch(2), 50, epoch=6)).last_offset == 51
    assert log.epoch_entries == [EpochEntry(6, 50)]
    log.close()


def test_retention_moves_the_first_epoch_and_keeps_what_is_not_replicated(tmp_path, clock):
    cfg = LogConfig(segment_bytes=300, retention_bytes=1, retention_ms=None)
    log = Log.open(tmp_path / "t-0", cfg, clock)
    for i, epoch in enumerate([1, 1, 1, 2, 2, 2, 2, 3]):
        log.append(make_batch(2, value_size=60, tag=i), leader_epoch=epoch)
    assert [s.base_offset for s in log.segments] == [0, 2, 4, 6, 8, 10, 12, 14]
    log.set_high_watermark(9)
    assert log.delete_old_segments() == 4  # the segments wholly below offset 9
    assert log.log_start_offset == 8
    assert log.epoch_entries == [EpochEntry(2, 8), EpochEntry(3, 14)]
    log.set_high_watermark(16)
    log.delete_old_segments()
    assert log.log_start_offset == 14 and log.epoch_entries == [EpochEntry(3, 14)]
    log.close()
