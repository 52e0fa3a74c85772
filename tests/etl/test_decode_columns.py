"""decode_records on the vectorised decoder's columns matches it on the reference lists."""

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pylog.records import Compression, build_batch, decode_columns
from pylog.records.vectorised import BinaryColumn
from tests.etl.test_decode import topic

from pylog.etl.decode import decode_records

good = st.builds(lambda u, n, h: json.dumps({"user": u, "n": n, "ts": f"2026-11-20T{h:02d}:00:00Z"}).encode(),
                 st.text(max_size=8), st.integers(-5, 5), st.integers(0, 23))
pretty = good.map(lambda v: json.dumps(json.loads(v), indent=1).encode())
crlf = good.map(lambda v: v.replace(b",", b",\r\n"))
missing_ts = st.builds(lambda n: json.dumps({"user": "x", "n": n}).encode(), st.integers(0, 9))
bad = st.sampled_from([b"", b"not json", b"{broken", b"[1, 2]", b'{"n": "x"}', b'{"n": 1}{"n": 2}'])
values = st.none() | good | pretty | crlf | missing_ts | bad
keys = st.none() | st.binary(max_size=10)


def both(buf: bytes, start_offset: int):
    return (decode_columns(buf, start_offset=start_offset, decoder="vectorised"),
            decode_columns(buf, start_offset=start_offset, decoder="reference"))


def assert_same_rows(config, vectorised, reference, cut: int) -> None:
    args = [(c.offsets[:cut], c.timestamps[:cut], c.keys[:cut], c.values[:cut]) for c in (vectorised, reference)]
    assert isinstance(args[0][3], BinaryColumn)
    fast, slow = (decode_records(config, 2, *a) for a in args)
    assert fast.rows.equals(slow.rows)
    assert fast.event_ms.equals(slow.event_ms)
    assert fast.quarantine.equals(slow.quarantine)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=st.lists(st.lists(st.tuples(keys, values), min_size=1, max_size=12), min_size=1, max_size=3),
       codec=st.sampled_from(list(Compression)), data=st.data())
def test_json_and_raw_rows_match_the_reference(batches, codec, data):
    buf, offset = b"", 100
    for records in batches:
        buf += build_batch([(k, v, (), 1_763_622_000_000 + i) for i, (k, v) in enumerate(records)],
                           base_offset=offset, compression=codec)
        offset += len(records)
    vectorised, reference = both(buf, data.draw(st.integers(100, offset)))
    cut = data.draw(st.integers(0, len(reference)))
    for config in (topic(), topic(event_time="field:ts"), topic(format="raw", schema=None)):
        assert_same_rows(config, vectorised, reference, cut)


def test_a_large_fetch_of_good_json_takes_the_bulk_path():
    events = [json.dumps({"user": f"u{i}", "n": i, "ts": "2026-11-20T07:00:00Z"}).encode() for i in range(3000)]
    buf = b"".join(build_batch([(None, v, (), i) for i, v in enumerate(events[s:s + 500])], base_offset=s)
                   for s in range(0, 3000, 500))
    vectorised, reference = both(buf, 7)
    assert vectorised.values.json_lines() is not None
    assert_same_rows(topic(event_time="field:ts"), vectorised, reference, len(reference))
