"""``pylog tables``: the loaded tables, their partitions, row counts and freshness.

Row counts come from Parquet footers; freshness is the newest partition, the newest
``_timestamp`` in it, and the last committed run from the loader's audit log.
"""

from __future__ import annotations

from pylog.cli._config import add_config_argument, load


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "tables", help="list loaded tables with partitions, row counts and freshness",
        description="List the tables under the loader's warehouse with their partitions, "
                    "row counts (from Parquet metadata), newest data and last load.")
    add_config_argument(parser)
    parser.add_argument("--partitions", action="store_true",
                        help="also list every partition of each table")
    parser.add_argument("table", nargs="*", help="only these tables (default: all)")
    parser.set_defaults(func=run)


def run(args) -> int:
    from pylog.etl.fs import Storage
    from pylog.etl.state import StateStore
    from pylog.warehouse.render import human_bytes, text_table, utc, utc_ms
    from pylog.warehouse.tables import discover_tables, list_table_names
    from pylog.errors import PylogError

    config = load(args)
    storage = Storage.from_uri(config.warehouse)
    known = list_table_names(storage)
    for name in args.table:
        if name not in known:
            raise PylogError(f"no table {name!r} under {config.warehouse} "
                             f"(tables: {', '.join(known) or 'none yet'})")
    tables = discover_tables(storage, args.table or known)
    if not tables:
        print(f"no tables under {config.warehouse} yet")
        return 0
    state = StateStore(config.state)
    rows = []
    for table in tables:
        audit = state.latest_audit(table.name)
        newest = table.newest_partition
        rows.append([table.name, len(table.partitions), table.files, table.rows, human_bytes(table.size),
                     newest.name if newest else None, utc(table.newest_timestamp),
                     utc_ms(audit.committed_at_ms) if audit else None,
                     audit.run_id if audit else None])
    print(text_table(["table", "partitions", "files", "rows", "size", "newest partition",
                      "newest _timestamp", "last load", "last run id"], rows))
    if args.partitions:
        for table in tables:
            print(f"\n{table.name}")
            print(text_table(["partition", "files", "rows", "size", "newest _timestamp"],
                             [[p.name, p.files, p.rows, human_bytes(p.size), utc(p.newest_timestamp)]
                              for p in table.partitions]))
    return 0
