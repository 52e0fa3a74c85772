"""``pylog delete-records``: delete the records of partitions below given offsets (like
kafka-delete-records.sh).

    pylog delete-records --bootstrap-server host:9092 --offset-json-file offsets.json

The JSON file lists the partitions and offsets (-1: the high watermark)::

    {"version": 1, "partitions": [{"topic": "foo", "partition": 0, "offset": 1000}]}

Each partition's leader moves its log start offset up to the offset (never down),
deleting the segments wholly below it, and answers once its in-sync replicas have done
the same. The tool prints per partition its new low watermark or the error, e.g.

    partition: foo-0	low_watermark: 1000
    partition: foo-1	error: OFFSET_OUT_OF_RANGE

Exit status: 0 when every partition succeeded, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json

from pylog.cli._security import add_command_config_argument, security_from_args
from pylog.cli.reassign import read_text
from pylog.cli.topics import INT64_MAX, add_bootstrap_argument, check_request_timeout
from pylog.cluster.reassignment_json import (
    ReassignmentJsonError, load_json_object, require_int, require_list, require_topic)
from pylog.types import TopicPartition

OPTION = "--offset-json-file"


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "delete-records", help="delete partitions' records below given offsets",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_bootstrap_argument(parser)
    parser.add_argument(OPTION, required=True, metavar="FILE",
                        help='{"partitions":[{"topic":"foo","partition":0,"offset":1000}]}')
    add_command_config_argument(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    from pylog.client.admin import Admin

    check_request_timeout(args)
    offsets = parse_offsets(read_text(args.offset_json_file, OPTION), args.offset_json_file)
    with Admin(args.bootstrap_server, request_timeout_ms=args.request_timeout_ms,
               security=security_from_args(args)) as admin:
        results = admin.delete_records(offsets)
    print("Records delete operation completed:")
    failed = False
    for tp in offsets:
        result = results[tp]
        if isinstance(result, int):
            print(f"partition: {tp.topic}-{tp.partition}\tlow_watermark: {result}")
        else:
            failed = True
            print(f"partition: {tp.topic}-{tp.partition}\terror: {result.name}")
    return 1 if failed else 0


def parse_offsets(text: str, source: str) -> dict[TopicPartition, int]:
    """The partitions and offsets of the JSON file; ReassignmentJsonError (naming
    ``source``) for malformed JSON, a missing key, a bad offset or a partition listed twice."""
    node = load_json_object(text, source)
    entries = require_list(node, "partitions", source)
    if not entries:
        raise ReassignmentJsonError(source, 'the "partitions" list is empty')
    offsets: dict[TopicPartition, int] = {}
    for index, entry in enumerate(entries):
        where = f"partitions[{index}]: "
        tp = TopicPartition(require_topic(entry, source, where),
                            require_int(entry, "partition", source, where))
        if "offset" not in entry:
            raise ReassignmentJsonError(source, f'{where}missing key "offset"')
        offset = entry["offset"]
        if isinstance(offset, bool) or not isinstance(offset, int) \
                or not -1 <= offset <= INT64_MAX:
            raise ReassignmentJsonError(source, f'{where}"offset" must be -1 or a '
                                                f"non-negative integer, got {json.dumps(offset)}")
        if tp in offsets:
            raise ReassignmentJsonError(source, f"partition {tp} is listed twice")
        offsets[tp] = offset
    return offsets
