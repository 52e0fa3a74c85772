"""``pylog acls``: add, list and remove ACLs on a running cluster (like kafka-acls.sh).

    pylog acls add --allow-principal User:alice --operation Read --operation Describe \\
        --topic events --bootstrap-server broker:9092
    pylog acls add --allow-principal User:loader --operation Read --topic logs. \\
        --resource-pattern-type prefixed
    pylog acls add --deny-principal User:mallory --deny-host 10.0.0.9 --operation All --cluster
    pylog acls list --topic events --resource-pattern-type match
    pylog acls remove --allow-principal User:alice --operation Read --topic events

``add`` makes one ACL per principal, host and operation (hosts default to ``*``, the
operation to ``All``) on each resource given (``--topic``, ``--group``,
``--transactional-id``, ``--cluster``), with the pattern type ``literal`` (default) or
``prefixed``. ``list`` shows the ACLs on the resources given (all of them when none is),
filtered by ``--principal``; its pattern type defaults to ``any``; ``match`` also shows the
wildcard and prefixed ACLs that apply. ``remove`` deletes what the given principals,
hosts and operations select (with none: every ACL on the resource). The output is
kafka-acls.sh's::

    Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=events, patternType=LITERAL)`:
     	(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)

The ACL APIs need Cluster Alter (add, remove) or Describe (list); a principal comes from
``--command-config`` (security settings), as the other commands do.
"""

from __future__ import annotations

import argparse
from itertools import groupby

from pylog.cli._security import add_command_config_argument, security_from_args
from pylog.cli.topics import add_bootstrap_argument, check_request_timeout
from pylog.errors import ConfigError
from pylog.security.acls import (
    CLUSTER_NAME, AccessControlEntry, AclBinding, AclBindingFilter, AclOperation,
    AclPermission, PatternType, ResourcePattern, ResourceType, binding_sort_key)

ACTIONS = ("add", "list", "remove")


def register(subparsers) -> None:
    parser = subparsers.add_parser("acls", help="add, list or remove ACLs",
                                   description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=ACTIONS, help="what to do: " + ", ".join(ACTIONS))
    for side in ("allow", "deny"):
        parser.add_argument(f"--{side}-principal", action="append", default=[],
                            metavar="TYPE:NAME", help=f"principal to {side} (repeatable)")
        parser.add_argument(f"--{side}-host", action="append", default=[], metavar="HOST",
                            help=f"host the {side} applies to (repeatable; default *)")
    parser.add_argument("--principal", action="append", default=[], metavar="TYPE:NAME",
                        help="list: only the ACLs of this principal (repeatable)")
    parser.add_argument("--operation", action="append", default=[], metavar="OPERATION",
                        help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
                             "DescribeConfigs, AlterConfigs, IdempotentWrite or All "
                             "(repeatable; add defaults to All)")
    parser.add_argument("--topic", action="append", default=[], help="a topic (repeatable)")
    parser.add_argument("--group", action="append", default=[], help="a group (repeatable)")
    parser.add_argument("--transactional-id", action="append", default=[],
                        help="a transactional id (repeatable)")
    parser.add_argument("--cluster", action="store_true", help="the cluster itself")
    parser.add_argument("--resource-pattern-type", metavar="literal|prefixed|match|any",
                        help="how resource names are read (add: literal or prefixed; "
                             "default literal, list: any)")
    add_bootstrap_argument(parser)
    add_command_config_argument(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    from pylog.client import Admin

    check_request_timeout(args)
    patterns = resource_patterns(args)
    # Every mistake in the arguments is reported before anything is sent.
    if args.action == "add":
        bindings = [AclBinding(p, e) for p in patterns for e in entries(args)]
    elif args.action == "list":
        filters = list_filters(args, patterns)
    else:
        filters = remove_filters(args, patterns)
    with Admin(args.bootstrap_server, request_timeout_ms=args.request_timeout_ms,
               security=security_from_args(args)) as admin:
        if args.action == "add":
            admin.create_acls(bindings)
            for pattern in patterns:
                _print_block("Adding ACLs for resource", pattern,
                             [b.entry for b in bindings if b.pattern == pattern])
            _print_current(admin, patterns)
        elif args.action == "list":
            found = [b for acl_filter in filters for b in admin.describe_acls(acl_filter)]
            _print_grouped("Current ACLs for resource", found)
        else:
            _print_grouped("Removed ACLs for resource",
                           [b for deleted in admin.delete_acls(filters) for b in deleted])
            _print_current(admin, patterns)
    return 0


def _print_grouped(title: str, bindings: list[AclBinding]) -> None:
    for pattern, group in groupby(sorted(set(bindings), key=binding_sort_key),
                                  key=lambda b: b.pattern):
        _print_block(title, pattern, [b.entry for b in group])


def _print_block(title: str, pattern: ResourcePattern, acl_entries) -> None:
    print(f"{title} `{pattern}`: ")
    for entry in acl_entries:
        print(f" \t{entry} ")
    print()


def _print_current(admin, patterns: list[ResourcePattern]) -> None:
    for pattern in patterns:
        current = admin.describe_acls(AclBindingFilter(
            pattern.resource_type, pattern.name, pattern.pattern_type))
        _print_block("Current ACLs for resource", pattern, [b.entry for b in current])


def _pattern_type(args) -> PatternType:
    default = "any" if args.action == "list" else "literal"
    text = args.resource_pattern_type or default
    try:
        pattern_type = PatternType.parse(text)
    except ValueError:
        pattern_type = PatternType.UNKNOWN
    allowed = ((PatternType.LITERAL, PatternType.PREFIXED) if args.action == "add"
               else (PatternType.LITERAL, PatternType.PREFIXED, PatternType.MATCH,
                     PatternType.ANY))
    if pattern_type not in allowed:
        raise ConfigError("--resource-pattern-type",
                          f"expected {' or '.join(p.label.lower() for p in allowed)} with "
                          f"{args.action}, got {text!r}")
    return pattern_type


def resource_patterns(args) -> list[ResourcePattern]:
    """The resources the arguments name; ConfigError if add or remove names none."""
    pattern_type = _pattern_type(args)
    patterns = [ResourcePattern(ResourceType.TOPIC, t, pattern_type) for t in args.topic]
    patterns += [ResourcePattern(ResourceType.GROUP, g, pattern_type) for g in args.group]
    patterns += [ResourcePattern(ResourceType.TRANSACTIONAL_ID, t, pattern_type)
                 for t in args.transactional_id]
    if args.cluster:
        patterns.append(ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME,
                                        PatternType.LITERAL if args.action == "add"
                                        else pattern_type))
    if any(not p.name for p in patterns):
        raise ConfigError("--topic/--group/--transactional-id", "a resource name is empty")
    if not patterns and args.action != "list":
        raise ConfigError("--topic/--group/--transactional-id/--cluster",
                          f"{args.action} needs at least one resource")
    return patterns


def _operations(args, default: AclOperation | None) -> list[AclOperation]:
    operations = []
    for text in args.operation:
        try:
            operation = AclOperation.parse(text)
        except ValueError as error:
            raise ConfigError("--operation", str(error)) from None
        if not operation.code_is_concrete():
            raise ConfigError("--operation", f"expected a concrete operation, got {text!r}")
        operations.append(operation)
    return operations or ([default] if default is not None else [])


def _principals(option: str, values: list[str]) -> list[str]:
    for value in values:
        kind, sep, name = value.partition(":")
        if not sep or not kind or not name:
            raise ConfigError(option, f"expected TYPE:NAME such as User:alice, got {value!r}")
    return values


def entries(args) -> list[AccessControlEntry]:
    """Every (principal, host, operation, permission) the add arguments ask for."""
    found = []
    for side, permission in (("allow", AclPermission.ALLOW), ("deny", AclPermission.DENY)):
        principals = _principals(f"--{side}-principal", getattr(args, f"{side}_principal"))
        hosts = getattr(args, f"{side}_host")
        if hosts and not principals:
            raise ConfigError(f"--{side}-host", f"needs --{side}-principal")
        for principal in principals:
            for host in hosts or ["*"]:
                for operation in _operations(args, AclOperation.ALL):
                    found.append(AccessControlEntry(principal, host, operation, permission))
    if not found:
        raise ConfigError("--allow-principal/--deny-principal", "add needs a principal")
    return found


def list_filters(args, patterns: list[ResourcePattern]) -> list[AclBindingFilter]:
    principals = _principals("--principal", args.principal) or [None]
    if not patterns:
        return [AclBindingFilter(principal=p) for p in principals]
    return [AclBindingFilter(pattern.resource_type, pattern.name, pattern.pattern_type, p)
            for pattern in patterns for p in principals]


def remove_filters(args, patterns: list[ResourcePattern]) -> list[AclBindingFilter]:
    """Filters selecting what ``remove`` deletes: every ACL on the resources, narrowed by
    the principals, hosts and operations given."""
    sides = []
    for side, permission in (("allow", AclPermission.ALLOW), ("deny", AclPermission.DENY)):
        principals = _principals(f"--{side}-principal", getattr(args, f"{side}_principal"))
        hosts = getattr(args, f"{side}_host") or [None]
        sides += [(principal, host, permission) for principal in principals for host in hosts]
    if not sides:
        sides = [(None, None, AclPermission.ANY)]
    operations = _operations(args, None) or [AclOperation.ANY]
    return [AclBindingFilter(p.resource_type, p.name, p.pattern_type, principal, host,
                             operation, permission)
            for p in patterns for principal, host, permission in sides
            for operation in operations]
