"""``pylog status``: offsets, lag, pending runs and the last loads of every configured table,
with an exit status for cron, Airflow sensors and monitoring.

Reads the loader's state store (committed offsets, pending runs and their errors, the
audit index) and the brokers named in the loader's config (latest offsets, and the log
timestamp of the first record not loaded yet, for the lag in seconds). When no broker
answers, everything the state store knows is still shown, marked "broker unreachable".

Exit status (the most severe finding wins):

    0  healthy
    1  the command failed (e.g. a bad config); 2: a usage mistake
    3  no broker answered for some table: its lag is unknown
    4  a partition lags more than --max-lag offsets or --max-lag-seconds
    5  a run failed, or has been pending longer than --max-pending-seconds

    pylog status --max-lag 100000 --max-lag-seconds 7200 || alert
    pylog status --format json | jq '.tables[].lag'
    pylog status --html /var/www/pylog/status.html
    pylog status --serve 0.0.0.0:8090            # a page that refreshes itself
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pylog.cli._config import add_config_argument, load
from pylog.errors import ConfigError


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "status", help="lag, pending runs and the last loads, with an exit status for monitoring",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_argument(parser)
    parser.add_argument("--topics", help="comma-separated topics (default: all configured)")
    parser.add_argument("--format", choices=["text", "json"], default="text",
                        help="text for people (default), or one JSON document for machines")
    parser.add_argument("--max-lag", type=int, metavar="OFFSETS",
                        help="exit 4 when a partition lags more offsets than this")
    parser.add_argument("--max-lag-seconds", type=float, metavar="SECONDS",
                        help="exit 4 when a partition's oldest record not loaded yet is older than this")
    parser.add_argument("--max-pending-seconds", type=float, default=3600.0, metavar="SECONDS",
                        help="exit 5 when a run has been planned but not committed for longer "
                             "(default 3600); a failed run exits 5 at once")
    parser.add_argument("--runs", type=int, default=10, metavar="N",
                        help="the newest N runs of each table to show (default 10)")
    parser.add_argument("--html", metavar="PATH", help="also write the status as an HTML page to PATH")
    parser.add_argument("--serve", metavar="HOST:PORT",
                        help="serve the page over HTTP (/ the page, /status.json the JSON), "
                             "built afresh for every request, until interrupted")
    parser.add_argument("--refresh-seconds", type=int, default=30, metavar="SECONDS",
                        help="with --serve: how often the page reloads itself (default 30)")
    parser.add_argument("--history", action="store_true",
                        help="also list every committed run still kept in the state store, oldest first")
    parser.set_defaults(func=run)


def run(args) -> int:
    from pylog.warehouse.report import Limits

    config = load(args)
    topics = [t.strip() for t in args.topics.split(",") if t.strip()] if args.topics else None
    config.select(topics)  # an unknown topic is a ConfigError before anything else
    for flag, value in (("--max-lag", args.max_lag), ("--max-lag-seconds", args.max_lag_seconds),
                        ("--max-pending-seconds", args.max_pending_seconds)):
        if value is not None and value < 0:
            raise ConfigError(flag, f"must not be negative, got {value}")
    if args.runs < 1:
        raise ConfigError("--runs", f"must be at least 1, got {args.runs}")
    limits = Limits(args.max_lag, args.max_lag_seconds, args.max_pending_seconds)

    def report():
        from pylog.warehouse.report import collect_report

        return collect_report(config, topics, limits, config_path=args.config, recent=args.runs)

    if args.serve:
        from pylog.warehouse.serve import parse_address, serve

        host, port = parse_address(args.serve)
        serve(host, port, report, args.refresh_seconds)
        return 0
    return _print(args, config, topics, report())


def _print(args, config, topics, report) -> int:
    from pylog.warehouse.report import format_report, report_json

    if args.format == "json":
        document = report_json(report)
        if args.history:
            document["history"] = _history_json(config, topics)
        print(json.dumps(document, indent=1))
    else:
        print(format_report(report))
        if args.history:
            from pylog.warehouse.status import collect_history, format_history

            print("\n" + format_history(collect_history(config, topics)))
    if args.html:
        from pylog.log.checkpoint import write_text_atomically
        from pylog.warehouse.page import status_html

        # Temp file + rename: a web server never serves half a page.
        write_text_atomically(Path(args.html), status_html(report), mode=0o644)
        print(f"wrote {args.html}", file=sys.stderr)
    return report.exit_code


def _history_json(config, topics) -> dict:
    from pylog.warehouse.status import collect_history

    return {table: [json.loads(a.to_json()) for a in audits]
            for table, audits in collect_history(config, topics).items()}
