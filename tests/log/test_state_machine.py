"""Random appends (as leader, with or without an epoch, and as follower), reads, rolls,
truncations, retention, replicated high watermarks and reopens checked against an
in-memory reference model: a list of batches with their offsets and bytes, the leader
epoch entries (:class:`tests.log.test_leader_epoch.ModelCache`) and the high watermark."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from pylog.errors import OffsetOutOfRangeError
from pylog.log import Log, LogConfig
from pylog.records.header import iter_batch_headers
from tests.examples import examples
from tests.log.batches import make_batch
from tests.log.test_leader_epoch import ModelCache

CONFIG = LogConfig(segment_bytes=4000, index_interval_bytes=150, retention_ms=None, retention_bytes=5000)
BASE_TS = 1_700_000_000_000


@dataclass
class ModelBatch:
    base_offset: int
    count: int
    max_timestamp: int
    body: bytes  # everything after the baseOffset field

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.count


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="pylog-sm-"))
        self.log = Log.open(self.tmp / "t-0", CONFIG)
        self.batches: list[ModelBatch] = []
        self.start = 0
        self.end = 0
        self.tag = 0
        self.epoch = 0
        self.epochs = ModelCache()
        self.hw_limit: int | None = None

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    @property
    def high_watermark(self) -> int:
        return self.end if self.hw_limit is None else min(self.end, self.hw_limit)

    def _clamp_limit(self) -> None:
        if self.hw_limit is not None:
            self.hw_limit = min(max(self.hw_limit, self.start), self.end)

    @rule(shapes=st.lists(st.tuples(st.integers(1, 5), st.integers(0, 120), st.integers(0, 1000)),
                          min_size=1, max_size=3),
          mode=st.sampled_from(["producer", "leader", "new leader", "follower"]))
    def append(self, shapes, mode):
        if mode == "new leader":
            self.epoch += 1
        epoch = None if mode == "producer" else self.epoch
        sent, stored, offset = [], [], self.end
        for count, value_size, ts in shapes:
            raw = make_batch(count, value_size=value_size, timestamp_ms=BASE_TS + ts, tag=self.tag)
            self.tag += 1
            sent.append(raw)
            expected = bytearray(raw)  # as the log stores it: offset assigned, epoch stamped
            expected[0:8] = offset.to_bytes(8, "big")
            if epoch is not None:
                expected[12:16] = epoch.to_bytes(4, "big")
            stored.append((count, BASE_TS + ts, bytes(expected)))
            offset += count
        if mode == "follower":
            info = self.log.append_as_follower(b"".join(b for _, _, b in stored))
        else:
            info = self.log.append(b"".join(sent), leader_epoch=epoch)
        assert info.first_offset == self.end
        if epoch is not None:
            self.epochs.assign(epoch, self.end)
        for count, ts, raw in stored:
            self.batches.append(ModelBatch(self.end, count, ts, raw[8:]))
            self.end += count
        assert info.last_offset == self.end - 1
        assert info.record_count == sum(c for c, _, _ in stored)

    @rule(data=st.data())
    def set_high_watermark(self, data):
        self.hw_limit = data.draw(st.integers(self.start - 2, self.end + 2))
        self.log.set_high_watermark(self.hw_limit)
        self._clamp_limit()

    @rule(data=st.data(), max_bytes=st.integers(1, 3000), up_to_log_end=st.booleans())
    def read(self, data, max_bytes, up_to_log_end):
        offset = data.draw(st.integers(self.start - 2, self.end + 2))
        if offset < self.start or offset > self.end:
            with pytest.raises(OffsetOutOfRangeError):
                self.log.read(offset, max_bytes)
            return
        result = self.log.read(offset, max_bytes, up_to_log_end=up_to_log_end)
        assert (result.high_watermark, result.log_start_offset) == (self.high_watermark, self.start)
        visible = self.end if up_to_log_end else self.high_watermark
        if offset >= visible:
            assert result.region is None
            return
        with result.region as region:
            raw = region.read_bytes()
        got = list(iter_batch_headers(raw, verify_crc=True))
        first = next(i for i, b in enumerate(self.batches) if b.next_offset > offset)
        expected = self.batches[first:first + len(got)]
        assert [h.base_offset for _, h in got] == [b.base_offset for b in expected]
        assert got[-1][1].base_offset < visible
        for (position, header), model in zip(got, expected):
            assert raw[position + 8:position + header.size] == model.body
        assert len(got) == 1 or len(raw) <= max_bytes
        # As many whole batches as fit, unless the segment or the visible part ends first.
        following = first + len(got)
        if following < len(self.batches) and self.batches[following].base_offset < visible:
            bigger = len(raw) + len(self.batches[following].body) + 8
            segment_end = any(s.base_offset == self.batches[following].base_offset for s in self.log.segments)
            assert bigger > max_bytes or segment_end

    @rule()
    def roll(self):
        self.log.roll()

    @rule(data=st.data())
    def truncate(self, data):
        offset = data.draw(st.integers(max(0, self.start - 3), self.end + 1))
        self.log.truncate_to(offset)
        if offset >= self.end:
            return
        if offset < self.start:
            self.batches, self.start, self.end = [], offset, offset
            self.epochs.entries = []
        else:
            self.batches = [b for b in self.batches if b.next_offset <= offset]
            self.end = self.batches[-1].next_offset if self.batches else self.start
            self.epochs.truncate_from_end(self.end)
        self._clamp_limit()

    @rule()
    def retention(self):
        self.log.delete_old_segments()
        new_start = self.log.log_start_offset
        assert new_start >= self.start
        if new_start > self.start:
            assert any(b.base_offset == new_start for b in self.batches)
            self.batches = [b for b in self.batches if b.base_offset >= new_start]
            self.start = new_start
            self.epochs.truncate_from_start(new_start)
            self._clamp_limit()
        if self.hw_limit is not None:
            assert new_start <= self.hw_limit  # nothing above the replicated high watermark goes

    @rule(ts=st.integers(-10, 1010))
    def offset_for_timestamp(self, ts):
        expected = next(((b.base_offset, b.max_timestamp) for b in self.batches
                         if b.max_timestamp >= BASE_TS + ts), None)
        if expected is not None and expected[0] >= self.high_watermark:
            expected = None
        assert self.log.offset_for_timestamp(BASE_TS + ts) == expected

    @precondition(lambda self: self.end > self.start)
    @rule(clean=st.booleans())
    def reopen(self, clean):
        self.log.close()
        self.log = Log.open(self.tmp / "t-0", CONFIG, log_start_offset=self.start, had_clean_shutdown=clean)
        assert self.log.bytes_truncated == 0
        self.hw_limit = None  # the replica manager sets it again after a restart

    @invariant()
    def offsets_match(self):
        assert (self.log.log_start_offset, self.log.log_end_offset) == (self.start, self.end)
        segments = self.log.segments
        assert [s.base_offset for s in segments[1:]] == [s.next_offset for s in segments[:-1]]
        assert self.log.size_bytes == sum(len(b.body) + 8 for b in self.batches)
        assert self.log.high_watermark == self.high_watermark
        assert [(e.epoch, e.start_offset) for e in self.log.epoch_entries] == self.epochs.entries


LogMachine.TestCase.settings = settings(max_examples=examples(30), stateful_step_count=40, deadline=None,
                                        suppress_health_check=[HealthCheck.too_slow])
test_log_against_model = LogMachine.TestCase
