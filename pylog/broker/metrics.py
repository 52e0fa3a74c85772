"""Broker metrics for Prometheus: what Kafka operators watch, under pylog's names.

Off by default; ``metrics.listener=127.0.0.1:9308`` serves them at ``/metrics`` in the
Prometheus text format (``prometheus_client``, one small HTTP server thread).

Counted as requests are handled (a few counter increments per request, per partition or
per batch header; never per record):

======================================  ==================================================
``pylog_requests_total{api}``           requests handled, by API name
``pylog_request_errors_total{api}``     requests closed instead of answered (malformed,
                                        unsupported version, refused)
``pylog_request_latency_seconds{api}``  from a complete request frame to its response
                                        queued (a parked Fetch or acks=all Produce
                                        includes its wait), a histogram
``pylog_topic_bytes_in_total{topic}``   record bytes appended by producers (Kafka's
                                        BytesInPerSec)
``pylog_topic_messages_in_total{topic}``  records appended by producers (MessagesInPerSec)
``pylog_topic_bytes_out_total{topic}``  record bytes fetched by consumers (BytesOutPerSec)
``pylog_replication_bytes_out_total``   record bytes fetched by follower brokers
``pylog_isr_shrinks_total``             in-sync replica sets of partitions this broker
``pylog_isr_expands_total``             leads that lost / gained a member
======================================  ==================================================

Read when scraped:

======================================  ==================================================
``pylog_connections{listener}``         open client connections
``pylog_parked_requests``               requests waiting (long-polling Fetch, acks=all
                                        Produce, group joins): the broker's request queue
``pylog_request_bytes_queued``          request bytes read and not yet handled
``pylog_log_size_bytes{topic,partition}``  bytes of each local partition log
``pylog_log_end_offset{topic,partition}``  log end offset
``pylog_log_start_offset{topic,partition}``  log start offset
``pylog_leader_partitions``             partitions this broker leads
``pylog_under_replicated_partitions``   led partitions whose ISR is smaller than their
                                        replica set
``pylog_offline_partitions``            partitions with no leader (reported by the active
                                        controller only, as in Kafka; 0 elsewhere)
``pylog_active_controller``             1 on the active controller, else 0
======================================  ==================================================

Produce bytes count the partitions the broker accepted (acks=0 requests, which get no
response, count what they carried). Messages out are not counted: a fetch sends file
regions without reading them.
"""

from __future__ import annotations

import logging
import struct
from typing import TYPE_CHECKING, Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily

from pylog.cluster.metadata import NO_LEADER
from pylog.protocol import MESSAGES, ApiKey
from pylog.records.header import BATCH_HEADER_SIZE, LOG_OVERHEAD

if TYPE_CHECKING:
    from pylog.broker.partitions import PartitionLogs
    from pylog.cluster.metadata import ClusterMetadata

log = logging.getLogger(__name__)

# Two fields of a batch header (pylog.records.header has the layout): batchLength at
# byte 8 and recordsCount, the header's last 4 bytes.
_BATCH_LENGTH = struct.Struct(">i")
_BATCH_LENGTH_AT = 8
_RECORD_COUNT = struct.Struct(">i")
_RECORD_COUNT_AT = BATCH_HEADER_SIZE - 4
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                   2.5, 5.0, 10.0, 30.0)


def count_records(records) -> int:
    """Records in a produce request's batches, from their headers (one unpack per batch)."""
    view = memoryview(records)
    total, position, size = 0, 0, len(view)
    while position + _RECORD_COUNT_AT + 4 <= size:
        total += _RECORD_COUNT.unpack_from(view, position + _RECORD_COUNT_AT)[0]
        position += LOG_OVERHEAD + _BATCH_LENGTH.unpack_from(view, position + _BATCH_LENGTH_AT)[0]
    return total


def _api_name(api_key: int) -> str:
    message = MESSAGES.get(api_key)
    return message.name if message is not None else str(api_key)


class BrokerMetrics:
    """The broker's metrics registry; see the module docstring for what it holds.

    ``connections`` returns ``{listener: open connections}``; ``parked`` the number of
    waiting requests; ``queued_bytes`` the request bytes read and not yet handled.
    """

    def __init__(self, metadata: "ClusterMetadata", logs: "PartitionLogs",
                 connections: Callable[[], dict[str, int]] = dict,
                 parked: Callable[[], int] = lambda: 0,
                 queued_bytes: Callable[[], int] = lambda: 0) -> None:
        self.metadata = metadata
        self.logs = logs
        self._connections = connections
        self._parked = parked
        self._queued_bytes = queued_bytes
        self.registry = CollectorRegistry(auto_describe=False)
        registry = self.registry
        self._requests = Counter("pylog_requests", "Requests handled", ["api"],
                                 registry=registry)
        self._errors = Counter("pylog_request_errors",
                               "Requests closed instead of answered", ["api"],
                               registry=registry)
        self._latency = Histogram("pylog_request_latency_seconds",
                                  "From a complete request to its response queued", ["api"],
                                  buckets=LATENCY_BUCKETS, registry=registry)
        self._bytes_in = Counter("pylog_topic_bytes_in", "Record bytes appended by producers",
                                 ["topic"], registry=registry)
        self._messages_in = Counter("pylog_topic_messages_in",
                                    "Records appended by producers", ["topic"],
                                    registry=registry)
        self._bytes_out = Counter("pylog_topic_bytes_out", "Record bytes fetched by consumers",
                                  ["topic"], registry=registry)
        self._replication_out = Counter("pylog_replication_bytes_out",
                                        "Record bytes fetched by follower brokers",
                                        registry=registry)
        self._isr_shrinks = Counter("pylog_isr_shrinks",
                                    "ISR shrinks of partitions this broker leads",
                                    registry=registry)
        self._isr_expands = Counter("pylog_isr_expands",
                                    "ISR expansions of partitions this broker leads",
                                    registry=registry)
        # Label children cached by key: a dict lookup per request instead of labels().
        self._by_api: dict[int, tuple] = {}
        self._by_topic: dict[str, tuple] = {}
        self._isr_seen: dict[tuple[str, int], tuple[int, tuple[int, ...]]] = {}
        registry.register(_StateCollector(self))

    # -- counted as requests are handled -------------------------------------------------

    def _api(self, api_key: int) -> tuple:
        children = self._by_api.get(api_key)
        if children is None:
            name = _api_name(api_key)
            children = self._by_api[api_key] = (
                self._requests.labels(name), self._latency.labels(name), self._errors.labels(name))
        return children

    def _topic(self, topic: str) -> tuple:
        children = self._by_topic.get(topic)
        if children is None:
            children = self._by_topic[topic] = (
                self._bytes_in.labels(topic), self._messages_in.labels(topic),
                self._bytes_out.labels(topic))
        return children

    def request_done(self, api_key: int, seconds: float) -> None:
        requests, latency, _ = self._api(api_key)
        requests.inc()
        latency.observe(seconds)

    def request_closed(self, api_key: int) -> None:
        self._api(api_key)[2].inc()

    def on_response(self, api_key: int, request: dict, response: dict | None) -> None:
        """Count the records of an answered Produce or Fetch."""
        if api_key == ApiKey.PRODUCE:
            self._produced(request, response)
        elif api_key == ApiKey.FETCH and response is not None:
            self._fetched(request, response)

    def _produced(self, request: dict, response: dict | None) -> None:
        accepted = None
        if response is not None:
            accepted = {(t["name"], p["index"]) for t in response.get("responses", ())
                        for p in t["partition_responses"] if p["error_code"] == 0}
        for topic_data in request["topic_data"]:
            name = topic_data["name"]
            for p in topic_data["partition_data"]:
                records = p["records"]
                if records is None or (accepted is not None
                                       and (name, p["index"]) not in accepted):
                    continue
                bytes_in, messages_in, _ = self._topic(name)
                bytes_in.inc(len(records))
                messages_in.inc(count_records(records))

    def _fetched(self, request: dict, response: dict) -> None:
        replica = request.get("replica_id", -1) >= 0 or request.get(
            "replica_state", {}).get("replica_id", -1) >= 0
        for topic in response.get("responses", ()):
            size = 0
            for p in topic["partitions"]:
                records = p.get("records")
                if records is not None:
                    size += records.length if hasattr(records, "length") else len(records)
            if not size:
                continue
            if replica:
                self._replication_out.inc(size)
            else:
                self._topic(topic["topic"])[2].inc(size)

    def on_metadata_change(self) -> None:
        """Count ISR shrinks and expansions of the partitions this broker leads."""
        me = self.metadata.local_broker_id
        seen: dict[tuple[str, int], tuple[int, tuple[int, ...]]] = {}
        for name, topic in self.metadata.topics().items():
            for state in topic.partitions.values():
                if state.leader != me:
                    continue
                key = (name, state.partition)
                seen[key] = (state.leader_epoch, state.isr)
                before = self._isr_seen.get(key)
                if before is None or before[0] != state.leader_epoch:
                    continue
                old, new = set(before[1]), set(state.isr)
                if old - new:
                    self._isr_shrinks.inc()
                if new - old:
                    self._isr_expands.inc()
        self._isr_seen = seen


class _StateCollector:
    """Gauges read from the broker's state at scrape time."""

    def __init__(self, metrics: BrokerMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterable:
        m = self.metrics
        connections = GaugeMetricFamily("pylog_connections", "Open client connections",
                                        labels=["listener"])
        for listener, count in sorted(m._connections().items()):
            connections.add_metric([listener], count)
        yield connections
        yield GaugeMetricFamily("pylog_parked_requests", "Requests waiting", value=m._parked())
        yield GaugeMetricFamily("pylog_request_bytes_queued",
                                "Request bytes read and not yet handled",
                                value=m._queued_bytes())
        size = GaugeMetricFamily("pylog_log_size_bytes", "Bytes of each local partition log",
                                 labels=["topic", "partition"])
        end = GaugeMetricFamily("pylog_log_end_offset", "Log end offset",
                                labels=["topic", "partition"])
        start = GaugeMetricFamily("pylog_log_start_offset", "Log start offset",
                                  labels=["topic", "partition"])
        for tp in sorted(m.logs.local_partitions()):
            partition_log = m.logs.local_log(tp.topic, tp.partition)
            if partition_log is None:
                continue
            labels = [tp.topic, str(tp.partition)]
            try:
                size.add_metric(labels, partition_log.size_bytes)
                end.add_metric(labels, partition_log.log_end_offset)
                start.add_metric(labels, partition_log.log_start_offset)
            except Exception:  # closed or deleted under the scrape: skip it
                log.debug("metrics: %s is gone", tp, exc_info=True)
        yield size
        yield end
        yield start
        me = m.metadata.local_broker_id
        controller = m.metadata.controller_id() == me
        led = under = offline = 0
        for topic in m.metadata.topics().values():
            for state in topic.partitions.values():
                if state.leader == NO_LEADER:
                    offline += 1
                elif state.leader == me:
                    led += 1
                    if len(state.isr) < len(state.replicas):
                        under += 1
        yield GaugeMetricFamily("pylog_leader_partitions", "Partitions this broker leads",
                                value=led)
        yield GaugeMetricFamily("pylog_under_replicated_partitions",
                                "Led partitions whose ISR is smaller than their replica set",
                                value=under)
        yield GaugeMetricFamily("pylog_offline_partitions",
                                "Partitions with no leader (active controller only)",
                                value=offline if controller else 0)
        yield GaugeMetricFamily("pylog_active_controller", "1 on the active controller",
                                value=1 if controller else 0)


def parse_listener(value: str) -> tuple[str, int]:
    """``host:port`` of ``metrics.listener``; raises ValueError with the reason."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]"), int(port)
