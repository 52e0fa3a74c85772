"""``pylog partitions reassign``: move partition replicas between brokers (like the
ZooKeeper-era kafka-reassign-partitions.sh).

    pylog partitions reassign --zookeeper zk:2181 --generate \\
        --topics-to-move-json-file topics.json --broker-list 1,2,3
    pylog partitions reassign --zookeeper zk:2181 --execute --reassignment-json-file plan.json
    pylog partitions reassign --zookeeper zk:2181 --verify --reassignment-json-file plan.json
    pylog partitions reassign --bootstrap-server b:9092 --execute --reassignment-json-file plan.json

--generate prints the current assignment of the topics and a proposal that places them
over the given brokers, keeping each topic's replication factor. Nothing is written.

--execute checks the plan (every partition exists, every broker is registered, no broker
twice in a partition, no partition twice), prints the current assignment (keep it to roll
back) and writes /admin/reassign_partitions, which the controller carries out. It is
refused while another reassignment is in progress; nothing is written when a check fails.

With --bootstrap-server instead of --zookeeper the tool asks a broker, as Kafka 3's tool
does (Metadata, AlterPartitionReassignments, ListPartitionReassignments): --execute then
adds its partitions to a reassignment already under way instead of being refused, and
--throttle BYTES/S caps their replication (KIP-73): the rate, each way, on every broker
holding or getting one of their replicas, and on each topic the replicas it applies to.
Executing again with another --throttle changes the rate of a move under way.

--verify prints, per partition of the plan, whether its reassignment is completed, still
in progress, or failed (no longer pending, yet the replicas differ from the plan).
Exit status: 0 when every partition is completed, 1 otherwise. Once every partition is
completed and nothing else is moving, it removes the throttles (--preserve-throttles: not).

File formats (those of kafka-reassign-partitions.sh):

    topics to move:  {"version":1,"topics":[{"topic":"foo"}]}
    reassignment:    {"version":1,"partitions":[{"topic":"foo","partition":0,"replicas":[2,3]}]}
"""

from __future__ import annotations

import argparse
import enum
from contextlib import contextmanager
from typing import Iterable, Mapping

from pylog.cli._security import add_command_config_argument, security_from_args
from pylog.cli._zookeeper import (
    check_connect, read_assignments, read_node, registered_brokers, zookeeper_session)
from pylog.cluster.placement import assign_replicas
from pylog.cluster.reassignment_json import (
    REASSIGN_PARTITIONS, PartitionReassignment, check_against_cluster, decode_reassignment,
    encode_reassignment, parse_reassignment, parse_topics_to_move, reassignments_of)
from pylog.errors import ConfigError, ReassignmentInProgressError  # generated from the code table
from pylog.types import TopicPartition

CURRENT_HEADING = "Current partition replica assignment"
PROPOSED_HEADING = "Proposed partition reassignment configuration"


class ReassignmentStatus(enum.Enum):
    COMPLETED = "completed"
    IN_PROGRESS = "in progress"
    FAILED = "failed"


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "partitions", help="reassign partition replicas to other brokers",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["reassign"], help="reassign: move replicas")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--zookeeper", metavar="HOST:PORT[,...][/chroot]",
                       help="the cluster's zookeeper.connect")
    where.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]",
                       help="ask a broker instead (AlterPartitionReassignments): moves join "
                            "those under way")
    add_command_config_argument(parser)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--generate", action="store_true",
                      help="propose an assignment of --topics-to-move-json-file over --broker-list")
    mode.add_argument("--execute", action="store_true",
                      help="start the reassignment of --reassignment-json-file")
    mode.add_argument("--verify", action="store_true",
                      help="report the progress of --reassignment-json-file "
                           "(exit status 0 when all completed, 1 otherwise)")
    parser.add_argument("--topics-to-move-json-file", metavar="FILE",
                        help="--generate: the topics to place anew")
    parser.add_argument("--broker-list", metavar="ID,ID,...",
                        help="--generate: the broker ids to place the topics over")
    parser.add_argument("--reassignment-json-file", metavar="FILE",
                        help="--execute, --verify: the partitions and their new replicas")
    parser.add_argument("--throttle", metavar="BYTES/S", type=int,
                        help="--execute with --bootstrap-server: cap the replication of the "
                             "moving partitions at this rate (per broker, each way) until "
                             "--verify finds them all moved")
    parser.add_argument("--preserve-throttles", action="store_true",
                        help="--verify: leave the throttles in place when all moves are done")
    parser.set_defaults(func=run)


def run(args) -> int:
    if args.zookeeper is not None:
        check_connect(args.zookeeper)
    if args.generate:
        return generate(args)
    if args.execute:
        return execute(args)
    return verify(args)


# -- the three modes ------------------------------------------------------------------

def generate(args) -> int:
    _refuse(args, "--generate", "--reassignment-json-file", "--throttle")
    source = _require(args, "--generate", "--topics-to-move-json-file")
    _require(args, "--generate", "--broker-list")
    broker_ids = parse_broker_list(args.broker_list)
    topics = parse_topics_to_move(read_text(source, "--topics-to-move-json-file"), source)
    with _cluster(args) as cluster:
        assignments = cluster.assignments(topics)
        registered = cluster.registered()
    missing = [topic for topic in topics if topic not in assignments]
    if missing:
        raise ConfigError("--topics-to-move-json-file",
                          f"topic(s) {', '.join(missing)} do not exist")
    unknown = sorted(set(broker_ids) - set(registered))
    if unknown:
        raise ConfigError("--broker-list", f"broker(s) {_ids(unknown)} are not registered "
                                           f"(registered: {_ids(registered) or 'none'})")
    print(CURRENT_HEADING)
    print(_json(reassignments_of(assignments)))
    print()
    print(PROPOSED_HEADING)
    print(_json(propose(assignments, broker_ids)))
    return 0


def execute(args) -> int:
    if args.preserve_throttles:
        raise ConfigError("--preserve-throttles", "not valid with --execute")
    if args.throttle is not None:
        if args.zookeeper is not None:
            raise ConfigError("--throttle", "needs --bootstrap-server (the brokers set the "
                                            "throttles as dynamic configs)")
        if args.throttle < 1:
            raise ConfigError("--throttle", f"must be at least 1 byte/s, got {args.throttle}")
    plan, source = _read_plan(args, "--execute")
    with _cluster(args) as cluster:
        cluster.check_can_start()
        assignments = cluster.assignments(sorted({r.topic for r in plan}))
        check_against_cluster(plan, assignments, cluster.registered(), source)
        current = [PartitionReassignment(r.topic, r.partition, assignments[r.topic][r.partition])
                   for r in plan]
        print(CURRENT_HEADING)
        print()
        print(_json(current))
        print()
        print("Save this to use as the --reassignment-json-file option during rollback")
        if args.throttle is not None:
            brokers = cluster.set_throttles(plan, assignments, args.throttle)
        cluster.start(plan)
    print("Successfully started reassignment of partitions "
          + ",".join(str(tp) for tp in sorted(r.tp for r in plan)))
    if args.throttle is not None:
        print(f"The inter-broker throttle limit was set to {args.throttle} B/s on brokers "
              f"{_ids(brokers)}; run --verify until the reassignment completes, which "
              f"removes it")
    return 0


def verify(args) -> int:
    _refuse(args, "--verify", "--throttle")
    plan, _ = _read_plan(args, "--verify")
    with _cluster(args) as cluster:
        pending = cluster.pending()
        assignments = cluster.assignments(sorted({r.topic for r in plan}))
        print("Status of partition reassignment:")
        statuses = []
        for requested in plan:
            current = assignments.get(requested.topic, {}).get(requested.partition)
            status = reassignment_status(requested, pending, current)
            statuses.append(status)
            print(status_line(requested, status, current))
        done = all(s is ReassignmentStatus.COMPLETED for s in statuses)
        # As Kafka's tool: once nothing is moving any more, no throttle is left behind.
        if done and not pending and not args.preserve_throttles and args.zookeeper is None:
            cleared = cluster.clear_throttles(sorted({r.topic for r in plan}))
            if cleared:
                print("Cleared the replication throttles on " + "; ".join(cleared))
    return 0 if done else 1


# -- pure parts ------------------------------------------------------------------------

def parse_broker_list(text: str) -> list[int]:
    """``"1,2,3"`` -> ``[1, 2, 3]``; ConfigError naming --broker-list otherwise."""
    items = [item.strip() for item in text.split(",")]
    if not all(item.isdigit() for item in items):
        raise ConfigError("--broker-list", f"expected broker ids like 1,2,3, got {text!r}")
    broker_ids = [int(item) for item in items]
    duplicates = sorted({b for b in broker_ids if broker_ids.count(b) > 1})
    if duplicates:
        raise ConfigError("--broker-list", f"broker(s) {_ids(duplicates)} listed twice")
    return broker_ids


def propose(assignments: Mapping[str, Mapping[int, tuple[int, ...]]],
            broker_ids: Iterable[int]) -> list[PartitionReassignment]:
    """Each topic's partitions placed over ``broker_ids`` by pylog's placement rule
    (pylog.cluster.placement.assign_replicas) with the topic's current replication
    factor (its first partition's replica count).

    Raises InvalidReplicationFactorError when a topic has more replicas than brokers.

    >>> [r.replicas for r in propose({"foo": {0: (1, 2), 1: (2, 1)}}, [2, 3, 4])]
    [(2, 3), (3, 4)]
    """
    brokers = list(broker_ids)
    proposal = []
    for topic, partitions in sorted(assignments.items()):
        ordered = sorted(partitions)
        factor = len(partitions[ordered[0]])
        placed = assign_replicas(len(ordered), factor, brokers)
        proposal.extend(PartitionReassignment(topic, partition, placed[index])
                        for index, partition in enumerate(ordered))
    return proposal


def reassignment_status(requested: PartitionReassignment, pending: set[TopicPartition],
                        current: tuple[int, ...] | None) -> ReassignmentStatus:
    """In progress while /admin/reassign_partitions lists the partition; completed once it
    does not and the assignment is exactly the requested replicas, in order; else failed."""
    if requested.tp in pending:
        return ReassignmentStatus.IN_PROGRESS
    if current == requested.replicas:
        return ReassignmentStatus.COMPLETED
    return ReassignmentStatus.FAILED


def status_line(requested: PartitionReassignment, status: ReassignmentStatus,
                current: tuple[int, ...] | None) -> str:
    head = f"Reassignment of partition {requested.tp}"
    if status is ReassignmentStatus.COMPLETED:
        return f"{head} is completed."
    if status is ReassignmentStatus.IN_PROGRESS:
        return f"{head} is still in progress."
    actual = "the partition does not exist" if current is None else \
        f"its replicas are {_ids(current)}"
    return f"{head} failed: {actual}, expected {_ids(requested.replicas)}."


# -- where the cluster is read and the moves written ---------------------------------

class _ZooKeeperCluster:
    """``--zookeeper``: the nodes, as the ZooKeeper-era tool reads and writes them."""

    def __init__(self, client) -> None:
        self.client = client

    def assignments(self, topics: list[str] | None) -> dict[str, dict[int, tuple[int, ...]]]:
        return read_assignments(self.client, topics)

    def registered(self) -> list[int]:
        return registered_brokers(self.client)

    def pending(self) -> set[TopicPartition]:
        return {r.tp for r in decode_reassignment(read_node(self.client, REASSIGN_PARTITIONS))}

    def check_can_start(self) -> None:
        if self.client.exists(REASSIGN_PARTITIONS):
            raise _in_progress()

    def start(self, plan: list[PartitionReassignment]) -> None:
        from kazoo.exceptions import NodeExistsError

        try:
            self.client.create(REASSIGN_PARTITIONS, encode_reassignment(plan), makepath=True)
        except NodeExistsError:
            raise _in_progress() from None


class _BrokerCluster:
    """``--bootstrap-server``: Metadata, and AlterPartitionReassignments /
    ListPartitionReassignments (KIP-455), which add to the moves under way."""

    def __init__(self, admin) -> None:
        self.admin = admin

    def assignments(self, topics: list[str] | None) -> dict[str, dict[int, tuple[int, ...]]]:
        wanted = None if topics is None else set(topics)
        return {t.name: {p: m.replicas for p, m in t.partitions.items()}
                for t in self.admin.describe_topics() if wanted is None or t.name in wanted}

    def registered(self) -> list[int]:
        return self.admin.brokers()

    def pending(self) -> set[TopicPartition]:
        return set(self.admin.list_partition_reassignments())

    def check_can_start(self) -> None:
        pass

    def set_throttles(self, plan: list[PartitionReassignment],
                      assignments: Mapping[str, Mapping[int, tuple[int, ...]]],
                      rate: int) -> list[int]:
        """Throttle the moving partitions as Kafka's tool does: ``rate`` each way on every
        broker that holds or gets one of their replicas; on each topic, its current replicas
        as the leader side and the ones being added as the follower side. Returns the
        brokers."""
        leaders: dict[str, set[str]] = {}
        followers: dict[str, set[str]] = {}
        brokers: set[int] = set()
        for r in plan:
            current = assignments[r.topic][r.partition]
            if set(current) == set(r.replicas):
                continue
            brokers |= set(current) | set(r.replicas)
            leaders.setdefault(r.topic, set()).update(f"{r.partition}:{b}" for b in current)
            followers.setdefault(r.topic, set()).update(
                f"{r.partition}:{b}" for b in r.replicas if b not in current)
        for broker_id in sorted(brokers):
            self.admin.incremental_alter_configs("broker", str(broker_id), set_configs={
                key: str(rate) for key in THROTTLE_RATES})
        for topic in sorted(leaders):
            self.admin.incremental_alter_configs("topic", topic, set_configs={
                LEADER_REPLICAS: ",".join(sorted(leaders[topic], key=_pair)),
                FOLLOWER_REPLICAS: ",".join(sorted(followers[topic], key=_pair))})
        return sorted(brokers)

    def clear_throttles(self, topics: list[str]) -> list[str]:
        """Remove the throttle rates from every broker that has one and the throttled
        replicas from ``topics``; what was cleared, for the user."""
        cleared = []
        for broker_id in self.admin.brokers():
            entries = self.admin.describe_configs("broker", str(broker_id), THROTTLE_RATES,
                                                  synonyms=False)
            if any(e.is_dynamic for e in entries if e.name in THROTTLE_RATES):
                self.admin.incremental_alter_configs("broker", str(broker_id),
                                                     delete_configs=THROTTLE_RATES)
                cleared.append(f"broker {broker_id}")
        for topic in topics:
            entries = self.admin.describe_configs("topic", topic,
                                                  (LEADER_REPLICAS, FOLLOWER_REPLICAS),
                                                  synonyms=False)
            if any(e.is_dynamic for e in entries):
                self.admin.incremental_alter_configs(
                    "topic", topic, delete_configs=(LEADER_REPLICAS, FOLLOWER_REPLICAS))
                cleared.append(f"topic {topic}")
        return cleared

    def start(self, plan: list[PartitionReassignment]) -> None:
        results = self.admin.alter_partition_reassignments({r.tp: r.replicas for r in plan})
        failed = [(tp, error) for tp, error in sorted(results.items()) if error is not None]
        if failed:
            tp, error = failed[0]
            raise type(error)(f"{tp}: {error}" + (f" (and {len(failed) - 1} more)"
                                                  if len(failed) > 1 else ""))


THROTTLE_RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"


def _pair(item: str) -> tuple[int, int]:
    partition, broker = item.split(":")
    return int(partition), int(broker)


@contextmanager
def _cluster(args):
    if args.zookeeper is not None:
        with zookeeper_session(args.zookeeper) as client:
            yield _ZooKeeperCluster(client)
        return
    from pylog.client import Admin

    with Admin(args.bootstrap_server, security=security_from_args(args)) as admin:
        yield _BrokerCluster(admin)


# -- helpers ---------------------------------------------------------------------------

def _read_plan(args, mode: str) -> tuple[list[PartitionReassignment], str]:
    _refuse(args, mode, "--topics-to-move-json-file", "--broker-list")
    source = _require(args, mode, "--reassignment-json-file")
    return parse_reassignment(read_text(source, "--reassignment-json-file"), source), source


def read_text(path: str, option: str) -> str:
    """The contents of ``path``; ConfigError naming ``option`` when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(option, f"cannot read {path}: {reason}") from None


def _require(args, mode: str, option: str) -> str:
    value = getattr(args, option[2:].replace("-", "_"))
    if not value:
        raise ConfigError(option, f"required with {mode}")
    return value


def _refuse(args, mode: str, *options: str) -> None:
    for option in options:
        if getattr(args, option[2:].replace("-", "_")) is not None:
            raise ConfigError(option, f"not valid with {mode}")


def _in_progress():
    return ReassignmentInProgressError(
        "a reassignment is already in progress (/admin/reassign_partitions exists); "
        "check it with --verify and try again when it is done")


def _json(reassignments: Iterable[PartitionReassignment]) -> str:
    return encode_reassignment(reassignments).decode()


def _ids(broker_ids: Iterable[int]) -> str:
    return ",".join(map(str, broker_ids))
