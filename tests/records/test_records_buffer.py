"""RecordsBuffer, in C and in Python, against encode_record (the reference encoder) and each other."""

import random

import pytest

from pylog.records import BatchBuilder, decode_batch
from pylog.records.record import encode_record
from pylog.records.records_buffer import NativeRecordsBuffer, PyRecordsBuffer

IMPLEMENTATIONS = [pytest.param(PyRecordsBuffer, id="python"),
                   pytest.param(NativeRecordsBuffer, id="c")]


def test_the_c_extension_is_built():
    assert NativeRecordsBuffer is not None  # `make test` builds it from source


def _random_record(rng: random.Random, base: int):
    def blob():
        return None if rng.random() < 0.1 else rng.randbytes(rng.choice([0, 1, 5, 63, 64, 200, 9000]))
    headers = tuple((rng.choice(["h", "trace-id", "é"]), blob()) for _ in range(rng.choice([0, 0, 0, 1, 3])))
    timestamp = base + rng.choice([0, 1, -1, 63, -64, 8191, 10**6, -(10**9), 2**40])
    return blob(), blob(), timestamp, headers


@pytest.mark.parametrize("buffer_class", IMPLEMENTATIONS)
def test_bytes_equal_the_reference_encoder(buffer_class):
    rng = random.Random(7)
    for _ in range(30):
        records = buffer_class()
        expected, timestamps = [], []
        for i in range(rng.randint(1, 40)):
            key, value, timestamp, headers = _random_record(rng, 1_700_000_000_000)
            timestamps.append(timestamp)
            expected.append(encode_record(i, timestamp - timestamps[0], key, value, headers))
            assert records.append(key, value, timestamp, headers) == sum(map(len, expected))
        assert records.getvalue() == b"".join(expected)
        assert len(records) == records.count == len(expected) and records.size == len(records.getvalue())
        assert records.timestamps() == timestamps
        assert records.base_timestamp == timestamps[0]
        assert records.max_timestamp == max(max(timestamps), -1)


@pytest.mark.parametrize("buffer_class", IMPLEMENTATIONS)
def test_limit_refuses_a_record_that_would_not_fit_unless_the_buffer_is_empty(buffer_class):
    records = buffer_class()
    assert records.base_timestamp == records.max_timestamp == -1 and records.getvalue() == b""
    first = records.append(None, b"x" * 500, 10, (), 100)  # alone in the buffer: always taken
    assert first > 100
    assert records.append(None, b"y", 11, (), first + 7) == -1  # 8 bytes more: refused, nothing added
    assert len(records) == 1 and records.size == first and records.timestamps() == [10]
    assert records.append(None, b"y", 11, (), first + 8) == first + 8
    assert records.append(b"k", None, 12, None) == first + 8 + 8  # no limit, headers None
    assert records.max_timestamp == 12


@pytest.mark.parametrize("buffer_class", IMPLEMENTATIONS)
def test_bad_input_raises_type_error_and_appends_nothing(buffer_class):
    records = buffer_class()
    records.append(None, b"ok", 1)
    for args in [(None, "text", 2), (1, b"v", 2), (None, b"v", 2, [("h", "not bytes")]),
                 (None, b"v", 2, [(b"not str", b"v")]), (None, b"v", "soon")]:
        with pytest.raises(TypeError):
            records.append(*args)
    assert len(records) == 1 and records.getvalue() == encode_record(0, 0, None, b"ok")


def test_the_two_implementations_agree_on_random_records_and_limits():
    rng = random.Random(11)
    native, python = NativeRecordsBuffer(), PyRecordsBuffer()
    for _ in range(500):
        key, value, timestamp, headers = _random_record(rng, 5_000)
        limit = rng.choice([-1, 100, 20_000, 60_000])
        assert native.append(key, value, timestamp, headers, limit) == python.append(key, value, timestamp, headers, limit)
    assert native.getvalue() == python.getvalue() and native.timestamps() == python.timestamps()


def test_a_batch_builder_batch_decodes_to_its_records():
    builder = BatchBuilder(producer_id=7, producer_epoch=1, base_sequence=40)
    for i in range(300):
        builder.append(str(i).encode() if i % 2 else None, bytes([i % 256]) * i, (("n", str(i).encode()),), 1_000 + i)
    batch = decode_batch(builder.build())
    assert batch.header.max_timestamp == 1_299 and batch.header.base_sequence == 40
    assert [(r.offset, r.timestamp, r.value, r.headers) for r in batch.records] == [
        (i, 1_000 + i, bytes([i % 256]) * i, (("n", str(i).encode()),)) for i in range(300)]
