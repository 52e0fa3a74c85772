"""``pylog``: one command, with subcommands in the style of Kafka's ``kafka-*.sh`` tools.

Each subcommand lives in its own module under ``pylog.cli`` and exposes
``register(subparsers)``, which adds its parser and sets ``func`` to a callable taking
the parsed arguments and returning an exit status. Heavy imports (pyspark, duckdb) stay
inside those callables so ``pylog --help`` is fast.

User mistakes end as one readable line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from pylog.cli._help import make_plain
from pylog.errors import PylogError

# Modules in pylog.cli that provide a subcommand, in the order --help lists them.
SUBCOMMANDS = (
    "demo",
    "broker",
    "load",
    "compact",
    "tables",
    "query",
    "status",
    "topics",
    "configs",
    "produce",
    "consume",
    "offsets",
    "groups",
    "reassign",
    "leader_election",
    "delete_records",
    "replica_verification",
    "users",
    "acls",
    "mirror",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pylog",
        description="A Kafka-compatible commit log and an exactly-once loader into Parquet.")
    parser.add_argument("--log-level", default="WARNING",
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                        help="logging level for pylog's own messages (default WARNING)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in SUBCOMMANDS:
        importlib.import_module(f"pylog.cli.{name}").register(subparsers)
    make_plain(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:
        # Output piped into `head` and the like: the reader has what it wanted.
        return _closed_pipe()
    except PylogError as exc:
        print(f"pylog {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except (ConnectionError, TimeoutError) as exc:
        print(f"pylog {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _closed_pipe() -> int:
    """Exit status 0 once stdout's reader went away, with nothing printed at exit.

    Python would flush stdout again when it exits and report the broken pipe there,
    so stdout is pointed at /dev/null first.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout is not a real file (tests capture it)
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
