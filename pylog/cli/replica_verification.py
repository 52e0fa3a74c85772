"""``pylog replica-verification``: check that all replicas of each partition hold the same
record batches (like kafka-replica-verification.sh).

    pylog replica-verification --broker-list 127.0.0.1:9092 --topic-white-list 'ev.*'
    pylog replica-verification --broker-list 127.0.0.1:9092 --time-limit-ms 600000

Through the Kafka protocol only: Metadata names each partition's replicas and their
brokers, and every replica is read from its own broker with Fetch and ListOffsets as the
debug consumer (replica id -2), which a broker serves from its log up to the log end
whether it leads the partition or follows. From the first offset all replicas still hold,
the batches are compared in order over what every replica has: base offset, last offset
delta and CRC, from the batch headers (records are not decoded; each batch's CRC is
checked against its bytes). Output, as Kafka's tool prints it:

    2024-05-01T12:00:00.000+00:00: max lag is 3 for partition ev-0 at offset 120 among 4 partitions
    Partition ev-1: replicas 1 and 3 disagree at offset 57 (crc 0x1a2b3c4d vs 0x5e6f7a8b)

A partition's lag is the largest log end among its replicas minus the offset up to which
all of them have been verified.

Without --time-limit-ms, one round verifies what the replicas hold now, prints the max lag
line and exits. With it, rounds repeat (taking up new data and new partitions) until the
limit, printing the max lag line every --report-interval-ms and at the end.

Exit status: 0 when the replicas agree; 1 when two disagree, a batch is corrupt or a
replica could not be read.
"""

from __future__ import annotations

import argparse
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Sequence

from pylog.cli._security import add_command_config_argument, security_from_args
from pylog.cli.topics import INT32_MAX, check_range
from pylog.errors import (
    ConfigError, CorruptRecordError, KafkaError, OffsetOutOfRangeError, PylogError,
    TruncatedBatchError)
from pylog.types import TopicPartition

if TYPE_CHECKING:  # the client and codecs are loaded only when the command runs
    from pylog.client.network import NetworkClient
    from pylog.records.header import BatchHeader

DEBUG_REPLICA_ID = -2  # the debug consumer: served by any replica, up to its log end
EARLIEST = -2
LATEST = -1
ROUND_PAUSE_S = 1.0  # between rounds with --time-limit-ms


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "replica-verification", help="check that the replicas of each partition agree",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--broker-list", required=True, metavar="HOST:PORT[,...]",
                        help="broker(s) to ask for metadata first")
    parser.add_argument("--topic-white-list", default=".*", metavar="REGEX",
                        help="the topics to verify, a regular expression matching the whole "
                             "name (default .*)")
    parser.add_argument("--report-interval-ms", type=int, default=30000, metavar="MS",
                        help="how often to print the max lag line (default 30000)")
    parser.add_argument("--time-limit-ms", type=int, metavar="MS",
                        help="keep verifying new data for this long (default: one round)")
    parser.add_argument("--fetch-size", type=int, default=1024 * 1024, metavar="BYTES",
                        help="bytes fetched per partition and request (default 1048576)")
    parser.add_argument("--request-timeout-ms", type=int, default=30000, metavar="MS",
                        help="timeout of every network call (default 30000)")
    add_command_config_argument(parser)
    parser.set_defaults(func=run)


# -- the comparison (pure) ---------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Disagreement:
    """Two replicas hold different batches at ``offset``."""

    tp: TopicPartition
    offset: int
    replica: int
    other_replica: int
    batch: BatchHeader
    other_batch: BatchHeader

    def __str__(self) -> str:
        a, b = self.batch, self.other_batch
        if (a.base_offset, a.last_offset) != (b.base_offset, b.last_offset):
            detail = (f"batch offsets {a.base_offset}-{a.last_offset} vs "
                      f"{b.base_offset}-{b.last_offset}")
        else:
            detail = f"crc {a.crc:#010x} vs {b.crc:#010x}"
        return (f"Partition {self.tp}: replicas {self.replica} and {self.other_replica} "
                f"disagree at offset {self.offset} ({detail})")


@dataclass(frozen=True, slots=True)
class Comparison:
    """Every replica holds the same batches for the offsets in [start, ``verified_offset``)."""

    verified_offset: int
    disagreement: Disagreement | None = None


def compare_replica_batches(tp: TopicPartition, start_offset: int,
                            batches: Mapping[int, Sequence[BatchHeader]]) -> Comparison:
    """Compare the batches each replica (broker id -> headers in log order, read from
    ``start_offset``) holds, over the prefix they all have.

    Batches ending before ``start_offset`` are skipped. The replica with the lowest id is
    the reference; the first batch whose base offset, last offset delta or CRC differs in
    another replica is the disagreement. ``verified_offset`` is the next offset after the
    agreed batches (``start_offset`` if none).

    >>> compare_replica_batches(TopicPartition("t", 0), 0, {1: [], 2: []})
    Comparison(verified_offset=0, disagreement=None)
    """
    replicas = sorted(batches)
    relevant = {r: [b for b in batches[r] if b.last_offset >= start_offset] for r in replicas}
    common = min((len(relevant[r]) for r in replicas), default=0)
    verified = start_offset
    for index in range(common):
        reference = relevant[replicas[0]][index]
        for other in replicas[1:]:
            batch = relevant[other][index]
            if _identity(batch) != _identity(reference):
                offset = max(start_offset, min(batch.base_offset, reference.base_offset))
                return Comparison(verified, Disagreement(tp, offset, replicas[0], other,
                                                         reference, batch))
        verified = max(verified, reference.next_offset)
    return Comparison(verified)


def _identity(batch: BatchHeader) -> tuple[int, int, int]:
    return batch.base_offset, batch.last_offset_delta, batch.crc


def read_headers(records: bytes | memoryview) -> tuple[list[BatchHeader], str | None]:
    """The headers of the whole batches in a fetched buffer (a partial last batch, cut by
    the fetch size, is left out) and, if a batch is corrupt, why (the headers stop there)."""
    from pylog.records.header import check_crc, read_batch_header

    headers = []
    position = 0
    while position < len(records):
        try:
            header = read_batch_header(records, position)
            check_crc(records, position, header)
        except TruncatedBatchError:
            break
        except CorruptRecordError as error:
            return headers, str(error)
        headers.append(header)
        position += header.size
    return headers, None


@dataclass(frozen=True, slots=True)
class PartitionLag:
    tp: TopicPartition
    lag: int  # largest log end among the replicas - verified offset
    offset: int  # the verified offset


def lag_line(now_s: float, lags: Iterable[PartitionLag]) -> str:
    """``<ISO time>: max lag is N for partition T-P at offset X among K partitions``."""
    lags = list(lags)
    when = datetime.fromtimestamp(now_s, timezone.utc).isoformat(timespec="milliseconds")
    if not lags:
        return f"{when}: max lag is 0 among 0 partitions"
    worst = min(lags, key=lambda lag: (-lag.lag, lag.tp))  # the first partition on a tie
    return (f"{when}: max lag is {worst.lag} for partition {worst.tp} at offset "
            f"{worst.offset} among {len(lags)} partitions")


# -- reading the replicas ----------------------------------------------------------------

@dataclass
class RoundResult:
    lags: list[PartitionLag] = field(default_factory=list)
    inconsistent: list[str] = field(default_factory=list)  # disagreements, corrupt batches
    unreadable: list[str] = field(default_factory=list)  # replicas offline or failing

    @property
    def problems(self) -> list[str]:
        return self.inconsistent + self.unreadable


class ReplicaVerifier:
    """Verifies the replicas of the matching partitions, round after round, each round
    going on from where the previous one stopped."""

    def __init__(self, network: NetworkClient, topics: re.Pattern, fetch_size: int) -> None:
        self.network = network
        self.topics = topics
        self.fetch_size = fetch_size
        self.positions: dict[TopicPartition, int] = {}  # verified up to here
        self._out_of_range: set[TopicPartition] = set()  # start again from the log start

    def run_round(self) -> RoundResult:
        result = RoundResult()
        for tp in self._out_of_range:
            self.positions.pop(tp, None)
        self._out_of_range.clear()
        replicas = self._partitions(result)
        log_ends = self._offsets(replicas, LATEST, result)
        new = {tp: r for tp, r in replicas.items() if tp not in self.positions}
        for tp, starts in self._offsets(new, EARLIEST, result).items():
            if len(starts) == len(replicas[tp]):
                self.positions[tp] = max(starts.values())
        readable = {tp: ends for tp, ends in log_ends.items()
                    if len(ends) == len(replicas[tp]) and tp in self.positions}
        targets = {tp: min(ends.values()) for tp, ends in readable.items()}
        self._verify_up_to(targets, replicas, result)
        # A log end below the verified offset (truncated replicas) starts over next round.
        result.lags = [PartitionLag(tp, max(0, max(ends.values()) - self.positions[tp]),
                                    self.positions[tp])
                       for tp, ends in sorted(readable.items())]
        return result

    def _partitions(self, result: RoundResult) -> dict[TopicPartition, tuple[int, ...]]:
        snapshot = self.network.refresh_metadata(None)
        matching = {name: topic for name, topic in snapshot.topics.items()
                    if not topic.error_code and self.topics.fullmatch(name)}
        if not matching:
            raise ConfigError("--topic-white-list",
                              f"{self.topics.pattern!r} matches no topic")
        replicas = {}
        for name, topic in matching.items():
            for p in topic.partitions.values():
                tp = TopicPartition(name, p.partition)
                offline = [b for b in p.replicas if b not in snapshot.brokers]
                if offline:
                    result.unreadable.append(f"Partition {tp}: replica(s) "
                                             f"{','.join(map(str, offline))} are offline")
                else:
                    replicas[tp] = p.replicas
        return replicas

    def _offsets(self, replicas: Mapping[TopicPartition, tuple[int, ...]], timestamp: int,
                 result: RoundResult) -> dict[TopicPartition, dict[int, int]]:
        """ListOffsets at ``timestamp`` from every replica: tp -> broker -> offset (a
        replica that fails is reported and left out)."""
        from pylog.protocol import ApiKey

        offsets: dict[TopicPartition, dict[int, int]] = {tp: {} for tp in replicas}
        for broker, tps in _by_broker(replicas).items():
            body = {"replica_id": DEBUG_REPLICA_ID, "isolation_level": 0,
                    "timeout_ms": int(self.network.timeout_s * 1000),
                    "topics": [{"name": topic, "partitions": [
                        {"partition_index": p, "timestamp": timestamp, "current_leader_epoch": -1}
                        for p in partitions]} for topic, partitions in _by_topic(tps).items()]}
            response = self._request(broker, ApiKey.LIST_OFFSETS, body, tps, result)
            for topic in response["topics"] if response else ():
                for p in topic["partitions"]:
                    tp = TopicPartition(topic["name"], p["partition_index"])
                    if p["error_code"]:
                        _unreadable(result, tp, broker, KafkaError.for_code(p["error_code"]).name)
                    elif tp in offsets:
                        offsets[tp][broker] = p["offset"]
        return offsets

    def _verify_up_to(self, targets: dict[TopicPartition, int],
                      replicas: Mapping[TopicPartition, tuple[int, ...]],
                      result: RoundResult) -> None:
        """Fetch and compare until each partition is verified up to its target, disagrees,
        or stops moving."""
        active = {tp for tp, target in targets.items() if self.positions[tp] < target}
        while active:
            fetched = self._fetch({tp: replicas[tp] for tp in active}, result)
            for tp in sorted(active):
                batches = fetched.get(tp, {})
                if len(batches) < len(replicas[tp]):
                    active.discard(tp)  # a replica failed (reported) or was corrupt
                    continue
                start = self.positions[tp]
                comparison = compare_replica_batches(tp, start, batches)
                if comparison.disagreement is not None:
                    result.inconsistent.append(str(comparison.disagreement))
                    active.discard(tp)
                    continue
                self.positions[tp] = comparison.verified_offset
                if comparison.verified_offset <= start or comparison.verified_offset >= targets[tp]:
                    active.discard(tp)

    def _fetch(self, replicas: Mapping[TopicPartition, tuple[int, ...]],
               result: RoundResult) -> dict[TopicPartition, dict[int, list[BatchHeader]]]:
        """One Fetch per broker from each partition's verified offset: tp -> broker ->
        whole batch headers (a replica that fails or is corrupt is reported, left out)."""
        from pylog.protocol import ApiKey

        fetched: dict[TopicPartition, dict[int, list[BatchHeader]]] = {}
        for broker, tps in _by_broker(replicas).items():
            body = {"replica_id": DEBUG_REPLICA_ID, "max_wait_ms": 0, "min_bytes": 0,
                    "max_bytes": min(self.fetch_size * len(tps), INT32_MAX),
                    "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                    "forgotten_topics_data": [], "rack_id": "",
                    "topics": [{"topic": topic, "partitions": [
                        {"partition": p, "fetch_offset": self.positions[TopicPartition(topic, p)],
                         "current_leader_epoch": -1, "log_start_offset": -1,
                         "partition_max_bytes": self.fetch_size} for p in partitions]}
                        for topic, partitions in _by_topic(tps).items()]}
            response = self._request(broker, ApiKey.FETCH, body, tps, result)
            for topic in response["responses"] if response else ():
                for p in topic["partitions"]:
                    tp = TopicPartition(topic["topic"], p["partition_index"])
                    if p["error_code"] == OffsetOutOfRangeError.errno:
                        self._out_of_range.add(tp)  # retention moved the log start
                    if p["error_code"]:
                        _unreadable(result, tp, broker, KafkaError.for_code(p["error_code"]).name)
                        continue
                    headers, corrupt = read_headers(p["records"] or b"")
                    if corrupt:
                        result.inconsistent.append(f"Partition {tp}: replica {broker} holds a "
                                                   f"corrupt batch: {corrupt}")
                        continue
                    fetched.setdefault(tp, {})[broker] = headers
        return fetched

    def _request(self, broker: int, api_key: int, body: dict, tps: list[TopicPartition],
                 result: RoundResult) -> dict | None:
        try:
            return self.network.request_to(broker, api_key, body)
        except PylogError as error:
            for tp in tps:
                _unreadable(result, tp, broker, str(error))
            return None


def _unreadable(result: RoundResult, tp: TopicPartition, broker: int, why: str) -> None:
    result.unreadable.append(f"Partition {tp}: replica {broker} could not be read: {why}")


def _by_broker(replicas: Mapping[TopicPartition, tuple[int, ...]],
               ) -> dict[int, list[TopicPartition]]:
    grouped: dict[int, list[TopicPartition]] = {}
    for tp, brokers in sorted(replicas.items()):
        for broker in brokers:
            grouped.setdefault(broker, []).append(tp)
    return grouped


def _by_topic(tps: Iterable[TopicPartition]) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = {}
    for tp in tps:
        grouped.setdefault(tp.topic, []).append(tp.partition)
    return grouped


# -- the command ---------------------------------------------------------------------------

def run(args, clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep) -> int:
    from pylog.client.network import NetworkClient

    check_range("--report-interval-ms", args.report_interval_ms, 1, INT32_MAX)
    check_range("--time-limit-ms", args.time_limit_ms, 1, INT32_MAX)
    check_range("--fetch-size", args.fetch_size, 1, INT32_MAX)
    check_range("--request-timeout-ms", args.request_timeout_ms, 1, INT32_MAX)
    try:
        topics = re.compile(args.topic_white_list)
    except re.error as exc:
        raise ConfigError("--topic-white-list", f"not a regular expression: {exc}") from None
    security = security_from_args(args)
    try:
        network = NetworkClient(args.broker_list, request_timeout_ms=args.request_timeout_ms,
                                security=security)
    except ConfigError as exc:
        raise ConfigError("--broker-list", exc.problem) from None
    verifier = ReplicaVerifier(network, topics, args.fetch_size)
    try:
        return _verify(verifier, args, clock, wall_clock, sleep)
    finally:
        network.close()


def _verify(verifier: ReplicaVerifier, args, clock, wall_clock, sleep) -> int:
    """Rounds until the time limit (one without it); 1 as soon as replicas disagree."""
    started = clock()
    last_report = started
    failed = False
    while True:
        result = verifier.run_round()
        for problem in result.problems:
            print(problem, flush=True)
        failed = failed or bool(result.problems)
        done = args.time_limit_ms is None or (clock() - started) * 1000 >= args.time_limit_ms
        disagreed = bool(result.inconsistent)
        if done or disagreed or (clock() - last_report) * 1000 >= args.report_interval_ms:
            print(lag_line(wall_clock(), result.lags), flush=True)
            last_report = clock()
        if done or disagreed:
            return 1 if failed else 0
        sleep(min(ROUND_PAUSE_S, max(0.0, args.time_limit_ms / 1000 - (clock() - started))))
