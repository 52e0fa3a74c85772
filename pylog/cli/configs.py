"""``pylog configs``: describe and change topic, broker and group configs at run time (like
kafka-configs.sh).

    pylog configs --describe --entity-type topics --entity-name events
    pylog configs --describe --all --entity-type brokers --entity-name 0
    pylog configs --alter --entity-type topics --entity-name events \\
        --add-config retention.ms=3600000,cleanup.policy=[compact,delete]
    pylog configs --alter --entity-type topics --entity-name events --delete-config retention.ms
    pylog configs --alter --entity-type brokers --entity-default --add-config log.retention.ms=3600000
    pylog configs --alter --entity-type brokers --entity-name 0 --add-config max.connections.per.ip=100
    pylog configs --alter --entity-type groups --entity-name app --add-config consumer.session.timeout.ms=50000

``--describe`` prints the configs set on the entity itself (with ``--all``: every config),
as kafka-configs.sh does::

    Dynamic configs for topic events are:
      retention.ms=3600000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=3600000, DEFAULT_CONFIG:log.retention.hours=168}

``--alter`` sets the ``--add-config`` values and returns the ``--delete-config`` keys to the
broker's default, leaving other configs as they are (IncrementalAlterConfigs). A list value
goes in brackets.

A broker's settings that may change while it runs (the topics' defaults such as
``log.retention.ms``, the connection limits, the cleaner's threads) are altered for one
broker (``--entity-name ID``) or for every broker at once (``--entity-default``); they take
effect at once and survive restarts. The others are changed in ``server.properties``, with
a restart. A group's configs are Kafka's group configs (KIP-848; kept and described, see
:mod:`pylog.broker.group_configs`).
"""

from __future__ import annotations

import argparse

from pylog.cli._security import add_command_config_argument, security_from_args
from pylog.cli.topics import add_bootstrap_argument, check_request_timeout
from pylog.errors import ConfigError
from pylog.protocol.configs import ConfigSource

ENTITY_TYPES = ("topics", "brokers", "groups")


def register(subparsers) -> None:
    parser = subparsers.add_parser("configs", help="describe or alter topic, broker and group "
                                                   "configs",
                                   description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--describe", action="store_true", help="list the entity's configs")
    parser.add_argument("--alter", action="store_true",
                        help="change configs (with --add-config and/or --delete-config)")
    parser.add_argument("--entity-type", metavar="topics|brokers|groups",
                        help="what to configure")
    parser.add_argument("--entity-name", metavar="NAME", help="topic name, broker id or group id")
    parser.add_argument("--entity-default", action="store_true",
                        help="brokers: the cluster-wide default of every broker")
    parser.add_argument("--all", action="store_true",
                        help="describe: every config, not only those set on the entity")
    parser.add_argument("--add-config", metavar="K=V,K=[V1,V2]",
                        help="alter: configs to set, comma-separated")
    parser.add_argument("--delete-config", metavar="K,K",
                        help="alter: configs to return to the default, comma-separated")
    add_bootstrap_argument(parser)
    add_command_config_argument(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    from pylog.client import Admin

    check_arguments(args)
    check_request_timeout(args)
    add = parse_add_config(args.add_config) if args.add_config else {}
    delete = parse_delete_config(args.delete_config) if args.delete_config else []
    kind = args.entity_type[:-1]  # "topic", "broker" or "group"
    name = "" if args.entity_default else args.entity_name  # "": the cluster default
    with Admin(args.bootstrap_server, request_timeout_ms=args.request_timeout_ms,
               security=security_from_args(args)) as admin:
        if args.describe:
            entries = admin.describe_configs(kind, name)
            for line in describe_lines(kind, name, entries, show_all=args.all):
                print(line)
        else:
            admin.incremental_alter_configs(kind, name, set_configs=add, delete_configs=delete)
            print(f"Completed updating config for {kind} {name}." if name else
                  "Completed updating default config for brokers in the cluster.")
    return 0


def check_arguments(args) -> None:
    """ConfigError naming the option for any combination that cannot work."""
    if args.describe == args.alter:
        raise ConfigError("--describe/--alter", "give exactly one of them")
    if args.entity_type not in ENTITY_TYPES:
        raise ConfigError("--entity-type", f"expected topics, brokers or groups, got "
                                           f"{args.entity_type!r}")
    if args.entity_default:
        if args.entity_type != "brokers":
            raise ConfigError("--entity-default", "only valid with --entity-type brokers")
        if args.entity_name:
            raise ConfigError("--entity-default", "give --entity-name or --entity-default, "
                                                  "not both")
    elif not args.entity_name:
        raise ConfigError("--entity-name", f"required (the {args.entity_type[:-1]} to "
                                           f"{'describe' if args.describe else 'alter'}; "
                                           f"brokers also take --entity-default)")
    elif args.entity_type == "brokers" and not args.entity_name.isdigit():
        raise ConfigError("--entity-name", f"a broker is named by its id, got "
                                           f"{args.entity_name!r}")
    if args.describe:
        for option in ("add_config", "delete_config"):
            if getattr(args, option):
                raise ConfigError(f"--{option.replace('_', '-')}", "only valid with --alter")
    elif not (args.add_config or args.delete_config):
        raise ConfigError("--alter", "needs --add-config and/or --delete-config")
    elif args.all:
        raise ConfigError("--all", "only valid with --describe")


def parse_add_config(text: str) -> dict[str, str]:
    """``"a=1,b=[x,y]"`` -> ``{"a": "1", "b": "x,y"}`` (brackets hold a list's commas)."""
    items, current, depth = [], "", 0
    for char in text:
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth < 0:
            raise ConfigError("--add-config", f"unbalanced ']' in {text!r}")
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    if depth:
        raise ConfigError("--add-config", f"unbalanced '[' in {text!r}")
    items.append(current)
    configs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError("--add-config", f"expected KEY=VALUE, got {item!r}")
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        configs[key.strip()] = value
    return configs


def parse_delete_config(text: str) -> list[str]:
    """``"a, b"`` -> ``["a", "b"]``."""
    keys = [key.strip() for key in text.split(",")]
    if not all(keys):
        raise ConfigError("--delete-config", f"expected KEY[,KEY...], got {text!r}")
    return keys


def describe_lines(kind: str, name: str, entries, *, show_all: bool = False) -> list[str]:
    """kafka-configs.sh's ``--describe`` output: a heading, then one line per config set on
    the entity itself (with ``show_all``, every config). A broker ``name`` of ``""`` is the
    cluster-wide default."""
    own = {"topic": ConfigSource.DYNAMIC_TOPIC_CONFIG, "group": ConfigSource.GROUP_CONFIG,
           "broker": ConfigSource.DYNAMIC_BROKER_CONFIG if name
           else ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG}[kind]
    shown = [entry for entry in entries if show_all or entry.source == own]
    label = (f"{'All' if show_all else 'Dynamic'} configs for {kind} {name} are:" if name
             else "Default configs for brokers in the cluster are:")
    return [label] + [entry_line(entry) for entry in shown]


def entry_line(entry) -> str:
    """``  key=value sensitive=false synonyms={SOURCE:key=value, ...}``."""
    synonyms = ", ".join(f"{s.source.name}:{s.name}={_text(s.value)}" for s in entry.synonyms)
    return (f"  {entry.name}={_text(entry.value)} "
            f"sensitive={'true' if entry.is_sensitive else 'false'} synonyms={{{synonyms}}}")


def _text(value: str | None) -> str:
    return "null" if value is None else value
