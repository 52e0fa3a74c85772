"""Fetch requests for many partitions: group by leader, send, sort out per-partition errors.

Partitions answered without error are kept; partitions with a retriable error
(NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, ...) stay pending and are retried
after a metadata refresh; OFFSET_OUT_OF_RANGE raises PartitionOutOfRange so the caller
can look the valid range up. With isolation level 1 (read_committed) the broker stops at
the last stable offset and the batches of aborted transactions are emptied here (see
:mod:`pylog.client.transactions`).
"""

from __future__ import annotations

from typing import Callable

from pylog.client.network import NetworkClient, check_error
from pylog.client.results import RawFetchResult
from pylog.client.transactions import drop_aborted
from pylog.errors import KafkaError, OffsetOutOfRangeError, RetriableError
from pylog.protocol import ApiKey
from pylog.types import TopicPartition

_MAX_INT32 = 2**31 - 1


class PartitionOutOfRange(OffsetOutOfRangeError):
    """Internal: the fetch offset of ``tp`` is out of range (range not looked up yet)."""

    def __init__(self, tp: TopicPartition) -> None:
        super().__init__(f"fetch offset out of range for {tp}")
        self.tp = tp


class FetchRequester:
    """Runs Fetch requests for a SimpleConsumer."""

    def __init__(self, network: NetworkClient, retry: Callable, isolation_level: int = 0) -> None:
        self._network = network
        self._retry = retry
        self._isolation_level = isolation_level
        self._rotation = 0

    def fetch(self, offsets: dict[TopicPartition, int], max_bytes: int, max_wait_ms: int,
              min_bytes: int) -> dict[TopicPartition, RawFetchResult]:
        """Each call starts the partitions one further along, as librdkafka does: a
        broker fills a response in request order up to its ``fetch.max.bytes``, so a fixed
        order would leave the last partitions waiting while the first have data."""
        order = list(offsets)
        if len(order) > 1:
            start = self._rotation % len(order)
            self._rotation += 1
            order = order[start:] + order[:start]
        pending = {tp: offsets[tp] for tp in order}
        results: dict[TopicPartition, RawFetchResult] = {}

        def attempt() -> None:
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in pending:
                by_leader.setdefault(self._network.leader_id(tp), []).append(tp)
            error: KafkaError | None = None
            for leader, tps in by_leader.items():
                body = self._request_body({tp: pending[tp] for tp in tps}, max_bytes, max_wait_ms, min_bytes,
                                          self._isolation_level)
                response = self._network.request_to(leader, ApiKey.FETCH, body)
                check_error(response.get("error_code", 0), "Fetch")
                error = self._collect(response, pending, results) or error
            if pending:
                raise error or KafkaError.for_code(3)(f"no fetch answer for {sorted(pending)}")

        self._retry(attempt)
        return results

    @staticmethod
    def _request_body(offsets: dict[TopicPartition, int], max_bytes: int, max_wait_ms: int,
                      min_bytes: int, isolation_level: int) -> dict:
        # In the given order: a topic's partitions are grouped only where they follow each
        # other, so a topic may appear twice (as librdkafka sends it) rather than a small
        # topic always coming after a large one.
        topics: list[dict] = []
        for tp, offset in offsets.items():
            if not topics or topics[-1]["topic"] != tp.topic:
                topics.append({"topic": tp.topic, "partitions": []})
            topics[-1]["partitions"].append({
                "partition": tp.partition, "fetch_offset": offset, "current_leader_epoch": -1,
                "log_start_offset": -1, "partition_max_bytes": min(max_bytes, _MAX_INT32)})
        return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes,
                "max_bytes": min(max_bytes * len(offsets), _MAX_INT32), "isolation_level": isolation_level,
                "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
                "topics": topics}

    def _collect(self, response: dict, pending: dict, results: dict) -> KafkaError | None:
        retriable: KafkaError | None = None
        for topic in response["responses"]:
            for p in topic["partitions"]:
                tp = TopicPartition(topic["topic"], p["partition_index"])
                if tp not in pending:
                    continue
                code = p["error_code"]
                if code == OffsetOutOfRangeError.errno:
                    raise PartitionOutOfRange(tp)
                if code:
                    cls = KafkaError.for_code(code)
                    if not issubclass(cls, RetriableError):
                        check_error(code, f"Fetch {tp}")
                    self._network.mark_stale()
                    retriable = cls(f"Fetch {tp}: {cls.name}")
                    continue
                records = bytes(p["records"]) if p["records"] is not None else b""
                records = drop_aborted(records, p.get("aborted_transactions") if self._isolation_level else None)
                results[tp] = RawFetchResult(tp.topic, tp.partition, records, p["high_watermark"],
                                             p["log_start_offset"], p.get("last_stable_offset", -1))
                del pending[tp]
        return retriable
