"""The `pylog` commands as scripts use them: JSON Lines that round-trip bytes and timestamps,
`| head` on a real shell pipe, SQL errors with DuckDB's hints, a produce that gives up within
its timeout, `topics describe` with Configs, and help texts that read as plain text."""

from __future__ import annotations

import argparse
import base64
import csv
import io
import fcntl
import json
import os
import socket
import subprocess
from datetime import datetime
from pathlib import Path

import pytest

from pylog.cli.main import build_parser, main
from pylog.etl.config import parse_config
from pylog.testing.broker import broker_fixture
from tests.cli.helpers import PYLOG, pylog, without_topic_id
from tests.warehouse.conftest import iso, page_views, write_config

broker = broker_fixture(scope="module")

F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)  # Linux

# Keys of the loaded records: text, bytes that are not UTF-8, an empty key and no key.
KEYS = [b"user-1", b"\xff\xfe\x00binary", b"", None]


def _write(config, partition: int, start: int, events: list[dict], keys: list) -> None:
    """Decode and write one offset range the way a map task does (with record keys)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from pylog.etl.decode import decode_records
    from pylog.etl.fs import Storage
    from pylog.etl.layout import table_root
    from pylog.etl.model import TaskRange
    from pylog.etl.writer import write_partitioned

    topic = config.topics[0]
    values = [json.dumps({"user_id": e["user_id"], "url": e["url"],
                          "ts": iso(e["ts_ms"])}).encode()
              for e in events]
    decoded = decode_records(topic, partition, range(start, start + len(events)),
                             [e["ts_ms"] for e in events], keys, values)
    storage = Storage.from_uri(config.warehouse)
    task_range = TaskRange(topic.topic, partition, start, start + len(events))
    write_partitioned(storage, table_root(storage, topic.table), decoded.rows, decoded.event_ms,
                      topic.partitioning, task_range)
    assert decoded.quarantine.num_rows == 0
    quarantine_ms = pc.cast(decoded.quarantine.column("_timestamp"), pa.int64()).combine_chunks()
    write_partitioned(storage, table_root(storage, topic.quarantine_table), decoded.quarantine,
                      quarantine_ms, topic.partitioning, task_range)


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    """A warehouse without a single quarantined record, keys of every kind, ms timestamps."""
    directory = tmp_path_factory.mktemp("healthy")
    path = write_config(directory)
    config = parse_config(json.loads(path.read_text()))
    events = page_views(len(KEYS), 0, hours=1)
    for i, event in enumerate(events):
        event["ts_ms"] += 123 + i  # not whole seconds
    _write(config, 0, 0, events, KEYS)
    return path, events


@pytest.fixture(scope="module")
def hourly(tmp_path_factory) -> Path:
    """A table with 80 hourly partitions: `tables --partitions` prints some 6 KB."""
    directory = tmp_path_factory.mktemp("hourly")
    path = write_config(directory)
    config = parse_config(json.loads(path.read_text()))
    events = page_views(80, 0, hours=80)
    _write(config, 0, 0, events, [None] * len(events))
    return path


@pytest.fixture
def run(capsys):
    """``pylog`` in this process (as fast as a function call): returns (status, out, err)."""
    def run(*argv: str) -> tuple[int, str, str]:
        status = main(list(argv))
        out, err = capsys.readouterr()
        return status, out, err
    return run


@pytest.fixture
def ok(run):
    def ok(*argv: str) -> str:
        status, out, err = run(*argv)
        assert status == 0, err
        return out
    return ok


def test_json_lines_round_trip_bytes_and_timestamps(healthy, ok):
    path, events = healthy
    sql = "SELECT _key, _timestamp, ts, _offset FROM page_views ORDER BY _offset"
    rows = [json.loads(line) for line in ok("query", "--config", str(path), "--format", "json", sql).splitlines()]
    assert [r["_offset"] for r in rows] == list(range(len(KEYS)))
    assert [None if r["_key"] is None else base64.b64decode(r["_key"]) for r in rows] == KEYS
    for row, event in zip(rows, events):
        when = datetime.fromisoformat(row["_timestamp"])
        assert when.tzinfo is not None and row["_timestamp"].endswith("Z")
        assert int(when.timestamp() * 1000) == event["ts_ms"]
    # --bytes text: UTF-8 where valid, else base64 in an object, nothing replaced.
    texts = [json.loads(line)["_key"] for line in
             ok("query", "--config", str(path), "--format", "json", "--bytes", "text", sql).splitlines()]
    assert texts == ["user-1", {"base64": base64.b64encode(KEYS[1]).decode()}, "", None]
    # The same timestamp text in CSV and in the table.
    stamps = [r["_timestamp"] for r in rows]
    got = list(csv.DictReader(io.StringIO(ok("query", "--config", str(path), "--format", "csv", sql))))
    assert [r["_timestamp"] for r in got] == stamps
    assert [base64.b64decode(r["_key"]) if r["_key"] else None for r in got][:2] == KEYS[:2]
    table = ok("query", "--config", str(path), sql)
    assert all(stamp in table for stamp in stamps)
    assert "b'" not in table + "".join(map(str, rows))


def _into_head(*argv: str) -> tuple[int, str, str]:
    """``pylog ARGV | head -1`` over an OS pipe made as a shell makes it, but holding one
    page (4 KiB, F_SETPIPE_SZ) instead of 64 KiB: a few KB of output are then still being
    written when head has its line and exits, as with any large output in a shell.
    Returns pylog's status, head's output and pylog's stderr."""
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, F_SETPIPE_SZ, 4096)
    with subprocess.Popen([PYLOG, *argv], stdout=write_end, stderr=subprocess.PIPE) as writer, \
            subprocess.Popen(["head", "-1"], stdin=read_end, stdout=subprocess.PIPE) as head:
        os.close(read_end)
        os.close(write_end)
        out = head.communicate(timeout=120)[0].decode()
        err = writer.communicate(timeout=120)[1].decode()
    return writer.returncode, out, err


def test_a_closed_pipe_ends_quietly_with_status_0(hourly):
    config = str(hourly)
    status, out, err = _into_head("tables", "--partitions", "--config", config)
    assert (status, err) == (0, "")
    assert out.split()[:3] == ["table", "partitions", "files"]
    status, out, err = _into_head("query", "--format", "json", "--config", config,
                                  "SELECT * FROM range(3000)")
    assert (status, err, out) == (0, "", '{"range": 0}\n')


def test_quarantine_view_exists_on_healthy_data(healthy, ok):
    path, _ = healthy
    out = ok("query", "--config", str(path), "--format", "json",
              "SELECT count(*) AS bad, count(_error) AS errors FROM page_views_quarantine")
    assert json.loads(out) == {"bad": 0, "errors": 0}
    columns = ok("query", "--config", str(path), "--format", "csv",
                  "SELECT * FROM page_views_quarantine").strip().split(",")
    assert {"_value", "_error", "_offset", "dt", "hr"} <= set(columns)


@pytest.mark.parametrize(("sql", "hint"), [
    ("SELECT usr_id FROM page_views", 'Candidate bindings: "user_id"'),
    ("SELECT * FROM page_view", 'Did you mean "page_views'),
    ("SELEC 1", "LINE 1: SELEC 1\n        ^^^^^"),
])
def test_sql_errors_keep_duckdb_hints(healthy, run, sql, hint):
    status, out, err = run("query", "--config", str(healthy[0]), sql)
    assert status == 1 and out == ""
    assert err.startswith("pylog query: error: ") and "Traceback" not in err
    assert hint in err


@pytest.mark.parametrize("sql", ["", "   ", "-- only a comment"])
def test_an_empty_query_is_an_error(healthy, run, sql):
    status, _, err = run("query", "--config", str(healthy[0]), sql)
    assert status == 1
    assert err == "pylog query: error: no SQL statement given (the query is empty)\n"


def test_several_statements_run_in_order(healthy, ok, run):
    path = str(healthy[0])
    out = ok("query", "--config", path, "SELECT 41 + 1 AS first; SELECT 'two' AS second")
    first, second = out.split("\n\n")
    assert first.splitlines()[0] == "-- SELECT 41 + 1 AS first" and "42" in first.splitlines()[3]
    assert second.splitlines()[0] == "-- SELECT 'two' AS second" and second.splitlines()[3] == "two"
    # SET then SELECT: the setting applies to the next statement.
    out = ok("query", "--config", path, "--format", "json",
              "SET VARIABLE answer = 42; SELECT getvariable('answer') AS answer")
    assert json.loads(out) == {"answer": 42}
    status, _, err = run("query", "--config", path, "--format", "json", "SELECT 1; SELECT 2")
    assert status == 1 and "2 statements return rows" in err


def test_produce_to_a_closed_port_gives_up_within_its_timeout():
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # The subprocess timeout is far below the producer's 60 s default wait for metadata.
    result = pylog("produce", "--topic", "t", "--bootstrap-server", f"127.0.0.1:{port}",
                   "--request-timeout-ms", "1500", input=b"x\n", timeout=30)
    err = result.stderr.decode()
    assert result.returncode == 1
    assert err.splitlines()[0] == (f"pylog produce: waiting for 127.0.0.1:{port} to answer "
                                   f"(giving up after --request-timeout-ms 1500)")
    assert err.splitlines()[1].startswith("pylog produce: error: 1 of 1 records not delivered")


def test_describe_shows_a_changed_retention_and_null_keys_print_null(broker, ok):
    bs = ("--bootstrap-server", broker.bootstrap)
    ok("topics", "create", "--topic", "retained", *bs)
    first = without_topic_id(ok("topics", "describe", "--topic", "retained", *bs)).splitlines()[0]
    assert first == "Topic: retained\tPartitionCount: 1\tReplicationFactor: 1\tConfigs: "
    ok("configs", "--alter", "--entity-type", "topics", "--entity-name", "retained",
        "--add-config", "retention.ms=3600000", *bs)
    first = without_topic_id(ok("topics", "describe", "--topic", "retained", *bs)).splitlines()[0]
    assert first == "Topic: retained\tPartitionCount: 1\tReplicationFactor: 1\tConfigs: retention.ms=3600000"
    # A record without a key: the console consumer prints null, as kafka-console-consumer.sh does.
    result = pylog("produce", "--topic", "retained", *bs, input=b"no key\n")  # reads stdin
    assert result.returncode == 0, result.stderr
    assert ok("consume", "--topic", "retained", "--from-beginning", "--max-messages", "1",
               "--format", "%k|%v", *bs) == "null|no key\n"


def _parsers(parser: argparse.ArgumentParser, path: str = "pylog"):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{path} {name}")


def test_every_option_has_plain_text_help():
    for path, parser in _parsers(build_parser()):
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            assert action.help, f"{path} {action.option_strings or action.dest} has no help text"
        text = parser.format_help()
        assert "``" not in text and ":class:`" not in text, f"{path} --help shows markup"
    assert "one record. With --key-separator the text" in pylog("produce", "--help").stdout.decode()
