r"""``pylog topics create|list|describe|alter|delete``: topic administration (like
kafka-topics.sh).

    pylog topics create --topic events --partitions 3 --config retention.ms=86400000
    pylog topics list
    pylog topics describe --topic events
    pylog topics describe --under-replicated-partitions
    pylog topics alter --topic events --partitions 6
    pylog topics delete --topic events

``alter`` adds partitions (--partitions is the new total; partitions are never removed).
Records with a key may then go to another partition than before.

``describe`` prints what kafka-topics.sh --describe prints, tab-separated: per topic
(Configs: those not at their defaults, such as a changed retention.ms)

    Topic: events\tTopicId: 6Zp4X2mXTpqbuYVv7AzG0w\tPartitionCount: 3\tReplicationFactor: 3\tConfigs: retention.ms=60000

and per partition (Leader "none" when it has none; Offline only when replicas are down)

    \tTopic: events\tPartition: 0\tLeader: 1\tReplicas: 1,2,3\tIsr: 1,2\tOffline: 3

With --under-replicated-partitions (ISR smaller than the replica list) and/or
--unavailable-partitions (no leader), only the matching partition lines are printed.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Iterable, Mapping

from pylog.cli._security import add_command_config_argument, security_from_args
from pylog.errors import ConfigError

if TYPE_CHECKING:  # importing pylog.client loads the whole client; `--help` stays fast
    from pylog.client.metadata import PartitionMetadata, TopicMetadata

DESCRIBE_FILTERS = ("--under-replicated-partitions", "--unavailable-partitions")

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
    parser = subparsers.add_parser("topics", help="create, list, describe, alter or delete topics",
                                   description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["create", "list", "describe", "alter", "delete"],
                        help="what to do: create, list, describe, alter or delete")
    parser.add_argument("--topic",
                        help="topic name (create, alter, delete; describe: one topic only)")
    parser.add_argument("--partitions", type=int,
                        help="partitions of a new topic (default 1); alter: the new total")
    parser.add_argument("--replication-factor", type=int,
                        help="replicas of each partition of a new topic (default 1)")
    parser.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                        help="topic setting for create, repeatable (e.g. retention.ms=60000)")
    parser.add_argument("--under-replicated-partitions", action="store_true",
                        help="describe: only partitions whose ISR is smaller than their replicas")
    parser.add_argument("--unavailable-partitions", action="store_true",
                        help="describe: only partitions without a leader")
    add_bootstrap_argument(parser)
    add_command_config_argument(parser)
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

    if args.action in ("create", "alter", "delete") and not args.topic:
        raise ConfigError("--topic", f"required for topics {args.action}")
    check_describe_filters(args)
    check_alter_options(args)
    check_range("--partitions", args.partitions, 1, INT32_MAX)
    check_range("--replication-factor", args.replication_factor, -1, INT16_MAX)
    check_request_timeout(args)
    configs = parse_configs(args.config)
    with Admin(args.bootstrap_server, request_timeout_ms=args.request_timeout_ms,
               security=security_from_args(args)) as admin:
        if args.action == "create":
            admin.create_topic(args.topic, 1 if args.partitions is None else args.partitions,
                               1 if args.replication_factor is None else args.replication_factor,
                               configs)
            print(f"Created topic {args.topic}.")
        elif args.action == "alter":
            admin.create_partitions(args.topic, args.partitions)
            print(f"Topic {args.topic} now has {args.partitions} partitions.")
        elif args.action == "delete":
            admin.delete_topic(args.topic)
            print(f"Deleted topic {args.topic}.")
        elif args.action == "list":
            for name in admin.list_topics():
                print(name)
        else:
            topics = admin.describe_topics([args.topic] if args.topic else None)
            filtered = args.under_replicated_partitions or args.unavailable_partitions
            configs = None if filtered else {
                topic.name: found for topic in topics
                if (found := topic_overrides(admin, topic.name)) is not None}
            for line in describe_lines(topics, under_replicated=args.under_replicated_partitions,
                                       unavailable=args.unavailable_partitions, configs=configs):
                print(line)
    return 0


def topic_overrides(admin, topic: str) -> dict[str, str] | None:
    """The topic's configs that are not the built-in defaults -- set on the topic or in
    the broker's configuration -- as kafka-topics.sh --describe lists them; None when the
    broker cannot describe configs (then the line has no Configs column)."""
    from pylog.errors import UnsupportedVersionError
    from pylog.protocol.configs import ConfigSource

    try:
        entries = admin.describe_configs("topic", topic, synonyms=False)
    except UnsupportedVersionError:
        return None
    return {entry.name: "" if entry.value is None else entry.value
            for entry in entries if entry.source != ConfigSource.DEFAULT_CONFIG}


def check_alter_options(args) -> None:
    """ConfigError unless ``alter`` comes with --partitions and without the options it
    cannot change (the replication factor is changed with ``pylog partitions reassign``)."""
    if args.action != "alter":
        return
    if args.partitions is None:
        raise ConfigError("--partitions", "required for topics alter (the new total)")
    if args.replication_factor is not None:
        raise ConfigError("--replication-factor", "cannot be altered; use pylog partitions "
                                                  "reassign to change the replicas")
    if args.config:
        raise ConfigError("--config", "not supported with topics alter")


def check_describe_filters(args) -> None:
    """ConfigError unless the partition filters, if any, come with ``describe``."""
    if args.action == "describe":
        return
    for option in DESCRIBE_FILTERS:
        if getattr(args, option[2:].replace("-", "_")):
            raise ConfigError(option, f"only valid with topics describe, not {args.action}")


def describe_lines(topics: Iterable[TopicMetadata], *, under_replicated: bool = False,
                   unavailable: bool = False,
                   configs: Mapping[str, Mapping[str, str]] | None = None) -> list[str]:
    """The lines of ``topics describe`` (see the module docstring), without newlines.

    With ``under_replicated`` and/or ``unavailable`` only the partition lines matching
    either filter are returned, and no topic lines (as kafka-topics.sh does).
    ``configs`` maps a topic to its overridden settings; a topic in it gets a
    ``Configs:`` column.
    """
    filtered = under_replicated or unavailable
    lines = []
    for topic in topics:
        partitions = [topic.partitions[index] for index in sorted(topic.partitions)]
        if not filtered:
            lines.append(topic_line(topic, (configs or {}).get(topic.name)))
        lines.extend(partition_line(topic.name, p) for p in partitions
                     if not filtered or (under_replicated and p.under_replicated)
                     or (unavailable and p.unavailable))
    return lines


def topic_line(topic: TopicMetadata, configs: Mapping[str, str] | None = None) -> str:
    r"""``Topic: NAME[\tTopicId: ID]\tPartitionCount: N\tReplicationFactor: R[\tConfigs: k=v,...]``;
    the replication factor is the first partition's replica count (TopicId when the broker
    gave one, as kafka-topics.sh prints it)."""
    first = topic.partitions.get(min(topic.partitions, default=0))
    replication = len(first.replicas) if first else 0
    topic_id = f"\tTopicId: {topic.topic_id}" if topic.topic_id else ""
    line = (f"Topic: {topic.name}{topic_id}\tPartitionCount: {len(topic.partitions)}"
            f"\tReplicationFactor: {replication}")
    if configs is not None:
        line += "\tConfigs: " + ",".join(f"{k}={v}" for k, v in sorted(configs.items()))
    return line


def partition_line(topic: str, p: PartitionMetadata) -> str:
    r"""``\tTopic: T\tPartition: P\tLeader: L\tReplicas: a,b\tIsr: a[\tOffline: b]``."""
    line = (f"\tTopic: {topic}\tPartition: {p.partition}"
            f"\tLeader: {'none' if p.unavailable else p.leader}"
            f"\tReplicas: {_ids(p.replicas)}\tIsr: {_ids(p.isr)}")
    if p.offline_replicas:
        line += f"\tOffline: {_ids(p.offline_replicas)}"
    return line


def _ids(broker_ids: Iterable[int]) -> str:
    return ",".join(map(str, broker_ids))
