"""``pylog offsets``: offsets of a topic's partitions at a time (like GetOffsetShell).

    pylog offsets --topic events                       # latest (high watermark)
    pylog offsets --topic events --time earliest
    pylog offsets --topic events --time 2024-05-01T12:00:00Z

Prints ``PARTITION OFFSET`` per line; with a timestamp, the offset is the first record at
or after it, or -1 when there is none.
"""

from __future__ import annotations

import argparse

from pylog.cli._security import add_command_config_argument, security_from_args
from pylog.cli.topics import (
    INT32_MAX, INT64_MAX, add_bootstrap_argument, check_range, check_request_timeout)
from pylog.errors import ConfigError
from pylog.timestamps import epoch_ms


def register(subparsers) -> None:
    parser = subparsers.add_parser("offsets", help="print partition offsets at a time",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topic", required=True, help="the topic whose partitions to list")
    parser.add_argument("--partition", type=int, action="append",
                        help="only this partition (repeatable; default all)")
    parser.add_argument("--time", default="latest",
                        help="earliest, latest, an ISO-8601 timestamp or epoch milliseconds (default latest)")
    add_bootstrap_argument(parser)
    add_command_config_argument(parser)
    parser.set_defaults(func=run)


def parse_timestamp_ms(text: str, option: str) -> int:
    """ISO-8601 (naive means UTC) or integer epoch milliseconds; ConfigError otherwise."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        check_range(option, int(text), -INT64_MAX - 1, INT64_MAX)
        return int(text)
    try:
        return epoch_ms(text)
    except ValueError:
        raise ConfigError(option, f"{text!r} is not an ISO-8601 timestamp "
                                  "(for example 2024-05-01T12:00:00Z) or epoch milliseconds") from None


def resolve_offsets(consumer, topic: str, partitions: list[int], when: str, option: str) -> dict[int, int]:
    """Offsets of ``partitions`` at ``when`` (earliest, latest, or a timestamp: -1 if none)."""
    if when == "earliest":
        return {p: consumer.earliest_offset(topic, p) for p in partitions}
    if when == "latest":
        return {p: consumer.latest_offset(topic, p) for p in partitions}
    found = consumer.offsets_for_times(topic, {p: parse_timestamp_ms(when, option) for p in partitions})
    return {p: -1 if offset is None else offset for p, offset in found.items()}


def run(args) -> int:
    from pylog.client import SimpleConsumer

    if args.time not in ("earliest", "latest"):
        parse_timestamp_ms(args.time, "--time")  # reject a bad value before connecting
    for partition in args.partition or ():
        check_range("--partition", partition, 0, INT32_MAX)
    check_request_timeout(args)
    with SimpleConsumer(args.bootstrap_server, request_timeout_ms=args.request_timeout_ms,
                        security=security_from_args(args)) as consumer:
        partitions = args.partition or consumer.partitions_for(args.topic)
        for partition, offset in sorted(resolve_offsets(consumer, args.topic, partitions,
                                                        args.time, "--time").items()):
            print(f"{partition} {offset}")
    return 0
