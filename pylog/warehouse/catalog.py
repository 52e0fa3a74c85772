"""The loader's tables in Spark's catalog, for Spark SQL users.

Each table becomes an external table over its directory, with the schema and the
partition columns Spark infers from the files and the ``dt=``/``hr=`` directories::

    CREATE DATABASE IF NOT EXISTS pylog
    CREATE TABLE IF NOT EXISTS pylog.page_views USING parquet LOCATION 'hdfs://nn:8020/wh/page_views'
    MSCK REPAIR TABLE pylog.page_views          -- adds partitions loaded since the last call

The DAG's registration task calls :func:`register_tables` after every load; Spark SQL
users can call it from their own session. Registration is idempotent: a second call adds
only new partitions. For the catalog to outlive the session, the session needs a
persistent catalog (Hive support with a metastore): :func:`catalog_session` builds one.

Usage::

    spark = catalog_session("/var/lib/pylog/metastore")
    register_tables(spark, "file:///var/lib/pylog/warehouse", database="pylog")
    spark.sql("SELECT hr, count(*) FROM pylog.page_views GROUP BY hr").show()
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlparse, urlunparse

from pylog.etl.fs import Storage
from pylog.warehouse.tables import list_table_names, data_file_paths

DEFAULT_DATABASE = "pylog"


@dataclass(frozen=True, slots=True)
class Registration:
    """What :func:`register_tables` did to one table."""

    table: str
    qualified_name: str
    location: str
    created: bool
    """True when this call created the table in the catalog."""
    added_partitions: tuple[str, ...]
    """Partitions (``dt=.../hr=...``) the catalog did not know before this call."""


def table_location(storage: Storage, table: str) -> str:
    """The URI of a table's directory, as Spark's LOCATION wants it."""
    parsed = urlparse(storage.uri)
    scheme = "hdfs" if parsed.scheme == "webhdfs" else parsed.scheme
    return urlunparse((scheme, parsed.netloc, storage.join(table), "", "", ""))


def register_tables(spark, warehouse_uri: str, tables: list[str] | None = None,
                    database: str = DEFAULT_DATABASE) -> list[Registration]:
    """Create (if needed) each table in ``database`` and register its new partitions.

    ``tables`` defaults to every table under the warehouse that has data files; a table
    without files yet is skipped (Spark cannot infer a schema from nothing).
    """
    storage = Storage.from_uri(warehouse_uri)
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {_ident(database)}")
    names = list_table_names(storage) if tables is None else tables
    return [registration for name in names
            if (registration := _register_one(spark, storage, name, database)) is not None]


def _register_one(spark, storage: Storage, table: str, database: str) -> Registration | None:
    if not data_file_paths(storage, storage.join(table)):
        return None
    qualified = f"{_ident(database)}.{_ident(table)}"
    location = table_location(storage, table)
    created = not spark.catalog.tableExists(f"{database}.{table}")
    if created:
        spark.sql(f"CREATE TABLE IF NOT EXISTS {qualified} USING parquet "
                  f"LOCATION '{_literal(location)}'")
    before = _partitions(spark, qualified)
    spark.sql(f"MSCK REPAIR TABLE {qualified}")
    spark.catalog.refreshTable(f"{database}.{table}")
    after = _partitions(spark, qualified)
    return Registration(table=table, qualified_name=f"{database}.{table}", location=location,
                        created=created, added_partitions=tuple(sorted(after - before)))


def _partitions(spark, qualified: str) -> set[str]:
    try:
        return {row[0] for row in spark.sql(f"SHOW PARTITIONS {qualified}").collect()}
    except Exception as exc:  # an unpartitioned table has no partitions to show
        if "not partitioned" in str(exc).lower() or "NOT_PARTITIONED" in str(exc):
            return set()
        raise


def catalog_session(metastore_dir: str, master: str | None = None, app_name: str = "pylog-catalog"):
    """A SparkSession with a persistent Hive catalog: an embedded Derby metastore in
    ``metastore_dir`` unless ``hive.metastore.uris`` (hive-site.xml or Spark conf) points
    at a metastore service. ``master`` defaults to spark.master from spark-defaults.conf
    (``$SPARK_CONF_DIR``), else ``local[1]``; other settings come from there as well.
    """
    from pyspark.sql import SparkSession

    os.makedirs(metastore_dir, exist_ok=True)
    database_path = os.path.join(os.path.abspath(metastore_dir), "metastore_db")
    builder = (SparkSession.builder.appName(app_name).enableHiveSupport()
               .config("spark.sql.warehouse.dir", os.path.join(os.path.abspath(metastore_dir), "warehouse"))
               .config("spark.hadoop.javax.jdo.option.ConnectionURL",
                       f"jdbc:derby:;databaseName={database_path};create=true"))
    if master is not None:
        builder = builder.master(master)
    elif not _configured_master():
        builder = builder.master("local[1]")
    return builder.getOrCreate()


def _configured_master() -> bool:
    """True when spark-defaults.conf (SPARK_CONF_DIR) sets spark.master."""
    conf_dir = os.environ.get("SPARK_CONF_DIR")
    if not conf_dir:
        return False
    path = os.path.join(conf_dir, "spark-defaults.conf")
    if not os.path.exists(path):
        return False
    with open(path) as handle:
        return any(line.split()[:1] == ["spark.master"] for line in handle)


def _ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _literal(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")
