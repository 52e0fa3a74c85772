"""``pylog produce``: send lines from stdin to a topic (like kafka-console-producer.sh).

    printf 'hello\\nworld\\n' | pylog produce --topic events
    printf 'user-1:clicked\\n' | pylog produce --topic events --key-separator : --compression zstd

Each line (without its newline) is one record. With ``--key-separator`` the text before
the first separator is the key. Exits non-zero with one line on stderr if any record
could not be delivered.
"""

from __future__ import annotations

import argparse
import sys

from pylog.cli._security import add_command_config_argument, security_from_args
from pylog.cli.topics import INT32_MAX, add_bootstrap_argument, check_range, check_request_timeout
from pylog.errors import ConfigError, PylogError

_CHECK_EVERY = 50_000


def register(subparsers) -> None:
    parser = subparsers.add_parser("produce", help="send lines from stdin to a topic",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--key-separator", metavar="SEP",
                        help="split each line into KEY SEP VALUE at the first SEP")
    parser.add_argument("--partition", type=int, help="send every record to this partition")
    parser.add_argument("--compression", default="none", help="none, gzip, snappy, lz4 or zstd")
    parser.add_argument("--acks", default="1", help="0, 1 or all (default 1)")
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=16384)
    add_bootstrap_argument(parser)
    add_command_config_argument(parser)
    parser.set_defaults(func=run)


def run(args, stdin=None) -> int:
    from pylog.client import Producer

    lines = stdin if stdin is not None else sys.stdin.buffer
    separator = args.key_separator.encode() if args.key_separator else None
    if args.key_separator == "":
        raise ConfigError("--key-separator", "must not be empty")
    check_range("--partition", args.partition, 0, INT32_MAX)
    check_range("--linger-ms", args.linger_ms, 0, INT32_MAX)
    check_range("--batch-size", args.batch_size, 1, INT32_MAX)
    check_request_timeout(args)
    futures = []
    with Producer(args.bootstrap_server, acks=args.acks, linger_ms=args.linger_ms,
                  batch_size=args.batch_size, compression=args.compression,
                  request_timeout_ms=args.request_timeout_ms,
                  security=security_from_args(args)) as producer:
        for number, line in enumerate(lines, 1):
            line = line.rstrip(b"\n").rstrip(b"\r")
            key = None
            if separator is not None:
                key, found, value = line.partition(separator)
                if not found:
                    producer.flush()
                    raise ConfigError("--key-separator", f"line {number} has no {args.key_separator!r}")
                line = value
            futures.append(producer.send(args.topic, line, key=key, partition=args.partition))
            if len(futures) >= _CHECK_EVERY:
                producer.flush()
                _check(futures)
                futures = []
        producer.flush()
    _check(futures)
    return 0


def _check(futures) -> None:
    failed = [f.exception() for f in futures if f.exception() is not None]
    if failed:
        first = failed[0]
        raise PylogError(f"{len(failed)} of {len(futures)} records not delivered: "
                         f"{type(first).__name__}: {first}") from first
