"""``pylog status``: per topic and partition, latest and committed offsets, lag, last run.

Reads the brokers named in the loader's config (ListOffsets) and the loader's state
store (committed offsets, the audit index). ``--history`` also lists every committed
run still kept (``state_retention_days``), reading one file per run.
"""

from __future__ import annotations

from pylog.cli._config import add_config_argument, load


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "status", help="offsets, lag and the last load of every configured topic",
        description="For every topic in the loader's config: each partition's log start, "
                    "latest and committed offsets and the lag between them, then each "
                    "table's last committed run (records fetched, written, quarantined).")
    add_config_argument(parser)
    parser.add_argument("--topics", help="comma-separated topics (default: all configured)")
    parser.add_argument("--html", metavar="PATH", help="also write the status as an HTML page to PATH")
    parser.add_argument("--history", action="store_true",
                        help="also list every committed run still kept in the state store, oldest first")
    parser.set_defaults(func=run)


def run(args) -> int:
    from pylog.warehouse.status import (collect_history, collect_status, format_history, format_status,
                                        status_page)

    config = load(args)
    topics = [t.strip() for t in args.topics.split(",") if t.strip()] if args.topics else None
    statuses = collect_status(config, topics)
    print(format_status(statuses))
    if getattr(args, "history", False):
        print("\n" + format_history(collect_history(config, topics)))
    if args.html:
        with open(args.html, "w") as handle:
            handle.write(status_page(statuses))
        print(f"\nwrote {args.html}")
    return 0
