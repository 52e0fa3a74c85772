"""``pylog query "SELECT ..."``: SQL over the loaded tables with DuckDB.

Each table under the warehouse is a view named after it, with its Hive partition
columns (``dt``, ``hr``) as columns.
"""

from __future__ import annotations

import sys

from pylog.cli._config import add_config_argument, load


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "query", help="run SQL over the loaded tables (DuckDB)",
        description="Run one SQL statement over the loaded tables with DuckDB. Every table "
                    "is a view of the same name; dt and hr are columns.")
    add_config_argument(parser)
    parser.add_argument("sql", help="the statement, for example "
                                    "\"SELECT hr, count(*) FROM page_views GROUP BY hr\"; - reads stdin")
    parser.add_argument("--format", choices=["table", "csv", "json"], default="table",
                        help="output format (default table)")
    parser.add_argument("--max-rows", type=int, default=1000,
                        help="rows to print in table format (default 1000)")
    parser.set_defaults(func=run)


def run(args) -> int:
    from pylog.etl.fs import Storage
    from pylog.warehouse.query import run_query

    config = load(args)
    sql = sys.stdin.read() if args.sql == "-" else args.sql
    result = run_query(Storage.from_uri(config.warehouse), sql)
    if args.format == "table":
        from pylog.warehouse.render import arrow_table

        print(arrow_table(result, max_rows=args.max_rows))
    elif args.format == "csv":
        import pyarrow.csv as pacsv

        pacsv.write_csv(result, sys.stdout.buffer)
    else:
        import json

        for row in result.to_pylist():
            print(json.dumps(row, default=str))
    return 0
