"""Bulk JSON decode with quarantine of the records that do not parse."""

import json
from datetime import datetime, timezone

import pyarrow as pa

from pylog.etl.config import parse_config
from pylog.etl.decode import decode_records, parse_json_values, payload_schema


def topic(**overrides):
    spec = {"format": "json", "schema": {"user": "string", "n": "int64", "ts": "timestamp"}}
    spec.update(overrides)
    return parse_config({"source": {"bootstrap_servers": "h:1"}, "warehouse": "file:///w",
                         "state": "file:///s", "topics": {"ev": spec}}).topics[0]


def test_good_values_parse_in_bulk_including_pretty_printed():
    values = [json.dumps({"user": f"u{i}", "n": i, "ts": "2026-11-20T07:00:00Z"}).encode() for i in range(5)]
    values[2] = b'{\n  "user": "pretty",\n  "n": 2\n}'
    table, bad = parse_json_values(values, payload_schema(topic()))
    assert bad == [] and table.column("n").to_pylist() == [0, 1, 2, 3, 4]
    assert table.column("user").to_pylist()[2] == "pretty"


def test_bad_values_are_found_and_the_rest_kept():
    values = [b'{"user": "a", "n": 1}', b"not json", b'{"user": "b", "n": "x"}', b"",
              b'{"user": "c", "n": 3}', b"[1, 2]", b'{"n": 4}{"n": 5}']
    table, bad = parse_json_values(values, payload_schema(topic()))
    assert [i for i, _ in bad] == [1, 2, 3, 5, 6]
    assert table.column("user").to_pylist() == ["a", "c"]
    assert all(error for _, error in bad)


def test_decode_records_meta_columns_event_time_and_quarantine():
    cfg = topic(event_time="field:ts")
    values = [b'{"user": "a", "n": 1, "ts": "2026-11-20T07:30:00Z"}', b'{"user": "b", "n": 2}', b"{bad"]
    decoded = decode_records(cfg, 3, [10, 12, 15], [1000, 2000, 3000], [b"k", None, b"z"], values)
    assert decoded.rows.column("_offset").to_pylist() == [10]
    assert decoded.rows.column("_partition").to_pylist() == [3]
    assert decoded.rows.column("_key").to_pylist() == [b"k"]
    expected = datetime(2026, 11, 20, 7, 30, tzinfo=timezone.utc).timestamp() * 1000
    assert decoded.event_ms.to_pylist() == [expected]
    q = decoded.quarantine
    assert q.column("_offset").to_pylist() == [12, 15]
    assert q.column("_value").to_pylist() == values[1:]
    assert "event time" in q.column("_error")[0].as_py()


def test_raw_format_keeps_bytes():
    cfg = topic(format="raw", schema=None)
    decoded = decode_records(cfg, 0, [0, 1], [5, 6], [None, b"k"], [b"\x00\x01", None])
    assert decoded.rows.column("value").to_pylist() == [b"\x00\x01", None]
    assert decoded.rows.schema.field("_timestamp").type == pa.timestamp("ms", tz="UTC")
    assert decoded.quarantine.num_rows == 0


def test_a_fetch_of_only_bad_records_goes_wholly_to_quarantine():
    values = [b"not json", b"{broken", b"[1, 2]"]
    decoded = decode_records(topic(), 1, [4, 5, 9], [1, 2, 3], [None, None, b"k"], values)
    assert decoded.rows.num_rows == 0
    assert decoded.quarantine.column("_offset").to_pylist() == [4, 5, 9]
    assert decoded.quarantine.column("_value").to_pylist() == values
