"""What analysts see of the loader's output: tables, queries, catalog registration, status.

* :mod:`pylog.warehouse.tables` -- find the tables under the warehouse URI, their
  partitions, row counts (from Parquet footers) and freshness.
* :mod:`pylog.warehouse.query` -- SQL over the tables with DuckDB, one view per table.
* :mod:`pylog.warehouse.catalog` -- the same tables in Spark's catalog.
* :mod:`pylog.warehouse.status` -- per partition: latest offset, committed offset, lag,
  and the last run's audit.

Everything goes through the loader's filesystem interface (:class:`pylog.etl.fs.Storage`),
so file://, hdfs:// and webhdfs:// warehouses read the same way.
"""
