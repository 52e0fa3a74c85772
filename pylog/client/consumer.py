"""SimpleConsumer: the low-level, offset-addressed read API (Fetch and ListOffsets).

No groups, no committed offsets: the caller names topic, partition and offset, which is
what the loader needs to read exact offset ranges. Each request goes to the partition's
leader; after NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION or a dead connection
the consumer refreshes metadata, backs off and retries. Offsets of many partitions are
looked up together: one ListOffsets request per leader, all leaders at once
(:mod:`pylog.client.offsets`).

``isolation_level="read_committed"`` reads a transactional source the way Kafka's
read_committed consumers do: fetches stop at the last stable offset, ``latest_offset``
is the last stable offset, and records of aborted transactions are not returned.
"""

from __future__ import annotations

import time
from typing import Callable, Iterable, Mapping

from pylog.client.fetching import FetchRequester, PartitionOutOfRange
from pylog.client.network import NetworkClient, with_retries
from pylog.client.offsets import EARLIEST, LATEST, OffsetBounds, OffsetLister
from pylog.client.results import FetchResult, OffsetOutOfRange, RawFetchResult
from pylog.client.transactions import ISOLATION_LEVELS, READ_UNCOMMITTED
from pylog.errors import ConfigError
from pylog.records import Record, decode_columns
from pylog.types import BrokerEndpoint, TopicPartition

__all__ = ["SimpleConsumer", "OffsetBounds", "EARLIEST", "LATEST"]
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
    "read_committed"), ``security``: librdkafka-named security settings (a mapping or a
    :class:`~pylog.client.security.SecurityConfig`; default PLAINTEXT).
    Errors: UnknownTopicOrPartitionError, SaslAuthenticationFailedError,
    OffsetOutOfRange, NetworkExceptionError (no broker reachable), RequestTimedOutError.
    """

    def __init__(self, bootstrap_servers: str | list[str], client_id: str = "pylog",
                 request_timeout_ms: int = 30000, metadata_max_age_ms: int = 300000, *,
                 retries: int = 5, retry_backoff_ms: int = 100,
                 sleep: Callable[[float], None] = time.sleep,
                 isolation_level: str = READ_UNCOMMITTED, security=None) -> None:
        if isolation_level not in ISOLATION_LEVELS:
            raise ConfigError("isolation_level", f"{isolation_level!r} is not one of "
                                                 f"{', '.join(ISOLATION_LEVELS)}")
        self._isolation = ISOLATION_LEVELS[isolation_level]
        self._network = NetworkClient(bootstrap_servers, client_id=client_id,
                                      request_timeout_ms=request_timeout_ms,
                                      metadata_max_age_ms=metadata_max_age_ms, security=security)
        self._retries = retries
        self._backoff_s = retry_backoff_ms / 1000
        self._sleep = sleep
        self._fetcher = FetchRequester(self._network, self._retry, self._isolation)
        self._lister = OffsetLister(self._network, self._retry, self._isolation)

    @property
    def network(self) -> NetworkClient:
        """Connections and metadata, for requests this class has no method for."""
        return self._network

    def _retry(self, action):
        return with_retries(action, network=self._network, retries=self._retries,
                            backoff_s=self._backoff_s, sleep=self._sleep)

    # -- metadata ------------------------------------------------------------------

    def partitions_for(self, topic: str) -> list[int]:
        """Partition ids of ``topic``; raises UnknownTopicOrPartitionError."""
        return sorted(self._retry(lambda: self._network.topic(topic)).partitions)

    def partitions_for_topics(self, topics: Iterable[str]) -> dict[str, list[int]]:
        """Partition ids of each topic, from one Metadata request for all of them (none
        when the cached metadata is fresh). Raises UnknownTopicOrPartitionError.

        >>> consumer.partitions_for_topics(["events", "clicks"])
        {'events': [0, 1, 2], 'clicks': [0, 1]}
        """
        names = list(topics)
        found = self._retry(lambda: self._network.topics(names))
        return {name: sorted(topic.partitions) for name, topic in found.items()}

    def leader_for(self, topic: str, partition: int) -> BrokerEndpoint:
        """The broker currently leading ``topic``/``partition``."""
        return self._retry(lambda: self._network.leader(TopicPartition(topic, partition)))

    # -- offsets -------------------------------------------------------------------

    def earliest_offset(self, topic: str, partition: int) -> int:
        """The log start offset of the partition."""
        tp = TopicPartition(topic, partition)
        return self.list_offsets({tp: EARLIEST})[tp]

    def latest_offset(self, topic: str, partition: int) -> int:
        """The high watermark (the offset the next record will get); with read_committed,
        the last stable offset (the first offset of a transaction still open)."""
        tp = TopicPartition(topic, partition)
        return self.list_offsets({tp: LATEST})[tp]

    def offsets_for_times(self, topic: str, timestamps: Mapping[int, int]) -> dict[int, int | None]:
        """For each partition, the first offset whose timestamp is >= the given ms timestamp.

        None where no record is at or after it.
        """
        found = self.list_offsets({TopicPartition(topic, p): ts for p, ts in timestamps.items()})
        return {tp.partition: (None if offset < 0 else offset) for tp, offset in found.items()}

    def list_offsets(self, timestamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """ListOffsets for partitions of any topics: ``EARLIEST`` (-2), ``LATEST`` (-1) or a
        ms timestamp each; -1 where no record is at or after a timestamp. One request per
        leader, all leaders at once.

        >>> consumer.list_offsets({TopicPartition("events", 0): EARLIEST,
        ...                        TopicPartition("clicks", 3): 1763625600000})
        """
        return self._lister.list([timestamps])[0]

    def offset_bounds(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, OffsetBounds]:
        """Log start and latest offset of each partition, over any number of topics: two
        pipelined ListOffsets requests per leader, all leaders at once.

        >>> bounds = consumer.offset_bounds([TopicPartition("events", p) for p in range(3)])
        >>> bounds[TopicPartition("events", 0)].latest
        """
        return self._lister.bounds(list(dict.fromkeys(partitions)))

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

