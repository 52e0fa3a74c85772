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


# Subcommands whose action is a word (``pylog topics create``) that Kafka's scripts spell
# as a flag (``kafka-topics.sh --create``): the flag works too, so scripts written for
# Kafka's tools run with ``pylog`` in their place.
KAFKA_ACTION_FLAGS = {
    "topics": ("create", "list", "describe", "alter", "delete"),
    "acls": ("add", "list", "remove"),
    "groups": ("list", "describe", "reset-offsets", "delete", "delete-offsets"),
}
# Flags of Kafka's scripts that mean nothing here: kafka-acls.sh --force skips a prompt
# pylog never shows.
KAFKA_NO_OP_FLAGS = {"acls": ("--force",)}


def kafka_style(argv: list[str]) -> list[str]:
    """``argv`` with a Kafka-style action flag (``topics --create ...``) turned into the
    action word (``topics create ...``), when no action word is given."""
    command = _command_index(argv)
    if command is None or argv[command] not in KAFKA_ACTION_FLAGS:
        return argv
    name, rest = argv[command], argv[command + 1:]
    actions = KAFKA_ACTION_FLAGS[name]
    rest = [arg for arg in rest if arg not in KAFKA_NO_OP_FLAGS.get(name, ())]
    flags = [arg for arg in rest if arg.startswith("--") and arg[2:] in actions]
    if len(flags) > 1:
        raise KafkaStyleError(f"pylog {name}: error: one action at a time, got "
                              + " and ".join(flags))
    if not flags or any(arg in actions for arg in rest):
        return argv[:command + 1] + rest  # argparse says what is wrong, if anything
    rest.remove(flags[0])
    return argv[:command + 1] + [flags[0][2:]] + rest


class KafkaStyleError(Exception):
    """Kafka-style flags that ask for more than one action."""


def _command_index(argv: list[str]) -> int | None:
    """Where the subcommand is: the first word that is neither an option of ``pylog``
    itself nor its value."""
    skip = False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
        elif arg == "--log-level":
            skip = True
        elif not arg.startswith("-"):
            return i
    return None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        argv = kafka_style(sys.argv[1:] if argv is None else list(argv))
    except KafkaStyleError as exc:
        print(exc, file=sys.stderr)
        return 2
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
