"""Random appends, reads, rolls, truncations, retention and reopens checked against an
in-memory reference model: a list of batches with their offsets and bytes."""

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
from tests.log.batches import make_batch

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

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    @rule(shapes=st.lists(st.tuples(st.integers(1, 5), st.integers(0, 120), st.integers(0, 1000)),
                          min_size=1, max_size=3))
    def append(self, shapes):
        built = []
        for count, value_size, ts in shapes:
            built.append((count, BASE_TS + ts, make_batch(count, value_size=value_size,
                                                          timestamp_ms=BASE_TS + ts, tag=self.tag)))
            self.tag += 1
        info = self.log.append(b"".join(b for _, _, b in built))
        assert info.first_offset == self.end
        for count, ts, raw in built:
            self.batches.append(ModelBatch(self.end, count, ts, raw[8:]))
            self.end += count
        assert info.last_offset == self.end - 1
        assert info.record_count == sum(c for c, _, _ in built)

    @rule(data=st.data(), max_bytes=st.integers(1, 3000))
    def read(self, data, max_bytes):
        offset = data.draw(st.integers(self.start - 2, self.end + 2))
        if offset < self.start or offset > self.end:
            with pytest.raises(OffsetOutOfRangeError):
                self.log.read(offset, max_bytes)
            return
        result = self.log.read(offset, max_bytes)
        assert (result.high_watermark, result.log_start_offset) == (self.end, self.start)
        if offset == self.end:
            assert result.region is None
            return
        with result.region as region:
            raw = region.read_bytes()
        got = list(iter_batch_headers(raw, verify_crc=True))
        first = next(i for i, b in enumerate(self.batches) if b.next_offset > offset)
        expected = self.batches[first:first + len(got)]
        assert [h.base_offset for _, h in got] == [b.base_offset for b in expected]
        for (position, header), model in zip(got, expected):
            assert raw[position + 8:position + header.size] == model.body
        assert len(got) == 1 or len(raw) <= max_bytes
        # As many whole batches as fit, unless the segment ends first.
        following = first + len(got)
        if following < len(self.batches) and len(got) > 0:
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
            return
        self.batches = [b for b in self.batches if b.next_offset <= offset]
        self.end = self.batches[-1].next_offset if self.batches else self.start

    @rule()
    def retention(self):
        self.log.delete_old_segments()
        new_start = self.log.log_start_offset
        assert new_start >= self.start
        if new_start > self.start:
            assert any(b.base_offset == new_start for b in self.batches)
            self.batches = [b for b in self.batches if b.base_offset >= new_start]
            self.start = new_start

    @rule(ts=st.integers(-10, 1010))
    def offset_for_timestamp(self, ts):
        expected = next(((b.base_offset, b.max_timestamp) for b in self.batches
                         if b.max_timestamp >= BASE_TS + ts), None)
        assert self.log.offset_for_timestamp(BASE_TS + ts) == expected

    @precondition(lambda self: self.end > self.start)
    @rule(clean=st.booleans())
    def reopen(self, clean):
        self.log.close()
        self.log = Log.open(self.tmp / "t-0", CONFIG, log_start_offset=self.start, had_clean_shutdown=clean)
        assert self.log.bytes_truncated == 0

    @invariant()
    def offsets_match(self):
        assert (self.log.log_start_offset, self.log.log_end_offset) == (self.start, self.end)
        segments = self.log.segments
        assert [s.base_offset for s in segments[1:]] == [s.next_offset for s in segments[:-1]]
        assert self.log.size_bytes == sum(len(b.body) + 8 for b in self.batches)


LogMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None,
                                        suppress_health_check=[HealthCheck.too_slow])
test_log_against_model = LogMachine.TestCase
