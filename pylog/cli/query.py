"""``pylog query "SELECT ..."``: SQL over the loaded tables with DuckDB.

Each table under the warehouse is a view named after it, with its Hive partition
columns (``dt``, ``hr``) as columns; a configured table or its ``<table>_quarantine``
table without files yet is an empty view. Several statements separated by ``;`` run in
order; the table format shows each result, CSV and JSON take one result.

Output formats (values written the same way in each, see :mod:`pylog.warehouse.values`):
``table`` for people; ``csv`` with a header line; ``json``: JSON Lines, one object per
row. Timestamps are ISO-8601 UTC (``2026-11-25T08:00:00.120Z``); bytes are base64, or
with ``--bytes text`` the UTF-8 text where valid.
"""

from __future__ import annotations

import argparse
import sys

from pylog.cli._config import add_config_argument, load
from pylog.errors import ConfigError


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "query", help="run SQL over the loaded tables (DuckDB)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_argument(parser)
    parser.add_argument("sql", help="the statement(s), for example "
                                    "\"SELECT hr, count(*) FROM page_views GROUP BY hr\"; - reads stdin")
    parser.add_argument("--format", choices=["table", "csv", "json"], default="table",
                        help="output format: table, csv, or json (JSON Lines, one object per row); "
                             "default table")
    parser.add_argument("--bytes", choices=["base64", "text"], dest="bytes_mode",
                        help="how binary values (_key, _value) are written: base64, or text "
                             "(UTF-8 where valid, else base64); default text for the table "
                             "format, base64 for csv and json")
    parser.add_argument("--max-rows", type=int, default=1000,
                        help="rows to print in table format (default 1000)")
    parser.set_defaults(func=run)


def run(args) -> int:
    from pylog.etl.fs import Storage
    from pylog.warehouse.query import QueryError, configured_schemas, run_statements

    config = load(args)
    sql = sys.stdin.read() if args.sql == "-" else args.sql
    if args.max_rows < 0:
        raise ConfigError("--max-rows", f"must not be negative, got {args.max_rows}")
    bytes_mode = args.bytes_mode or ("text" if args.format == "table" else "base64")
    results = run_statements(Storage.from_uri(config.warehouse), sql, configured_schemas(config))
    with_rows = [r for r in results if r.table is not None]
    if args.format == "table":
        from pylog.warehouse.render import arrow_table

        blocks = []
        for result in results:
            heading = f"-- {result.sql.rstrip(';').rstrip()}\n" if len(results) > 1 else ""
            body = arrow_table(result.table, args.max_rows, bytes_mode) if result.table is not None else "OK"
            blocks.append(heading + body)
        print("\n\n".join(blocks))
        return 0
    if len(with_rows) > 1:
        raise QueryError(f"--format {args.format} writes one result, but {len(with_rows)} statements "
                         f"return rows; run them one at a time or use --format table")
    table = with_rows[0].table if with_rows else None
    if args.format == "csv":
        _write_csv(table, bytes_mode)
    elif table is not None:
        from pylog.warehouse.values import json_lines

        for line in json_lines(table.column_names, _rows(table), bytes_mode):
            sys.stdout.write(line + "\n")
    return 0


def _rows(table):
    for batch in table.to_batches(max_chunksize=10_000):
        columns = [column.to_pylist() for column in batch.columns]
        yield from zip(*columns)


def _write_csv(table, bytes_mode: str) -> None:
    import csv

    from pylog.warehouse.values import csv_cell

    if table is None:
        return
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(table.column_names)
    for row in _rows(table):
        writer.writerow([csv_cell(value, bytes_mode) for value in row])
