"""The vectorised records decoder against the reference decoder, on generated batches.

Every test runs twice: with the record walk in C (``pylog/records/_speedups.c``) and with
its pure-Python fallback (``PYLOG_RECORDS_SPEEDUPS=0``).
"""

import os

import numpy as np
import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pylog.errors import CorruptRecordError
from pylog.records import Compression, build_batch, decode_columns
from pylog.records.columns import DECODER_ENV, _decode_vectorised
from pylog.records import vectorised as vectorised_module
from pylog.records.vectorised import SPEEDUPS_ENV, BinaryColumn, IntColumn, Unsupported, record_starts
from tests.examples import examples

blobs = st.none() | st.binary(max_size=200) | st.sampled_from([b"", b"\n", b"{\"a\": 1}", b"\x80" * 300])
header_lists = st.lists(st.tuples(st.text(max_size=10), blobs), max_size=3).map(tuple)
timestamps = st.integers(0, 2**50)
records = st.lists(st.tuples(blobs, blobs, st.just(()) | header_lists, timestamps), min_size=1, max_size=25)
batch_specs = st.lists(st.tuples(records, st.sampled_from(list(Compression)), st.booleans()),
                       min_size=1, max_size=5)


@pytest.fixture(autouse=True, scope="module", params=["c", "python"])
def record_walk(request):
    saved = os.environ.get(SPEEDUPS_ENV)
    os.environ[SPEEDUPS_ENV] = "1" if request.param == "c" else "0"
    assert vectorised_module.native_walk() == (request.param == "c")
    yield request.param
    if saved is None:
        os.environ.pop(SPEEDUPS_ENV, None)
    else:
        os.environ[SPEEDUPS_ENV] = saved


def test_the_c_walk_is_built():
    """make test builds the extension from source (pip install -e .): a missing compiler
    or header would silently leave the slow walk in place."""
    assert vectorised_module._speedups is not None


@settings(max_examples=examples(100), deadline=None)
@given(lengths=st.lists(st.integers(0, 300), max_size=40), tail=st.binary(max_size=3))
def test_the_c_and_python_walks_find_the_same_starts(lengths, tail):
    from pylog.records.record import encode_varint

    buf = b"".join(encode_varint(n) + bytes(n) for n in lengths) + tail
    found = []
    for native in (True, False):
        try:
            found.append(record_starts(buf, len(lengths), 0, native).tolist())
        except Unsupported:
            found.append(None)
    assert found[0] == found[1] != None  # noqa: E711
    positions = np.cumsum([0] + [len(encode_varint(n)) + n for n in lengths])[:-1].tolist()
    assert found[0] == positions
    with pytest.raises(Unsupported):
        record_starts(buf, len(lengths) + 2 + len(tail), 0, True)


def as_control(batch: bytes) -> bytes:
    control = bytearray(batch)
    control[21:23] = ((control[22] & 0x07) | 0x30).to_bytes(2, "big")  # transactional + control
    control[17:21] = crc32c(bytes(control[21:])).to_bytes(4, "big")
    return bytes(control)


def build_buffer(specs, first_offset: int) -> tuple[bytes, int]:
    parts, offset = [], first_offset
    for recs, codec, control in specs:
        batch = build_batch(recs, base_offset=offset, compression=codec)
        parts.append(as_control(batch) if control else batch)
        offset += len(recs)
    return b"".join(parts), offset


def assert_same(vectorised, reference) -> None:
    for name in ("offsets", "timestamps", "keys", "values", "headers"):
        assert list(getattr(vectorised, name)) == list(getattr(reference, name)), name
    assert (vectorised.bytes_consumed, vectorised.next_offset, vectorised.batch_count) == \
        (reference.bytes_consumed, reference.next_offset, reference.batch_count)
    assert len(vectorised) == len(reference)


@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=batch_specs, first_offset=st.integers(0, 2**62), skip_control=st.booleans(),
       data=st.data())
def test_vectorised_and_reference_decoders_agree(specs, first_offset, skip_control, data):
    buf, end = build_buffer(specs, first_offset)
    buf += buf[:data.draw(st.integers(0, 70))]  # a partial trailing batch, sometimes
    start_offset = data.draw(st.none() | st.integers(first_offset, end))
    reference = decode_columns(buf, skip_control=skip_control, start_offset=start_offset,
                               decoder="reference")
    vectorised = _decode_vectorised(buf, skip_control, start_offset)  # no fallback
    assert isinstance(vectorised.offsets, IntColumn) and isinstance(vectorised.values, BinaryColumn)
    assert_same(vectorised, reference)
    assert vectorised.keys.to_arrow().to_pylist() == reference.keys
    assert vectorised.values.to_arrow().to_pylist() == reference.values
    assert vectorised.offsets.to_numpy().tolist() == reference.offsets
    cut = data.draw(st.integers(0, len(reference)))
    assert list(vectorised.values[:cut]) == reference.values[:cut]
    assert vectorised.values[:cut].to_arrow().to_pylist() == reference.values[:cut]
    assert vectorised.offsets[:cut] == reference.offsets[:cut]
    _check_json_lines(vectorised.values[cut:], reference.values[cut:])


def _check_json_lines(column: BinaryColumn, values: list) -> None:
    lines = column.json_lines()
    if lines is None:
        assert not values or any(v is None or b"\n" in v or b"\r" in v for v in values)
        return
    joined, longest = lines
    split = joined.tobytes().split(b"\n")
    assert split[-1] == b"" and len(split) == len(values) + 1
    for line, value in zip(split, values):
        assert line.endswith(value) and line[:len(line) - len(value)].strip(b" ") == b""
    assert longest == max(len(line) + 1 for line in split[:-1])


@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=batch_specs, data=st.data())
def test_mutated_buffers_decode_or_fail_the_same_way(specs, data):
    buf = bytearray(build_buffer(specs, 0)[0])
    for _ in range(data.draw(st.integers(1, 3))):
        pos = data.draw(st.integers(0, len(buf) - 1))
        buf[pos] ^= data.draw(st.integers(1, 255))
        if data.draw(st.booleans()) and pos >= 21:  # keep the CRC right: the records decoder must notice
            start = 0
            while start + 61 <= len(buf):
                size = int.from_bytes(buf[start + 8:start + 12], "big", signed=True) + 12
                if size < 61 or start + size > len(buf):
                    break
                if start + 21 <= pos < start + size:
                    buf[start + 17:start + 21] = crc32c(bytes(buf[start + 21:start + size])).to_bytes(4, "big")
                start += size
    outcomes = []
    for decoder in ("vectorised", "reference"):
        try:
            outcomes.append(decode_columns(bytes(buf), decoder=decoder))
        except CorruptRecordError as exc:
            outcomes.append((type(exc), str(exc)))
    vectorised, reference = outcomes
    if isinstance(reference, tuple):
        assert vectorised == reference
    else:
        assert_same(vectorised, reference)


def test_records_with_headers_and_nulls_in_one_batch():
    recs = [(None, b"v0", (), 1), (b"k1", None, (("h", b"x"), ("n", None)), 2),
            (b"", b"", (), 3), (None, None, (("only", b""),), 4)]
    for codec in Compression:
        buf = build_batch(recs, base_offset=40, compression=codec) * 1
        columns = _decode_vectorised(buf, True, None)
        assert columns.keys == [None, b"k1", b"", None]
        assert columns.values == [b"v0", None, b"", None]
        assert columns.headers == [(), (("h", b"x"), ("n", None)), (), (("only", b""),)]
        assert columns.offsets == [40, 41, 42, 43] and columns.timestamps == [1, 2, 3, 4]


def test_the_decoder_is_chosen_by_parameter_or_environment(monkeypatch):
    buf = build_batch([(b"k", b"v", (), 1)])
    assert isinstance(decode_columns(buf).offsets, IntColumn)
    assert isinstance(decode_columns(buf, decoder="reference").offsets, list)
    monkeypatch.setenv(DECODER_ENV, "reference")
    assert isinstance(decode_columns(buf).offsets, list)
    assert isinstance(decode_columns(buf, decoder="vectorised").offsets, IntColumn)
    monkeypatch.setenv(DECODER_ENV, "fast")
    with pytest.raises(ValueError):
        decode_columns(buf)


def test_big_varints_and_overflow_fall_back_to_the_reference():
    # A base offset near 2**63 makes base + delta overflow int64: the reference's big ints win.
    buf = build_batch([(None, b"a", (), 0), (None, b"b", (), 2**62)], base_offset=2**63 - 1)
    columns = decode_columns(buf)
    assert columns.offsets == [2**63 - 1, 2**63]
    assert columns == columns  # dataclass equality still works
