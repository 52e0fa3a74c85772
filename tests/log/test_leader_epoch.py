"""LeaderEpochCache against a reference model; its checkpoint file on disk."""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pylog.log import EpochEntry, LeaderEpochCache
from pylog.log.leader_epoch import epochs_from_headers, read_epoch_checkpoint
from pylog.records.header import read_batch_header
from tests.examples import examples
from tests.log.batches import make_batch


class ModelCache:
    """The cache's rules written out plainly over a list of (epoch, start offset)."""

    def __init__(self) -> None:
        self.entries: list[tuple[int, int]] = []

    def assign(self, epoch: int, start: int) -> str:
        """"added", "ignored" or "refused" (ValueError expected)."""
        if self.entries and epoch <= self.entries[-1][0]:
            return "ignored"
        if self.entries and start < self.entries[-1][1]:
            return "refused"
        if self.entries and start == self.entries[-1][1]:
            self.entries.pop()
        self.entries.append((epoch, start))
        return "added"

    def truncate_from_end(self, end: int) -> None:
        self.entries = [e for e in self.entries if e[1] < end]

    def truncate_from_start(self, start: int) -> None:
        below = [e for e in self.entries if e[1] <= start]
        if below:
            self.entries = [(below[-1][0], start)] + [e for e in self.entries if e[1] > start]

    def end_offset_for(self, requested: int, log_end: int) -> tuple[int, int]:
        # Kafka's LeaderEpochFileCache.endOffsetFor, as floor / higher lookups.
        if requested == -1 or not self.entries:
            return -1, -1
        if requested == self.entries[-1][0]:
            return requested, log_end
        higher = [e for e in self.entries if e[0] > requested]
        if not higher:
            return -1, -1
        floor = [e for e in self.entries if e[0] <= requested]
        return (floor[-1][0] if floor else requested), higher[0][1]


operations = st.lists(st.one_of(
    st.tuples(st.just("assign"), st.integers(0, 12), st.integers(0, 60)),
    st.tuples(st.just("truncate_from_end"), st.integers(0, 70)),
    st.tuples(st.just("truncate_from_start"), st.integers(0, 70)),
    st.tuples(st.just("clear")),
), max_size=30)


@settings(max_examples=examples(150), deadline=None)
@given(ops=operations)
def test_cache_against_the_reference_model(ops):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "leader-epoch-checkpoint"
        cache, model = LeaderEpochCache(path), ModelCache()
        for name, *args in ops:
            if name == "assign":
                expected = model.assign(*args)
                if expected == "refused":
                    with pytest.raises(ValueError, match="does not follow"):
                        cache.assign(*args)
                else:
                    assert cache.assign(*args) == (expected == "added")
            elif name == "clear":
                cache.clear()
                model.entries = []
            else:
                getattr(cache, name)(*args)
                getattr(model, name)(*args)
            assert [(e.epoch, e.start_offset) for e in cache.entries] == model.entries
            assert cache.latest_epoch == (model.entries[-1][0] if model.entries else -1)
            log_end = max([70] + [start for _, start in model.entries])
            for requested in range(-1, 15):
                assert cache.end_offset_for(requested, log_end) == model.end_offset_for(requested, log_end)
            if path.exists():
                assert LeaderEpochCache.load(path).entries == cache.entries


def test_end_offset_for_follows_kafka():
    cache = LeaderEpochCache(Path("/nonexistent/cp"), [EpochEntry(2, 10), EpochEntry(5, 40), EpochEntry(7, 90)])
    assert cache.end_offset_for(7, 120) == (7, 120)  # the latest epoch ends at the log end
    assert cache.end_offset_for(5, 120) == (5, 90)
    assert cache.end_offset_for(6, 120) == (5, 90)  # unknown epoch: the largest one below it
    assert cache.end_offset_for(3, 120) == (2, 40)
    assert cache.end_offset_for(1, 120) == (1, 10)  # older than all: where the first one starts
    assert cache.end_offset_for(8, 120) == (-1, -1)  # newer than all
    assert cache.end_offset_for(-1, 120) == (-1, -1)
    assert LeaderEpochCache(Path("/nonexistent/cp")).end_offset_for(0, 5) == (-1, -1)


def test_checkpoint_round_trip_in_kafka_text_format(tmp_path):
    path = tmp_path / "leader-epoch-checkpoint"
    cache = LeaderEpochCache(path)
    assert not path.exists()
    cache.assign(0, 0)
    cache.assign(3, 1200)
    assert path.read_text() == "0\n2\n0 0\n3 1200\n"
    assert LeaderEpochCache.load(path).entries == [EpochEntry(0, 0), EpochEntry(3, 1200)]
    cache.truncate_from_end(1200)
    assert path.read_text() == "0\n1\n0 0\n"
    cache.truncate_from_start(500)
    assert path.read_text() == "0\n1\n0 500\n"
    cache.clear()
    assert path.read_text() == "0\n0\n"
    assert [p.name for p in tmp_path.iterdir()] == ["leader-epoch-checkpoint"]  # no temp left


@pytest.mark.parametrize("text", [
    "", "1\n1\n0 0\n", "0\n2\n0 0\n", "0\n1\n0\n", "0\n1\nx 5\n", "0\n2\n3 10\n1 20\n",
    "0\n2\n1 20\n2 10\n", "0\n1\n-1 0\n", "\xff\xfe garbage",
])
def test_an_unreadable_checkpoint_is_ignored_with_a_warning(tmp_path, caplog, text):
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_bytes(text.encode("latin-1"))
    with caplog.at_level(logging.WARNING, logger="pylog.log.leader_epoch"):
        assert read_epoch_checkpoint(path) is None
        assert LeaderEpochCache.load(path).entries == []
    assert "unreadable leader epoch checkpoint" in caplog.text
    assert read_epoch_checkpoint(tmp_path / "missing") is None


def test_assign_refuses_negative_values_and_warns_on_an_older_epoch(tmp_path, caplog):
    cache = LeaderEpochCache(tmp_path / "cp")
    for epoch, start in ((-1, 0), (0, -1)):
        with pytest.raises(ValueError, match="invalid epoch entry"):
            cache.assign(epoch, start)
    assert cache.assign(4, 10) and not cache.assign(4, 20)
    with caplog.at_level(logging.WARNING, logger="pylog.log.leader_epoch"):
        assert not cache.assign(2, 30)
    assert "older than the latest epoch 4" in caplog.text
    assert cache.assign(6, 10)  # epoch 4 wrote nothing: replaced, as in Kafka
    assert cache.entries == [EpochEntry(6, 10)]


def test_epochs_from_headers_skip_missing_and_older_epochs():
    def header(base_offset: int, epoch: int):
        raw = bytearray(make_batch(2, tag=base_offset))
        raw[0:8] = base_offset.to_bytes(8, "big")
        raw[12:16] = epoch.to_bytes(4, "big", signed=True)
        return read_batch_header(bytes(raw))

    headers = [header(0, -1), header(2, 1), header(4, 1), header(6, 0), header(8, 4), header(10, 5)]
    assert epochs_from_headers(headers) == [EpochEntry(1, 2), EpochEntry(4, 8), EpochEntry(5, 10)]
