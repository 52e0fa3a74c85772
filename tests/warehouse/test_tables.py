"""Table discovery and DuckDB queries over files written by the loader's writer."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone

import pytest

from pylog.etl.fs import Storage
from pylog.warehouse.query import QueryError, run_query
from pylog.warehouse.tables import discover_tables, list_table_names


def _hour(ts_ms: int) -> tuple[str, str]:
    moment = datetime.fromtimestamp(ts_ms / 1000, tz=timezone.utc)
    return f"{moment:%Y-%m-%d}", f"{moment:%H}"


def test_discovers_the_table_and_its_quarantine_table(warehouse):
    storage = Storage.from_uri(warehouse.config.warehouse)
    assert list_table_names(storage) == ["page_views", "page_views_quarantine"]


def test_row_counts_per_partition_come_from_the_footers(warehouse):
    [table] = discover_tables(Storage.from_uri(warehouse.config.warehouse), ["page_views"])
    expected = Counter(_hour(e["ts_ms"]) for e in warehouse.events)
    assert table.partition_columns == ("dt", "hr")
    assert {(p.values[0][1], p.values[1][1]): p.rows for p in table.partitions} == expected
    assert table.rows == len(warehouse.events) == 208
    assert len(expected) == 3 and table.files == 6  # one file per (log partition, hour)
    assert [p.name for p in table.partitions] == sorted(p.name for p in table.partitions)


def test_freshness_is_the_newest_timestamp_and_partition(warehouse):
    [table] = discover_tables(Storage.from_uri(warehouse.config.warehouse), ["page_views"])
    newest_ms = max(e["ts_ms"] for e in warehouse.events)
    assert table.newest_timestamp == datetime.fromtimestamp(newest_ms / 1000, tz=timezone.utc)
    assert table.newest_partition.name == "dt=%s/hr=%s" % _hour(newest_ms)


def test_quarantined_payloads_are_counted_in_their_own_table(warehouse):
    [quarantine] = discover_tables(Storage.from_uri(warehouse.config.warehouse), ["page_views_quarantine"])
    assert quarantine.rows == 2


def test_temporary_and_bookkeeping_files_are_not_part_of_a_table(tmp_path):
    from tests.warehouse.conftest import load_range, page_views, write_config
    from pylog.etl.config import load_config

    config = load_config(write_config(tmp_path))
    load_range(config, 0, 0, page_views(10, 0, hours=1))
    table_dir = tmp_path / "warehouse" / "page_views"
    [hour_dir] = list(table_dir.glob("dt=*/hr=*"))
    (hour_dir / ".page_views-0-10-19.parquet.ab12.tmp").write_bytes(b"half a file")
    (hour_dir / "_SUCCESS").write_bytes(b"")
    (tmp_path / "warehouse" / "_staging" / "run-1" / "page_views").mkdir(parents=True)
    (tmp_path / "warehouse" / "notes.txt").write_text("not a table")
    (tmp_path / "warehouse" / "empty").mkdir()
    storage = Storage.from_uri(config.warehouse)
    assert list_table_names(storage) == ["page_views"]
    [table] = discover_tables(storage)
    assert (table.rows, table.files) == (10, 1)
    assert run_query(storage, "SELECT count(*) AS n FROM page_views").to_pylist() == [{"n": 10}]


def test_query_sees_every_row_once_with_partition_columns(warehouse):
    storage = Storage.from_uri(warehouse.config.warehouse)
    result = run_query(storage, """
        SELECT strftime(dt, '%Y-%m-%d') AS dt, hr, count(*) AS views,
               count(DISTINCT (_partition, _offset)) AS distinct_offsets
        FROM page_views GROUP BY ALL ORDER BY ALL""").to_pylist()
    expected = Counter(_hour(e["ts_ms"]) for e in warehouse.events)
    assert {(r["dt"], r["hr"]): r["views"] for r in result} == expected
    assert all(r["views"] == r["distinct_offsets"] for r in result)


def test_query_payload_columns_match_what_was_written(warehouse):
    storage = Storage.from_uri(warehouse.config.warehouse)
    rows = run_query(storage, "SELECT _partition, _offset, user_id, url, epoch_ms(ts) AS ts_ms "
                              "FROM page_views ORDER BY _partition, _offset").to_pylist()
    expected = sorted((e["partition"], e["offset"], e["user_id"], e["url"], e["ts_ms"])
                      for e in warehouse.events)
    assert [tuple(r.values()) for r in rows] == expected


def test_quarantine_rows_keep_their_offsets(warehouse):
    storage = Storage.from_uri(warehouse.config.warehouse)
    rows = run_query(storage, "SELECT _partition, _offset FROM page_views_quarantine ORDER BY 2").to_pylist()
    assert rows == [{"_partition": 1, "_offset": 5}, {"_partition": 1, "_offset": 17}]


@pytest.mark.parametrize("sql", ["SELECT * FROM no_such_table", "SELEC 1",
                                 "SELECT no_such_column FROM page_views"])
def test_bad_sql_is_a_query_error(warehouse, sql):
    with pytest.raises(QueryError) as caught:
        run_query(Storage.from_uri(warehouse.config.warehouse), sql)
    # DuckDB's first line names the error; its hints and the LINE pointer follow.
    assert str(caught.value).splitlines()[0].split(":")[0] in ("Catalog Error", "Parser Error", "Binder Error")
