"""The loader's tables in Spark's catalog: CREATE TABLE ... LOCATION and partition registration."""

from __future__ import annotations

import uuid

import pytest

from pylog.etl.config import load_config
from pylog.etl.fs import Storage
from pylog.testing.spark import local_spark
from pylog.warehouse.catalog import register_tables, table_location
from pylog.warehouse.query import run_query
from tests.warehouse.conftest import load_range, page_views, write_config


@pytest.fixture(scope="module")
def spark():
    return local_spark()


def test_registered_tables_read_like_the_files(spark, tmp_path):
    config = load_config(write_config(tmp_path))
    load_range(config, 0, 0, page_views(60, 0, hours=2))
    database = f"pylog_{uuid.uuid4().hex[:8]}"

    first = register_tables(spark, config.warehouse, database=database)
    assert [r.table for r in first] == ["page_views"]  # the quarantine table has no files
    [registration] = first
    assert registration.created
    assert registration.location == table_location(Storage.from_uri(config.warehouse), "page_views")
    assert registration.location.startswith("file:///")
    assert registration.added_partitions == ("dt=2026-11-25/hr=08", "dt=2026-11-25/hr=09")
    columns = {c.name: c.isPartition for c in spark.catalog.listColumns(f"{database}.page_views")}
    assert columns["dt"] and columns["hr"] and not columns["user_id"]

    spark_counts = {(str(r.dt), r.hr): r.n for r in spark.sql(
        f"SELECT dt, hr, count(*) AS n FROM {database}.page_views GROUP BY dt, hr").collect()}
    duck_counts = {(str(r["dt"]), int(r["hr"])): r["n"] for r in run_query(
        Storage.from_uri(config.warehouse),
        "SELECT dt, hr, count(*) AS n FROM page_views GROUP BY ALL").to_pylist()}
    assert spark_counts == duck_counts
    assert sum(spark_counts.values()) == 60


def test_registration_is_idempotent_and_adds_new_partitions(spark, tmp_path):
    config = load_config(write_config(tmp_path))
    load_range(config, 0, 0, page_views(30, 0, hours=1))
    database = f"pylog_{uuid.uuid4().hex[:8]}"
    register_tables(spark, config.warehouse, database=database)

    [again] = register_tables(spark, config.warehouse, database=database)
    assert (again.created, again.added_partitions) == (False, ())

    load_range(config, 0, 30, page_views(20, 0, first_hour=2, hours=1), bad_offsets={31})
    registrations = {r.table: r for r in register_tables(spark, config.warehouse, database=database)}
    assert registrations["page_views"].added_partitions == ("dt=2026-11-25/hr=10",)
    assert registrations["page_views_quarantine"].created
    total = spark.sql(f"SELECT count(*) AS n FROM {database}.page_views").collect()[0].n
    assert total == 30 + 19
    bad = spark.sql(f"SELECT _offset FROM {database}.page_views_quarantine").collect()
    assert [r._offset for r in bad] == [31]
