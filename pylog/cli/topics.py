"""``pylog topics create|list|describe|delete``: topic administration (like kafka-topics.sh).

    pylog topics create --topic events --partitions 3 --config retention.ms=86400000
    pylog topics list
    pylog topics describe --topic events
    pylog topics delete --topic events
"""

from __future__ import annotations

import argparse

from pylog.errors import ConfigError

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def add_bootstrap_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, metavar="HOST:PORT[,...]",
                        help=f"broker(s) to connect to first (default {DEFAULT_BOOTSTRAP})")
    parser.add_argument("--request-timeout-ms", type=int, default=30000, metavar="MS",
                        help="timeout of every network call (default 30000)")


INT16_MAX = (1 << 15) - 1
INT32_MAX = (1 << 31) - 1
INT64_MAX = (1 << 63) - 1


def check_range(option: str, value: int | None, low: int, high: int) -> None:
    """ConfigError naming ``option`` unless ``value`` is None or in ``low..high`` (values
    outside the wire type's range would otherwise fail deep inside the encoder)."""
    if value is not None and not low <= value <= high:
        raise ConfigError(option, f"must be between {low} and {high}, got {value}")


def check_request_timeout(args) -> None:
    check_range("--request-timeout-ms", args.request_timeout_ms, 1, INT32_MAX)


def register(subparsers) -> None:
    parser = subparsers.add_parser("topics", help="create, list, describe or delete topics",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["create", "list", "describe", "delete"])
    parser.add_argument("--topic", help="topic name (create, delete; describe: one topic only)")
    parser.add_argument("--partitions", type=int, default=1, help="partitions of a new topic (default 1)")
    parser.add_argument("--replication-factor", type=int, default=1,
                        help="replicas of each partition of a new topic (default 1)")
    parser.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                        help="topic setting for create, repeatable (e.g. retention.ms=60000)")
    add_bootstrap_argument(parser)
    parser.set_defaults(func=run)


def parse_configs(items: list[str]) -> dict[str, str]:
    configs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError("--config", f"expected KEY=VALUE, got {item!r}")
        configs[key.strip()] = value.strip()
    return configs


def run(args) -> int:
    from pylog.client import Admin

    if args.action in ("create", "delete") and not args.topic:
        raise ConfigError("--topic", f"required for topics {args.action}")
    check_range("--partitions", args.partitions, 1, INT32_MAX)
    check_range("--replication-factor", args.replication_factor, -1, INT16_MAX)
    check_request_timeout(args)
    configs = parse_configs(args.config)
    with Admin(args.bootstrap_server, request_timeout_ms=args.request_timeout_ms) as admin:
        if args.action == "create":
            admin.create_topic(args.topic, args.partitions, args.replication_factor, configs)
            print(f"Created topic {args.topic}.")
        elif args.action == "delete":
            admin.delete_topic(args.topic)
            print(f"Deleted topic {args.topic}.")
        elif args.action == "list":
            for name in admin.list_topics():
                print(name)
        else:
            for name in [args.topic] if args.topic else admin.list_topics():
                _print_description(admin.describe_topic(name))
    return 0


def _print_description(description) -> None:
    partitions = description.partitions
    replication = len(partitions[0].replicas) if partitions else 0
    print(f"Topic: {description.name}\tPartitionCount: {len(partitions)}\tReplicationFactor: {replication}")
    for p in partitions:
        print(f"\tTopic: {description.name}\tPartition: {p.partition}\tLeader: {p.leader}\t"
              f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}")
