"""ListOffsets for many partitions: one request per leader and query, leaders in parallel.

A *query* maps partitions to ListOffsets timestamps (``EARLIEST`` -2, ``LATEST`` -1, or a
ms timestamp). :meth:`OffsetLister.list` answers several queries over any number of
topics at once: for each leader it pipelines one request per query on that leader's
connection (a partition may appear only once per ListOffsets request, so earliest and
latest are two requests, sent back to back), and it talks to all leaders at the same time,
one thread per leader connection. 10,000 partitions over 3 brokers cost 3 x (queries)
requests instead of 10,000 x (queries) sequential ones.

Partitions answered without error are kept. A retriable error (NOT_LEADER_OR_FOLLOWER,
UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, a dead connection, ...) leaves the
partition pending: metadata is marked stale and the caller's retry policy runs another
round for the pending partitions only, against their re-resolved leaders. Any other
error code raises at once.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence, TypeVar

from pylog.client.network import NetworkClient, check_error
from pylog.errors import KafkaError, PylogError, RetriableError, UnknownTopicOrPartitionError
from pylog.protocol import ApiKey
from pylog.types import TopicPartition

LATEST = -1
EARLIEST = -2

T = TypeVar("T")
Query = Mapping[TopicPartition, int]


@dataclass(frozen=True, slots=True)
class OffsetBounds:
    """A partition's readable offsets: ``[log_start_offset, latest)``.

    ``latest`` is the high watermark, or with read_committed the last stable offset.
    """

    log_start_offset: int
    latest: int


class OffsetLister:
    """Runs ListOffsets requests for a SimpleConsumer (thread-safe; no state between calls)."""

    def __init__(self, network: NetworkClient, retry: Callable, isolation_level: int = 0) -> None:
        self._network = network
        self._retry = retry
        self._isolation_level = isolation_level

    def list(self, queries: Sequence[Query]) -> list[dict[TopicPartition, int]]:
        """The offset for every partition of every query, in query order.

        Raises the partition's error (UnknownTopicOrPartitionError, ...) once retries are
        used up, or at once for an error a retry cannot fix.
        """
        pending = [dict(q) for q in queries]
        found: list[dict[TopicPartition, int]] = [{} for _ in queries]

        def attempt() -> None:
            by_leader = self._group_by_leader(pending)
            outcomes = run_per_leader(by_leader, lambda leader, parts: self._ask(leader, parts))
            retriable: PylogError | None = None
            for outcome in outcomes:
                if isinstance(outcome, BaseException):
                    if not isinstance(outcome, RetriableError):
                        raise outcome
                    retriable = retriable or outcome
                    continue
                answered, error = outcome
                retriable = retriable or error
                for index, offsets in answered:
                    for tp, offset in offsets.items():
                        found[index][tp] = offset
                        del pending[index][tp]
            if any(pending):
                self._network.mark_stale()
                missing = sorted({tp for query in pending for tp in query})
                raise retriable or UnknownTopicOrPartitionError(f"no offsets returned for {missing[:10]}")

        self._retry(attempt)
        return found

    def bounds(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, OffsetBounds]:
        """Earliest and latest offset of each partition (two pipelined requests per leader)."""
        earliest, latest = self.list([dict.fromkeys(partitions, EARLIEST), dict.fromkeys(partitions, LATEST)])
        return {tp: OffsetBounds(earliest[tp], latest[tp]) for tp in partitions}

    def _group_by_leader(self, pending: list[dict[TopicPartition, int]]) -> dict[int, list[dict]]:
        """{leader id: [the part of each query that leader answers]} (raises for a partition
        without a leader: a retriable error, so the whole round is tried again)."""
        # One Metadata request for every topic not known yet (not one per topic).
        self._network.topics({tp.topic for query in pending for tp in query})
        leaders: dict[TopicPartition, int] = {}
        by_leader: dict[int, list[dict]] = {}
        for index, query in enumerate(pending):
            for tp, timestamp in query.items():
                leader = leaders.get(tp)
                if leader is None:
                    leader = leaders[tp] = self._network.leader_id(tp)
                parts = by_leader.setdefault(leader, [{} for _ in pending])
                parts[index][tp] = timestamp
        return by_leader

    def _ask(self, leader: int, parts: list[dict[TopicPartition, int]]
             ) -> tuple[list[tuple[int, dict]], KafkaError | None]:
        """One pipelined request per non-empty query part: the offsets answered without
        error, per query index, and the last retriable error (those partitions stay pending)."""
        asked = [(index, part) for index, part in enumerate(parts) if part]
        responses = self._network.request_batch_to(
            leader, ApiKey.LIST_OFFSETS, [self._request_body(part) for _, part in asked])
        retriable: KafkaError | None = None
        answered = []
        for (index, part), response in zip(asked, responses):
            offsets = {}
            for topic in response["topics"]:
                for p in topic["partitions"]:
                    tp = TopicPartition(topic["name"], p["partition_index"])
                    if tp not in part:
                        continue
                    code = p["error_code"]
                    if code:
                        cls = KafkaError.for_code(code)
                        if not issubclass(cls, RetriableError):
                            check_error(code, f"ListOffsets {tp}")
                        retriable = cls(f"ListOffsets {tp}: {cls.name}")
                        continue
                    offsets[tp] = p["offset"]
            answered.append((index, offsets))
        return answered, retriable

    def _request_body(self, part: dict[TopicPartition, int]) -> dict:
        topics: dict[str, list] = {}
        for tp, timestamp in part.items():
            topics.setdefault(tp.topic, []).append(
                {"partition_index": tp.partition, "timestamp": timestamp, "current_leader_epoch": -1})
        return {"replica_id": -1, "isolation_level": self._isolation_level,
                "timeout_ms": int(self._network.timeout_s * 1000),
                "topics": [{"name": name, "partitions": ps} for name, ps in topics.items()]}


def run_per_leader(work: dict[int, T], call: Callable[[int, T], object]) -> list[object]:
    """``call(leader, item)`` for every leader, one thread each; results or raised errors.

    A single leader runs on the calling thread. Every call finishes before this returns,
    so no request is left half-read on a connection when the caller raises.
    """
    def guarded(leader: int, item: T) -> object:
        try:
            return call(leader, item)
        except PylogError as exc:
            return exc

    if len(work) <= 1:
        return [guarded(leader, item) for leader, item in work.items()]
    with ThreadPoolExecutor(max_workers=len(work), thread_name_prefix="pylog-leader") as pool:
        futures = [pool.submit(guarded, leader, item) for leader, item in work.items()]
        return [f.result() for f in futures]
