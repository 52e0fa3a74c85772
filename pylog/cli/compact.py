"""``pylog compact``: rewrite table partitions' small files into files of ``target_file_mb``.

Runs in this process (pyarrow, no Spark), table by table under the loads' table lock,
waiting up to ``compaction.lock_wait_seconds`` for a load holding it. A compaction that
was killed is finished by the next one. See :mod:`pylog.etl.compact`.

    pylog compact --config conf/loader.yaml                      # every table, every partition
    pylog compact --config conf/loader.yaml --table page_views --older-than 2h
"""

from __future__ import annotations


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "compact", help="rewrite small files of loaded table partitions into large ones",
        description="Rewrite each table partition's small files into files of target_file_mb, "
                    "keeping every row exactly once (journalled swap under the table lock).")
    parser.add_argument("--config", required=True, help="loader configuration (conf/loader.yaml)")
    parser.add_argument("--table", action="append", metavar="TABLE",
                        help="a table (or its topic) to compact; repeatable (default: every table)")
    parser.add_argument("--older-than", metavar="DURATION",
                        help="only partitions whose hour ended at least this long ago, e.g. 90m, 2h, "
                             "1d (default: every partition, the current hour's too)")
    parser.set_defaults(func=run)


def run(args) -> int:
    from pylog.etl import faults
    from pylog.etl.compact import compact_tables, format_compactions
    from pylog.etl.config import load_config, parse_duration_seconds

    config = load_config(args.config)
    older_than = None if args.older_than is None else parse_duration_seconds(args.older_than, "--older-than")
    results = compact_tables(config, args.table, older_than, fault=faults.from_env())
    print(format_compactions(results))
    return 0
