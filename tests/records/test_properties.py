"""Property tests: any records round-trip; no byte string makes the decoder misbehave."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pylog.errors import CorruptRecordError
from pylog.records import Compression, Record, build_batch, decode_batch, decode_columns, iter_records
from pylog.records.header import checked_batch_headers, iter_batch_headers
from tests.examples import examples

int64 = st.integers(-(2**63), 2**63 - 1)
blobs = st.none() | st.binary(max_size=300)
headers = st.lists(st.tuples(st.text(max_size=20), blobs), max_size=3).map(tuple)
timestamps = st.integers(0, 2**50)
records = st.lists(st.tuples(blobs, blobs, headers, timestamps), min_size=1, max_size=30)


@settings(max_examples=examples(150), deadline=None)
@given(records=records, codec=st.sampled_from(list(Compression)),
       base_offset=st.integers(0, 2**62), producer_id=int64)
def test_any_records_round_trip(records, codec, base_offset, producer_id):
    batch = build_batch(records, base_offset=base_offset, compression=codec, producer_id=producer_id)
    expected = [Record(base_offset + i, ts, k, v, h) for i, (k, v, h, ts) in enumerate(records)]
    decoded = decode_batch(batch)
    assert decoded.records == expected
    assert decoded.header.producer_id == producer_id
    columns = decode_columns(batch + batch[:40])  # with a partial trailing batch
    assert list(map(Record, columns.offsets, columns.timestamps, columns.keys, columns.values,
                    columns.headers)) == expected


def _valid_buffer(data) -> bytes:
    recs = data.draw(records)
    codec = data.draw(st.sampled_from(list(Compression)))
    return build_batch(recs, compression=codec) + build_batch(recs[:1], base_offset=len(recs))


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_bytes_raise_only_corrupt_record_errors(data):
    buf = bytearray(_valid_buffer(data))
    for _ in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        pos = data.draw(st.integers(0, max(len(buf) - 1, 0)))
        if kind == "flip" and buf:
            buf[pos] ^= data.draw(st.integers(1, 255))
        elif kind == "cut":
            del buf[pos:pos + data.draw(st.integers(1, 20))]
        else:
            buf[pos:pos] = data.draw(st.binary(min_size=1, max_size=8))
    _decode_everything(bytes(buf))


@settings(max_examples=examples(150), deadline=None)
@given(buf=st.binary(max_size=200))
def test_random_bytes_raise_only_corrupt_record_errors(buf):
    _decode_everything(buf)


@settings(max_examples=examples(150), deadline=None)
@given(body=st.binary(max_size=120), count=st.integers(-3, 10),
       codec=st.sampled_from(list(Compression)))
def test_garbage_records_under_a_valid_crc(body, count, codec):
    # The CRC is right, so the record decoder itself must reject the garbage cleanly.
    from tests.records.test_batch import _with_body
    _decode_everything(_with_body(body, count, codec))


def _decode_everything(buf: bytes) -> None:
    for decode in (lambda: decode_batch(buf), lambda: list(iter_records(buf)),
                   lambda: decode_columns(buf)):
        try:
            decode()
        except CorruptRecordError:
            pass


def _walk(walker, buf):
    try:
        return [(pos, tuple(header)) for pos, header in walker(buf)]
    except CorruptRecordError as error:
        return type(error), str(error)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_inlined_header_walk_matches_the_generator(data):
    """``checked_batch_headers`` (the broker's validation walk) gives what
    ``list(iter_batch_headers(...))`` gives, the same headers or the same error, on
    back-to-back batches with bytes changed and cut anywhere."""
    batches = [build_batch([(None, v, (), 1) for v in values])
               for values in data.draw(st.lists(st.lists(st.binary(max_size=20), min_size=1,
                                                         max_size=4), min_size=1, max_size=4))]
    buf = bytearray(b"".join(batches))
    for _ in range(data.draw(st.integers(0, 3))):
        buf[data.draw(st.integers(0, len(buf) - 1))] = data.draw(st.integers(0, 255))
    buf = buf[:data.draw(st.integers(0, len(buf)))]
    assert _walk(checked_batch_headers, buf) == _walk(
        lambda b: list(iter_batch_headers(b, verify_crc=True)), buf)
