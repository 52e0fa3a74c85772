"""``pylog consume``: print a topic's records (like kafka-console-consumer.sh / kcat -C).

    pylog consume --topic events --offset earliest --max-messages 10
    pylog consume --topic events --partition 0 --offset 1200 --format '%o %k %v'
    pylog consume --topic events --offset @2024-05-01T12:00:00Z --timeout-ms 2000

``--format`` placeholders: %t topic, %p partition, %o offset, %T timestamp (ms), %k key,
%v value, %h headers (k=v,...), %% a percent sign; \\n and \\t are escapes. Each record
is followed by a newline. A null key or value prints as null, as kafka-console-consumer.sh
prints it. Without --max-messages or --timeout-ms it runs until stopped.
"""

from __future__ import annotations

import argparse
import re
import sys
import time

from pylog.cli._security import add_command_config_argument, security_from_args
from pylog.cli.offsets import parse_timestamp_ms, resolve_offsets
from pylog.cli.topics import (
    INT32_MAX, INT64_MAX, add_bootstrap_argument, check_range, check_request_timeout)
from pylog.errors import ConfigError

_TOKEN = re.compile(r"%[tpoTkvh%]|\\[nt\\]")


def register(subparsers) -> None:
    parser = subparsers.add_parser("consume", help="print records of a topic",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topic", required=True, help="the topic to read")
    parser.add_argument("--partition", type=int, help="only this partition (default all)")
    parser.add_argument("--offset", default="latest",
                        help="earliest, latest, an offset N, or @ISO-TIMESTAMP (default latest)")
    parser.add_argument("--from-beginning", action="store_true", help="same as --offset earliest")
    parser.add_argument("--max-messages", type=int, help="exit after this many records")
    parser.add_argument("--timeout-ms", type=int, help="exit when no record arrives for this long")
    parser.add_argument("--format", default="%v", help="output per record (default '%%v')")
    parser.add_argument("--fetch-max-bytes", type=int, default=1048576, help="per partition and fetch")
    add_bootstrap_argument(parser)
    add_command_config_argument(parser)
    parser.set_defaults(func=run)


def compile_format(fmt: str):
    """A function rendering one record as bytes, from a format string."""
    parts = []
    pos = 0
    for match in _TOKEN.finditer(fmt):
        if match.start() > pos:
            parts.append(fmt[pos:match.start()].encode())
        parts.append(match.group())
        pos = match.end()
    if pos < len(fmt):
        parts.append(fmt[pos:].encode())
    fields = {
        "%t": lambda topic, r: topic.encode(), "%o": lambda topic, r: str(r.offset).encode(),
        "%T": lambda topic, r: str(r.timestamp).encode(),
        "%k": lambda topic, r: b"null" if r.key is None else r.key,
        "%v": lambda topic, r: b"null" if r.value is None else r.value, "%%": lambda topic, r: b"%",
        "\\n": lambda topic, r: b"\n", "\\t": lambda topic, r: b"\t", "\\\\": lambda topic, r: b"\\",
        "%h": lambda topic, r: b",".join(k.encode() + b"=" + (v or b"") for k, v in r.headers),
    }

    def render(topic: str, partition: int, record) -> bytes:
        out = []
        for part in parts:
            if isinstance(part, bytes):
                out.append(part)
            elif part == "%p":
                out.append(str(partition).encode())
            else:
                out.append(fields[part](topic, record))
        out.append(b"\n")
        return b"".join(out)

    return render


def _start_offsets(consumer, topic: str, partitions: list[int], offset: str) -> dict[int, int]:
    if offset in ("earliest", "latest"):
        return resolve_offsets(consumer, topic, partitions, offset, "--offset")
    if offset.startswith("@"):
        at = consumer.offsets_for_times(topic, {p: parse_timestamp_ms(offset[1:], "--offset") for p in partitions})
        return {p: consumer.latest_offset(topic, p) if o is None else o for p, o in at.items()}
    if offset.isdigit():
        check_range("--offset", int(offset), 0, INT64_MAX)
        return {p: int(offset) for p in partitions}
    raise ConfigError("--offset", f"expected earliest, latest, an offset or @ISO-TIMESTAMP, got {offset!r}")


def run(args, stdout=None) -> int:
    from pylog.client import SimpleConsumer, TopicPartition

    out = stdout if stdout is not None else sys.stdout.buffer
    render = compile_format(args.format)
    offset = "earliest" if args.from_beginning else args.offset
    # Reject bad values before connecting.
    if offset.startswith("@"):
        parse_timestamp_ms(offset[1:], "--offset")
    elif offset.isdigit():
        check_range("--offset", int(offset), 0, INT64_MAX)
    check_range("--partition", args.partition, 0, INT32_MAX)
    check_range("--fetch-max-bytes", args.fetch_max_bytes, 1, INT32_MAX)
    check_request_timeout(args)
    printed = 0
    with SimpleConsumer(args.bootstrap_server, request_timeout_ms=args.request_timeout_ms,
                        security=security_from_args(args)) as consumer:
        partitions = [args.partition] if args.partition is not None else consumer.partitions_for(args.topic)
        positions = {TopicPartition(args.topic, p): o
                     for p, o in _start_offsets(consumer, args.topic, partitions, offset).items()}
        last_record = time.monotonic()
        while args.max_messages is None or printed < args.max_messages:
            wait_ms = 500 if args.timeout_ms is None else max(1, min(500, args.timeout_ms))
            results = consumer.fetch_many(positions, max_bytes=args.fetch_max_bytes, max_wait_ms=wait_ms)
            got = False
            for tp in sorted(results):
                result = results[tp]
                for record in result.records:
                    if args.max_messages is not None and printed >= args.max_messages:
                        break
                    out.write(render(tp.topic, tp.partition, record))
                    printed += 1
                    got = True
                positions[tp] = result.next_offset
            out.flush()
            if got:
                last_record = time.monotonic()
            elif args.timeout_ms is not None and (time.monotonic() - last_record) * 1000 >= args.timeout_ms:
                break
    return 0
