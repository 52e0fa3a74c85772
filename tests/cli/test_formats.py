"""Pure pieces of the client commands: output formats, timestamps, --config parsing."""

import pytest

from pylog.cli.consume import compile_format
from pylog.cli.offsets import parse_timestamp_ms
from pylog.cli.topics import parse_configs
from pylog.errors import ConfigError
from pylog.records import Record


def test_format_placeholders_and_escapes():
    record = Record(42, 1_700_000_000_000, b"user-1", b"clicked", (("a", b"1"), ("b", None)))
    render = compile_format(r"%t/%p@%o %T %k=%v [%h] 100%%\t.")
    assert render("events", 3, record) == b"events/3@42 1700000000000 user-1=clicked [a=1,b=] 100%\t.\n"
    assert compile_format("%k|%v")("t", 0, Record(0, 0, None, None)) == b"null|null\n"
    assert compile_format("%v")("t", 0, Record(0, 0, None, b"\xff\x00")) == b"\xff\x00\n"


def test_timestamps():
    assert parse_timestamp_ms("2024-05-01T12:00:00Z", "--time") == 1714564800000
    assert parse_timestamp_ms("2024-05-01T12:00:00", "--time") == 1714564800000  # naive is UTC
    assert parse_timestamp_ms("2024-05-01T14:00:00+02:00", "--time") == 1714564800000
    assert parse_timestamp_ms("1714564800123", "--time") == 1714564800123
    with pytest.raises(ConfigError, match="--offset: 'noon' is not an ISO-8601 timestamp"):
        parse_timestamp_ms("noon", "--offset")


def test_configs():
    assert parse_configs(["retention.ms=1000", " cleanup.policy = delete "]) == {
        "retention.ms": "1000", "cleanup.policy": "delete"}
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        parse_configs(["=x"])
