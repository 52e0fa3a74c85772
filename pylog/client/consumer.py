"""SimpleConsumer: the low-level, offset-addressed read API (Fetch and ListOffsets).

No groups, no committed offsets: the caller names topic, partition and offset, which is
what the loader needs to read exact offset ranges. Each request goes to the partition's
leader; after NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION or a dead connection
the consumer refreshes metadata, backs off and retries.

``isolation_level="read_committed"`` reads a transactional source the way Kafka's
read_committed consumers do: fetches stop at the last stable offset, ``latest_offset``
is the last stable offset, and records of aborted transactions are not returned.
"""

from __future__ import annotations

import time
from typing import Callable, Mapping

from pylog.client.fetching import FetchRequester, PartitionOutOfRange
from pylog.client.network import NetworkClient, check_error, with_retries
from pylog.client.results import FetchResult, OffsetOutOfRange, RawFetchResult
from pylog.client.transactions import ISOLATION_LEVELS, READ_UNCOMMITTED
from pylog.errors import ConfigError, UnknownTopicOrPartitionError
from pylog.protocol import ApiKey
from pylog.records import Record, decode_columns
from pylog.types import BrokerEndpoint, TopicPartition

LATEST = -1
EARLIEST = -2
_MAX_FETCH_GROWTH = 64 * 1024 * 1024


class SimpleConsumer:
    """Fetch records by offset and look offsets up.

    >>> with SimpleConsumer("127.0.0.1:9092") as consumer:
    ...     start = consumer.earliest_offset("events", 0)
    ...     result = consumer.fetch("events", 0, start)
    ...     values = [r.value for r in result.records]

    Parameters: ``bootstrap_servers`` ("host:port,..." or a list), ``client_id``,
    ``request_timeout_ms`` (every network call), ``metadata_max_age_ms``, ``retries`` and
    ``retry_backoff_ms`` for retriable errors, ``isolation_level`` ("read_uncommitted" or
    "read_committed"). Errors: UnknownTopicOrPartitionError,
    OffsetOutOfRange, NetworkExceptionError (no broker reachable), RequestTimedOutError.
    """

    def __init__(self, bootstrap_servers: str | list[str], client_id: str = "pylog",
                 request_timeout_ms: int = 30000, metadata_max_age_ms: int = 300000, *,
                 retries: int = 5, retry_backoff_ms: int = 100,
                 sleep: Callable[[float], None] = time.sleep,
                 isolation_level: str = READ_UNCOMMITTED) -> None:
        if isolation_level not in ISOLATION_LEVELS:
            raise ConfigError("isolation_level", f"{isolation_level!r} is not one of "
                                                 f"{', '.join(ISOLATION_LEVELS)}")
        self._isolation = ISOLATION_LEVELS[isolation_level]
        self._network = NetworkClient(bootstrap_servers, client_id=client_id,
                                      request_timeout_ms=request_timeout_ms,
                                      metadata_max_age_ms=metadata_max_age_ms)
        self._retries = retries
        self._backoff_s = retry_backoff_ms / 1000
        self._sleep = sleep
        self._fetcher = FetchRequester(self._network, self._retry, self._isolation)

    def _retry(self, action):
        return with_retries(action, network=self._network, retries=self._retries,
                            backoff_s=self._backoff_s, sleep=self._sleep)

    # -- metadata ------------------------------------------------------------------

    def partitions_for(self, topic: str) -> list[int]:
        """Partition ids of ``topic``; raises UnknownTopicOrPartitionError."""
        return sorted(self._retry(lambda: self._network.topic(topic)).partitions)

    def leader_for(self, topic: str, partition: int) -> BrokerEndpoint:
        """The broker currently leading ``topic``/``partition``."""
        return self._retry(lambda: self._network.leader(TopicPartition(topic, partition)))

    # -- offsets -------------------------------------------------------------------

    def earliest_offset(self, topic: str, partition: int) -> int:
        """The log start offset of the partition."""
        return self._list_offsets(topic, {partition: EARLIEST})[partition]

    def latest_offset(self, topic: str, partition: int) -> int:
        """The high watermark (the offset the next record will get); with read_committed,
        the last stable offset (the first offset of a transaction still open)."""
        return self._list_offsets(topic, {partition: LATEST})[partition]

    def offsets_for_times(self, topic: str, timestamps: Mapping[int, int]) -> dict[int, int | None]:
        """For each partition, the first offset whose timestamp is >= the given ms timestamp.

        None where no record is at or after it.
        """
        found = self._list_offsets(topic, dict(timestamps))
        return {p: (None if offset < 0 else offset) for p, offset in found.items()}

    def _list_offsets(self, topic: str, timestamps: dict[int, int]) -> dict[int, int]:
        return self._retry(lambda: self._list_offsets_once(topic, timestamps))

    def _list_offsets_once(self, topic: str, timestamps: dict[int, int]) -> dict[int, int]:
        by_leader: dict[int, list[int]] = {}
        for partition in timestamps:
            by_leader.setdefault(self._network.leader_id(TopicPartition(topic, partition)), []).append(partition)
        offsets: dict[int, int] = {}
        for leader, partitions in by_leader.items():
            body = {"replica_id": -1, "isolation_level": self._isolation, "timeout_ms": int(self._network.timeout_s * 1000),
                    "topics": [{"name": topic, "partitions": [
                        {"partition_index": p, "timestamp": timestamps[p], "current_leader_epoch": -1}
                        for p in partitions]}]}
            response = self._network.request_to(leader, ApiKey.LIST_OFFSETS, body)
            for topic_response in response["topics"]:
                for p in topic_response["partitions"]:
                    if p["error_code"]:
                        self._network.mark_stale()
                    check_error(p["error_code"], f"ListOffsets {topic}-{p['partition_index']}")
                    offsets[p["partition_index"]] = p["offset"]
        missing = set(timestamps) - set(offsets)
        if missing:
            raise UnknownTopicOrPartitionError(f"no offsets returned for {topic} partitions {sorted(missing)}")
        return offsets

    # -- fetch ---------------------------------------------------------------------

    def fetch_raw(self, topic: str, partition: int, offset: int, max_bytes: int = 1048576,
                  max_wait_ms: int = 500, min_bytes: int = 1) -> RawFetchResult:
        """Batches from ``offset`` on, undecoded (the last batch may be partial).

        Raises OffsetOutOfRange when ``offset`` is outside the partition's range.
        """
        tp = TopicPartition(topic, partition)
        return self.fetch_raw_many({tp: offset}, max_bytes, max_wait_ms, min_bytes)[tp]

    def fetch_raw_many(self, offsets: Mapping[TopicPartition, int], max_bytes: int = 1048576,
                       max_wait_ms: int = 500, min_bytes: int = 1) -> dict[TopicPartition, RawFetchResult]:
        """Raw fetch of many partitions: one request per leader; ``max_bytes`` per partition."""
        try:
            return self._fetcher.fetch(dict(offsets), max_bytes, max_wait_ms, min_bytes)
        except PartitionOutOfRange as exc:
            raise self._out_of_range(exc.tp, offsets[exc.tp]) from None

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int = 1048576,
              max_wait_ms: int = 500, min_bytes: int = 1) -> FetchResult:
        """Decoded records from ``offset`` on (records before ``offset`` are dropped).

        >>> result = consumer.fetch("events", 0, 1200)
        >>> next_start = result.next_offset
        """
        tp = TopicPartition(topic, partition)
        return self.fetch_many({tp: offset}, max_bytes, max_wait_ms, min_bytes)[tp]

    def fetch_many(self, offsets: Mapping[TopicPartition, int], max_bytes: int = 1048576,
                   max_wait_ms: int = 500, min_bytes: int = 1) -> dict[TopicPartition, FetchResult]:
        """Decoded fetch of many partitions: one request per leader; ``max_bytes`` per partition."""
        raw = self.fetch_raw_many(offsets, max_bytes, max_wait_ms, min_bytes)
        results = {}
        for tp, result in raw.items():
            results[tp] = self._decode(result, offsets[tp], max_bytes, max_wait_ms)
        return results

    def _decode(self, result: RawFetchResult, offset: int, max_bytes: int, max_wait_ms: int) -> FetchResult:
        columns = decode_columns(result.records, start_offset=offset)
        while columns.next_offset is None and result.records and max_bytes < _MAX_FETCH_GROWTH:
            # Only part of the first batch came back (servers before KIP-74): ask for more.
            max_bytes *= 4
            result = self.fetch_raw(result.topic, result.partition, offset, max_bytes, max_wait_ms)
            columns = decode_columns(result.records, start_offset=offset)
        records = list(map(Record, columns.offsets, columns.timestamps, columns.keys,
                           columns.values, columns.headers))
        next_offset = offset if columns.next_offset is None else max(offset, columns.next_offset)
        return FetchResult(result.topic, result.partition, records, result.high_watermark,
                           result.log_start_offset, next_offset)

    def _out_of_range(self, tp: TopicPartition, offset: int) -> OffsetOutOfRange:
        start = self.earliest_offset(tp.topic, tp.partition)
        end = self.latest_offset(tp.topic, tp.partition)
        return OffsetOutOfRange(tp.topic, tp.partition, offset, start, end)

    # -- lifecycle -----------------------------------------------------------------

    def close(self) -> None:
        self._network.close()

    def __enter__(self) -> "SimpleConsumer":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

