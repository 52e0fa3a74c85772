"""``pylog groups list|describe|reset-offsets|delete|delete-offsets``: consumer groups (like
kafka-consumer-groups.sh).

    pylog groups list [--state [Stable,Empty]]
    pylog groups describe --group billing                      # offsets and lag
    pylog groups describe --group billing --members [--verbose]
    pylog groups describe --group billing --state
    pylog groups reset-offsets --group billing --topic invoices --to-earliest --execute
    pylog groups reset-offsets --group billing --topic invoices:0,1 --shift-by -100
    pylog groups reset-offsets --group billing --topic invoices --to-datetime 2024-05-01T12:00:00Z
    pylog groups delete --group billing [--group other]
    pylog groups delete-offsets --group billing --topic invoices[:0,1]

``describe`` prints a row per partition the group has a member on or an offset for:
GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID, with
"-" where a value is unknown. A group without members gets a note on stderr.

``reset-offsets`` prints GROUP TOPIC PARTITION NEW-OFFSET. Without --execute it only shows
the plan (a dry run). It needs a group without active members (state Empty): stop the
consumers first. New offsets stay within each partition's log start and latest offset.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Iterable, Sequence

from pylog.cli._security import add_command_config_argument, security_from_args
from pylog.cli.topics import INT32_MAX, INT64_MAX, add_bootstrap_argument, check_range, check_request_timeout
from pylog.errors import ConfigError, PylogError, RebalanceInProgressError, UnknownMemberIdError, \
    UnsupportedVersionError
from pylog.timestamps import epoch_ms

if TYPE_CHECKING:  # importing pylog.client loads the whole client; `--help` stays fast
    from pylog.client.groups_admin import GroupDescription, GroupsAdmin

ACTIONS = ("list", "describe", "reset-offsets", "delete", "delete-offsets")
SCENARIOS = ("--to-earliest", "--to-latest", "--to-offset", "--shift-by", "--to-datetime")
MISSING = "-"
# Kafka's tool pads its columns to at least this width.
MIN_WIDTH = 15


def register(subparsers) -> None:
    parser = subparsers.add_parser("groups", help="list, describe, reset or delete consumer groups",
                                   description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=ACTIONS, help="what to do: " + ", ".join(ACTIONS))
    parser.add_argument("--group", action="append", default=[],
                        help="group id (delete: repeatable)")
    parser.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,P...]",
                        help="reset-offsets, delete-offsets: a topic, or some of its partitions "
                             "(repeatable)")
    parser.add_argument("--state", nargs="?", const="", default=None, metavar="STATE[,STATE]",
                        help="list: show the STATE column, and only groups in these states if "
                             "given; describe: show the group's state and coordinator")
    parser.add_argument("--members", action="store_true", help="describe: the group's members")
    parser.add_argument("--verbose", action="store_true",
                        help="describe --members: each member's assigned partitions too")
    scenarios = parser.add_mutually_exclusive_group()
    scenarios.add_argument("--to-earliest", action="store_true", help="reset to the log start")
    scenarios.add_argument("--to-latest", action="store_true", help="reset to the latest offset")
    scenarios.add_argument("--to-offset", type=int, metavar="N", help="reset to offset N")
    scenarios.add_argument("--shift-by", type=int, metavar="N",
                           help="move the committed offsets by N (negative: back)")
    scenarios.add_argument("--to-datetime", metavar="ISO-8601",
                           help="reset to the first record at or after this time (no zone: UTC)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true",
                      help="reset-offsets: only print the new offsets (the default)")
    mode.add_argument("--execute", action="store_true", help="reset-offsets: commit them")
    add_bootstrap_argument(parser)
    add_command_config_argument(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    from pylog.client.groups_admin import GroupsAdmin

    check_options(args)
    check_request_timeout(args)
    reset = reset_from_args(args)
    topics = parse_topics(args.topic)
    with GroupsAdmin(args.bootstrap_server, request_timeout_ms=args.request_timeout_ms,
                     security=security_from_args(args)) as admin:
        if args.action == "list":
            return list_groups(admin, parse_states(args.state))
        if args.action == "describe":
            return describe(admin, args.group[0], args)
        if args.action == "reset-offsets":
            return reset_offsets(admin, args.group[0], admin.topic_partitions(topics), reset,
                                 args.execute)
        if args.action == "delete":
            return delete_groups(admin, args.group)
        return delete_offsets(admin, args.group[0], admin.topic_partitions(topics))


# -- options -----------------------------------------------------------------------

def check_options(args) -> None:
    """ConfigError for an option the action does not take, or a missing one."""
    action = args.action
    if action != "list" and not args.group:
        raise ConfigError("--group", f"required for groups {action}")
    if action not in ("list", "delete") and len(args.group) > 1:
        raise ConfigError("--group", f"groups {action} takes one group")
    if action == "list" and args.group:
        raise ConfigError("--group", "not valid with groups list")
    if action in ("reset-offsets", "delete-offsets"):
        if not args.topic:
            raise ConfigError("--topic", f"required for groups {action}")
    elif args.topic:
        raise ConfigError("--topic", f"only valid with reset-offsets and delete-offsets, not {action}")
    if args.state is not None and action not in ("list", "describe"):
        raise ConfigError("--state", f"only valid with list and describe, not {action}")
    if action == "describe" and args.state:
        raise ConfigError("--state", "takes no value with describe")
    for option in ("--members", "--verbose"):
        if getattr(args, option[2:]) and action != "describe":
            raise ConfigError(option, f"only valid with describe, not {action}")
    if args.members and args.state is not None:
        raise ConfigError("--members", "cannot be combined with --state")
    if args.verbose and not args.members:
        raise ConfigError("--verbose", "only valid with describe --members")
    scenario = chosen_scenario(args)
    if action == "reset-offsets" and scenario is None:
        raise ConfigError("reset-offsets", "needs one of " + ", ".join(SCENARIOS))
    if action != "reset-offsets":
        for option in (scenario, "--dry-run" if args.dry_run else None,
                       "--execute" if args.execute else None):
            if option:
                raise ConfigError(option, f"only valid with reset-offsets, not {action}")
    check_range("--to-offset", args.to_offset, 0, INT64_MAX)
    check_range("--shift-by", args.shift_by, -INT64_MAX, INT64_MAX)


def chosen_scenario(args) -> str | None:
    for option in SCENARIOS:
        if getattr(args, option[2:].replace("-", "_")) not in (None, False):
            return option
    return None


def reset_from_args(args):
    """The OffsetReset the options ask for (None unless reset-offsets)."""
    from pylog.client.groups_admin import OffsetReset

    scenario = chosen_scenario(args)
    if args.action != "reset-offsets" or scenario is None:
        return None
    if scenario == "--to-datetime":
        try:
            return OffsetReset("to-datetime", epoch_ms(args.to_datetime))
        except ValueError:
            raise ConfigError("--to-datetime", f"{args.to_datetime!r} is not an ISO-8601 timestamp "
                                               "(for example 2024-05-01T12:00:00Z)") from None
    value = {"--to-offset": args.to_offset, "--shift-by": args.shift_by}.get(scenario, 0)
    return OffsetReset(scenario[2:], value)


def parse_topics(items: Sequence[str]) -> dict[str, list[int] | None]:
    """``["t", "u:0,2"]`` -> ``{"t": None, "u": [0, 2]}`` (None: every partition)."""
    topics: dict[str, list[int] | None] = {}
    for item in items:
        name, sep, partitions = item.partition(":")
        if not name or (sep and not partitions):
            raise ConfigError("--topic", f"expected TOPIC or TOPIC:P,P..., got {item!r}")
        if not sep:
            topics[name] = None
            continue
        try:
            ids = [int(p) for p in partitions.split(",")]
        except ValueError:
            raise ConfigError("--topic", f"partitions must be numbers, got {item!r}") from None
        for partition in ids:
            check_range("--topic", partition, 0, INT32_MAX)
        if name in topics and topics[name] is None:
            continue
        topics[name] = (topics.get(name) or []) + ids
    return topics


def parse_states(text: str | None) -> list[str] | None:
    """``"stable,Empty"`` -> ``["Stable", "Empty"]`` (any case); None or [] as given."""
    from pylog.client.groups_admin import GROUP_STATES

    if not text:
        return None if text is None else []
    by_lower = {s.lower(): s for s in GROUP_STATES}
    states = []
    for word in (w.strip() for w in text.split(",")):
        if word.lower() not in by_lower:
            raise ConfigError("--state", f"{word!r} is not a group state; valid states are "
                                         + ", ".join(GROUP_STATES))
        states.append(by_lower[word.lower()])
    return states


# -- actions -----------------------------------------------------------------------

def list_groups(admin: GroupsAdmin, states: list[str] | None) -> int:
    groups = admin.list_groups(states)
    if states is None:
        for group in groups:
            print(group.group_id)
    else:
        print_table(["GROUP", "STATE"], [[g.group_id, g.state or MISSING] for g in groups])
    return 0


def describe(admin: GroupsAdmin, group: str, args) -> int:
    if args.state is not None:
        description = admin.describe_group(group)
        check_exists(description)
        coordinator = description.coordinator
        print_table(["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
                    [[group, f"{coordinator.address} ({coordinator.broker_id})",
                      description.assignment_strategy or MISSING, description.state,
                      str(len(description.members))]])
        return 0
    if args.members:
        description = admin.describe_group(group)
        check_exists(description)
        note_state(description)
        members = sorted(description.members, key=lambda m: m.member_id)
        header = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
        rows = [[group, m.member_id, m.host, m.client_id, str(len(m.assignment))] for m in members]
        if args.verbose:
            header.append("ASSIGNMENT")
            for row, member in zip(rows, members):
                row.append(assignment_text(member.assignment))
        if rows:
            print_table(header, rows)
        return 0
    description, lags = admin.describe_offsets(group)
    check_exists(description)
    note_state(description)
    if lags:
        print_table(
            ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
             "CONSUMER-ID", "HOST", "CLIENT-ID"],
            [[group, lag.partition.topic, str(lag.partition.partition), _text(lag.current_offset),
              _text(lag.log_end_offset), _text(lag.lag),
              lag.member.member_id if lag.member else MISSING,
              lag.member.host if lag.member else MISSING,
              lag.member.client_id if lag.member else MISSING] for lag in lags])
    return 0


def reset_offsets(admin: GroupsAdmin, group: str, partitions, reset, execute: bool) -> int:
    """Kafka's tool checks the group's state first; a coordinator without DescribeGroups
    (librdkafka's mock cluster) leaves that check to the commit, which it refuses while
    members are active."""
    try:
        description = admin.describe_group(group)
    except UnsupportedVersionError:
        description = None
    if description is not None and description.active:
        raise PylogError(inactive_only(group, f"but the current state is {description.state}."))
    offsets = admin.plan_reset(group, partitions, reset)
    if execute:
        try:
            admin.commit_offsets(group, offsets)
        except (UnknownMemberIdError, RebalanceInProgressError) as exc:
            raise PylogError(inactive_only(group, f"but the coordinator refused: {exc.name}")) from None
    print_table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                [[group, tp.topic, str(tp.partition), str(offset)] for tp, offset in sorted(offsets.items())])
    return 0


def inactive_only(group: str, reason: str) -> str:
    return f"Assignments can only be reset if the group '{group}' is inactive, {reason}"


def delete_groups(admin: GroupsAdmin, groups: list[str]) -> int:
    results = admin.delete_groups(groups)
    deleted = [g for g, error in results.items() if error is None]
    failed = {g: error for g, error in results.items() if error is not None}
    if not failed:
        print(f"Deletion of requested consumer groups ({_quoted(deleted)}) was successful.")
        return 0
    if deleted:
        print(f"These consumer groups were deleted successfully: {_quoted(deleted)}")
    raise PylogError("Deletion of some consumer groups failed: " + " ".join(
        f"* Group '{g}' could not be deleted due to: {error.name}" for g, error in failed.items()))


def delete_offsets(admin: GroupsAdmin, group: str, partitions) -> int:
    results = admin.delete_offsets(group, partitions)
    print_table(["TOPIC", "PARTITION", "STATUS"],
                [[tp.topic, str(tp.partition), "Successful" if error is None else f"Error: {error.name}"]
                 for tp, error in sorted(results.items())])
    failed = sorted(str(tp) for tp, error in results.items() if error is not None)
    if failed:
        raise PylogError(f"offsets of group {group!r} not deleted for {', '.join(failed)}")
    return 0


# -- output ------------------------------------------------------------------------

def check_exists(description: GroupDescription) -> None:
    if not description.exists:
        raise PylogError(f"Consumer group '{description.group_id}' does not exist.")


def note_state(description: GroupDescription) -> None:
    """Kafka's notes for a group without members or in a rebalance (on stderr)."""
    if description.state == "Empty":
        print(f"Consumer group '{description.group_id}' has no active members.", file=sys.stderr)
    elif description.state in ("PreparingRebalance", "CompletingRebalance"):
        print(f"Warning: Consumer group '{description.group_id}' is rebalancing.", file=sys.stderr)


def assignment_text(assignment: Iterable) -> str:
    """``t:0,1;u:2`` as Kafka's tool writes an assignment ("-" when empty)."""
    by_topic: dict[str, list[int]] = {}
    for tp in assignment:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ";".join(f"{topic}:{','.join(map(str, sorted(ps)))}"
                    for topic, ps in sorted(by_topic.items())) or MISSING


def print_table(header: list[str], rows: list[list[str]]) -> None:
    """Columns padded to their widest cell (at least MIN_WIDTH), the last one unpadded."""
    widths = [max([MIN_WIDTH, len(title)] + [len(row[i]) for row in rows])
              for i, title in enumerate(header)]
    for line in [header] + rows:
        print(" ".join(cell.ljust(width) for cell, width in zip(line[:-1], widths)) + " " + line[-1])


def _text(value: int | None) -> str:
    return MISSING if value is None else str(value)


def _quoted(groups: Iterable[str]) -> str:
    return ", ".join(f"'{g}'" for g in groups)
