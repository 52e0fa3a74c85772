"""``pylog leader-election``: move leadership back to the preferred replicas (like
kafka-leader-election.sh --election-type preferred, done through ZooKeeper as the
ZooKeeper-era kafka-preferred-replica-election.sh did).

    pylog leader-election --zookeeper zk:2181 --election-type preferred --topic foo --partition 0
    pylog leader-election --zookeeper zk:2181 --election-type preferred --all-topic-partitions
    pylog leader-election --zookeeper zk:2181 --election-type preferred --path-to-json-file f.json
    pylog leader-election --bootstrap-server b:9092 --election-type unclean --topic foo --partition 0

The JSON file lists the partitions: {"partitions":[{"topic":"foo","partition":0}]}.

The tool writes /admin/preferred_replica_election, waits (up to --timeout-ms) until the
controller has carried it out and removed the node, then prints per partition whether its
preferred replica (the first of its replicas) now leads, for example

    Successfully completed leader election for partitions foo-0
    Preferred replica 2 is not in sync for foo-1 (leader 1, isr 1,3)

Exit status: 0 when every preferred replica leads, 1 otherwise (also when the controller
does not finish in time).

With --bootstrap-server instead of --zookeeper the tool asks a broker (ElectLeaders, as
kafka-leader-election.sh does), which also takes unclean elections: a partition without a
leader gets a live replica as leader even if it is out of sync (records only the lost
in-sync replicas had are lost). It prints Kafka's lines::

    Successfully completed leader election (UNCLEAN) for partitions foo-0
    Valid replica already elected for partitions foo-1
    Error completing leader election (UNCLEAN) for partition: foo-2: ELIGIBLE_LEADERS_NOT_AVAILABLE: ...

and exits 1 when a partition could not be elected. --all-topic-partitions then means the
partitions the election would change.
"""

from __future__ import annotations

import argparse
import threading
import time
from typing import Callable, Iterable, Mapping

from pylog.cli._security import add_command_config_argument, security_from_args
from pylog.cli._zookeeper import check_connect, read_assignments, read_node, zookeeper_session
from pylog.cli.reassign import read_text
from pylog.cli.topics import INT32_MAX, check_range
from pylog.cluster import layout
from pylog.cluster.metadata import NO_LEADER
from pylog.cluster.reassignment_json import (
    ReassignmentJsonError, load_json_object, require_int, require_list, require_topic)
from pylog.errors import (
    ConfigError, ElectionNotNeededError, KafkaError, PylogError, UnknownTopicOrPartitionError)
from pylog.types import TopicPartition

ELECTION_TYPES = ("preferred", "unclean")


class ElectionInProgressError(PylogError):
    """``/admin/preferred_replica_election`` exists: the controller has not finished the
    previous request."""


class ElectionTimeoutError(PylogError):
    """The controller did not remove the election request within the timeout."""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "leader-election", help="make the preferred replicas the partition leaders again",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--zookeeper", metavar="HOST:PORT[,...][/chroot]",
                       help="the cluster's zookeeper.connect (preferred elections)")
    where.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]",
                       help="ask a broker (ElectLeaders): preferred or unclean elections")
    add_command_config_argument(parser)
    parser.add_argument("--election-type", required=True, type=str.lower, choices=ELECTION_TYPES,
                        help="preferred, or unclean (with --bootstrap-server)")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", help="the topic of the one partition to elect (with --partition)")
    which.add_argument("--all-topic-partitions", action="store_true",
                       help="every partition of every topic")
    which.add_argument("--path-to-json-file", metavar="FILE",
                       help='the partitions as {"partitions":[{"topic":"foo","partition":0}]}')
    parser.add_argument("--partition", type=int, help="the partition to elect (with --topic)")
    parser.add_argument("--timeout-ms", type=int, default=30000, metavar="MS",
                        help="how long to wait for the controller (default 30000)")
    parser.set_defaults(func=run)


def run(args) -> int:
    if args.zookeeper is not None:
        check_connect(args.zookeeper)
        if args.election_type == "unclean":
            raise ConfigError("--election-type", "unclean elections go through a broker: "
                                                 "give --bootstrap-server")
    check_range("--timeout-ms", args.timeout_ms, 1, INT32_MAX)
    if (args.topic is None) != (args.partition is None):
        raise ConfigError("--topic" if args.topic is None else "--partition",
                          "--topic and --partition go together")
    check_range("--partition", args.partition, 0, INT32_MAX)
    requested = None
    if args.path_to_json_file:
        requested = parse_election_partitions(read_text(args.path_to_json_file,
                                                        "--path-to-json-file"),
                                              args.path_to_json_file)
    elif args.topic is not None:
        requested = [TopicPartition(args.topic, args.partition)]
    if args.bootstrap_server is not None:
        return _elect_through_broker(args, requested)

    with zookeeper_session(args.zookeeper) as client:
        if client.exists(layout.PREFERRED_ELECTION):
            raise _in_progress()
        topics = None if requested is None else sorted({tp.topic for tp in requested})
        assignments = read_assignments(client, topics)
        partitions = _check_partitions(requested, assignments)
        _write_request(client, partitions)
        if not wait_for_removal(client, layout.PREFERRED_ELECTION, args.timeout_ms / 1000):
            raise ElectionTimeoutError(
                f"the controller did not complete the election within {args.timeout_ms} ms "
                f"({layout.PREFERRED_ELECTION} is still there; is a controller running?)")
        states = {tp: _read_state(client, tp) for tp in partitions}
    failed = 0
    for tp in partitions:
        ok, line = outcome_line(tp, assignments[tp.topic][tp.partition], states[tp])
        failed += not ok
        print(line)
    return 1 if failed else 0


def _elect_through_broker(args, requested: list[TopicPartition] | None) -> int:
    from pylog.client import Admin

    kind = args.election_type.upper()
    with Admin(args.bootstrap_server, request_timeout_ms=args.timeout_ms,
               security=security_from_args(args)) as admin:
        results = admin.elect_leaders(requested, unclean=kind == "UNCLEAN")
    for line in broker_outcome_lines(kind, results):
        print(line)
    return 1 if any(error is not None and not isinstance(error, ElectionNotNeededError)
                    for error in results.values()) else 0


def broker_outcome_lines(kind: str, results: Mapping[TopicPartition, KafkaError | None]
                         ) -> list[str]:
    """kafka-leader-election.sh's report of an ElectLeaders answer."""
    done = [tp for tp, error in sorted(results.items()) if error is None]
    needless = [tp for tp, error in sorted(results.items())
                if isinstance(error, ElectionNotNeededError)]
    lines = []
    if done:
        lines.append(f"Successfully completed leader election ({kind}) for partitions "
                     f"{', '.join(map(str, done))}")
    if needless:
        lines.append(f"Valid replica already elected for partitions "
                     f"{', '.join(map(str, needless))}")
    for tp, error in sorted(results.items()):
        if error is not None and tp not in needless:
            lines.append(f"Error completing leader election ({kind}) for partition: {tp}: "
                         f"{error.name}: {error}")
    if not results:
        lines.append(f"No partition needed a {kind.lower()} election")
    return lines


def parse_election_partitions(text: str | bytes, source: str) -> list[TopicPartition]:
    """The partitions of a leader-election JSON file, in file order.

    Raises ReassignmentJsonError (naming ``source``) for malformed JSON, a missing or empty
    "partitions" list, an entry without topic or partition, or a partition listed twice.
    """
    entries = require_list(load_json_object(text, source), "partitions", source)
    if not entries:
        raise ReassignmentJsonError(source, 'the "partitions" list is empty')
    partitions: list[TopicPartition] = []
    for index, entry in enumerate(entries):
        where = f"partitions[{index}]: "
        tp = TopicPartition(require_topic(entry, source, where),
                            require_int(entry, "partition", source, where))
        if tp in partitions:
            raise ReassignmentJsonError(source, f"partition {tp} is listed twice")
        partitions.append(tp)
    return partitions


def outcome_line(tp: TopicPartition, replicas: tuple[int, ...],
                 state: layout.PartitionStateNode | None) -> tuple[bool, str]:
    """(preferred replica leads, the line to print) for one partition after the election."""
    preferred = replicas[0]
    leader = state.leader if state is not None else NO_LEADER
    if leader == preferred:
        return True, f"Successfully completed leader election for partitions {tp}"
    isr = state.isr if state is not None else ()
    where = (f"(leader {'none' if leader == NO_LEADER else leader}, "
             f"isr {','.join(map(str, isr)) or 'none'})")
    if preferred not in isr:
        return False, f"Preferred replica {preferred} is not in sync for {tp} {where}"
    return False, f"Preferred replica {preferred} did not become the leader of {tp} {where}"


def wait_for_removal(client, path: str, timeout_s: float,
                     clock: Callable[[], float] = time.monotonic) -> bool:
    """Wait until ``path`` does not exist (True) or ``timeout_s`` passes (False); a watch
    wakes the wait as soon as the node changes."""
    changed = threading.Event()

    def watch(_event) -> None:
        changed.set()

    deadline = clock() + timeout_s
    while True:
        changed.clear()
        if client.exists(path, watch=watch) is None:
            return True
        remaining = deadline - clock()
        if remaining <= 0:
            return False
        changed.wait(remaining)


def _check_partitions(requested: Iterable[TopicPartition] | None,
                      assignments: Mapping[str, Mapping[int, tuple[int, ...]]],
                      ) -> list[TopicPartition]:
    """The partitions to elect, sorted; every one must exist."""
    if requested is None:
        partitions = [TopicPartition(topic, p) for topic, assignment in assignments.items()
                      for p in assignment]
        if not partitions:
            raise ConfigError("--all-topic-partitions", "the cluster has no topics")
        return sorted(partitions)
    for tp in requested:
        if tp.partition not in assignments.get(tp.topic, {}):
            raise UnknownTopicOrPartitionError(
                f"partition {tp} does not exist" if tp.topic in assignments
                else f"topic {tp.topic!r} does not exist")
    return sorted(requested)


def _write_request(client, partitions: list[TopicPartition]) -> None:
    from kazoo.exceptions import NodeExistsError

    data = layout.encode_preferred_election((tp.topic, tp.partition) for tp in partitions)
    try:
        client.create(layout.PREFERRED_ELECTION, data, makepath=True)
    except NodeExistsError:
        raise _in_progress() from None


def _read_state(client, tp: TopicPartition) -> layout.PartitionStateNode | None:
    data = read_node(client, layout.partition_state_path(tp.topic, tp.partition))
    return None if data is None else layout.PartitionStateNode.decode(data)


def _in_progress() -> ElectionInProgressError:
    return ElectionInProgressError(
        f"a preferred replica election is already in progress ({layout.PREFERRED_ELECTION} "
        "exists); try again when the controller has removed it")
