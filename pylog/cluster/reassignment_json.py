"""The JSON files and ZooKeeper node of partition reassignment (kafka-reassign-partitions.sh).

Pure code: parse, check and encode; no files, no ZooKeeper calls. Every parse error is a
``ReassignmentJsonError`` whose one-line message names the source and what is wrong.

Topics to move (the input of ``--generate``)::

    {"version": 1, "topics": [{"topic": "foo"}, {"topic": "bar"}]}

A reassignment (the output of ``--generate``, the input of ``--execute`` and ``--verify``;
"log_dirs" is optional and, as pylog has one log directory per broker, must say "any")::

    {"version": 1, "partitions": [{"topic": "foo", "partition": 0, "replicas": [2, 3],
                                   "log_dirs": ["any", "any"]}]}

``/admin/reassign_partitions`` (persistent; the controller moves the listed partitions and
removes each entry, then the node, when done) holds the same JSON without "log_dirs".

``"version"`` may be left out (it means 1); any other version is refused, as Kafka does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterable, Mapping

from pylog.cluster.layout import REASSIGN_PARTITIONS  # noqa: F401 -- re-exported for the CLI
from pylog.errors import ConfigError
from pylog.types import TopicPartition

VERSION = 1
ANY_LOG_DIR = "any"


class ReassignmentJsonError(ConfigError):
    """A reassignment or topics-to-move JSON is malformed or names something that does not
    exist. ``key`` is where the JSON came from (a file name or a ZooKeeper path)."""


@dataclass(frozen=True, slots=True)
class PartitionReassignment:
    """The replicas one partition should have, preferred leader first."""

    topic: str
    partition: int
    replicas: tuple[int, ...]

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def to_json(self) -> dict:
        return {"topic": self.topic, "partition": self.partition, "replicas": list(self.replicas)}


def load_json_object(text: str | bytes, source: str) -> dict:
    """``text`` parsed as a JSON object with an absent or supported ``"version"``."""
    try:
        node = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ReassignmentJsonError(source, f"not valid JSON: {exc}") from None
    if not isinstance(node, dict):
        raise ReassignmentJsonError(source, f"expected a JSON object, got {_kind(node)}")
    version = node.get("version", VERSION)
    if version != VERSION or isinstance(version, bool):
        raise ReassignmentJsonError(source, f"unsupported version {version!r} (only {VERSION})")
    return node


def require_list(node: Mapping, key: str, source: str, where: str = "") -> list:
    """``node[key]`` when it is a list; ReassignmentJsonError otherwise."""
    if key not in node:
        raise ReassignmentJsonError(source, f'{where}missing key "{key}"')
    value = node[key]
    if not isinstance(value, list):
        raise ReassignmentJsonError(source, f'{where}"{key}" must be a list, got {_kind(value)}')
    return value


def require_topic(entry, source: str, where: str) -> str:
    if not isinstance(entry, dict):
        raise ReassignmentJsonError(source, f"{where}expected an object, got {_kind(entry)}")
    if "topic" not in entry:
        raise ReassignmentJsonError(source, f'{where}missing key "topic"')
    topic = entry["topic"]
    if not isinstance(topic, str) or not topic:
        raise ReassignmentJsonError(source, f'{where}"topic" must be a non-empty string, '
                                            f"got {topic!r}")
    return topic


def require_int(entry: Mapping, key: str, source: str, where: str) -> int:
    """A non-negative integer (a partition or broker id); JSON true/false are not numbers."""
    if key not in entry:
        raise ReassignmentJsonError(source, f'{where}missing key "{key}"')
    return _non_negative(entry[key], f'"{key}"', source, where)


def _non_negative(value, what: str, source: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ReassignmentJsonError(source, f"{where}{what} must be a non-negative integer, "
                                            f"got {json.dumps(value)}")
    return value


def parse_topics_to_move(text: str | bytes, source: str) -> list[str]:
    """The topic names of a topics-to-move JSON, in file order, each once.

    Raises ReassignmentJsonError for malformed JSON, a missing or empty "topics" list, an
    entry without a topic name, or a topic named twice.
    """
    node = load_json_object(text, source)
    entries = require_list(node, "topics", source)
    if not entries:
        raise ReassignmentJsonError(source, 'the "topics" list is empty')
    topics: list[str] = []
    for index, entry in enumerate(entries):
        topic = require_topic(entry, source, f"topics[{index}]: ")
        if topic in topics:
            raise ReassignmentJsonError(source, f"topic {topic!r} is listed twice")
        topics.append(topic)
    return topics


def parse_reassignment(text: str | bytes, source: str) -> list[PartitionReassignment]:
    """The partitions of a reassignment JSON, in file order.

    Raises ReassignmentJsonError for malformed JSON, a missing or empty "partitions" list,
    an entry without topic, partition or replicas, an empty replica list, a broker listed
    twice in one partition, a partition listed twice, and "log_dirs" that are not one
    "any" per replica.
    """
    reassignments = _parse_partitions(load_json_object(text, source), source)
    if not reassignments:
        raise ReassignmentJsonError(source, 'the "partitions" list is empty')
    return reassignments


def _parse_partitions(node: Mapping, source: str) -> list[PartitionReassignment]:
    entries = require_list(node, "partitions", source)
    seen: set[TopicPartition] = set()
    result = []
    for index, entry in enumerate(entries):
        reassignment = _parse_partition(entry, source, f"partitions[{index}]: ")
        if reassignment.tp in seen:
            raise ReassignmentJsonError(source, f"partition {reassignment.tp} is listed twice")
        seen.add(reassignment.tp)
        result.append(reassignment)
    return result


def _parse_partition(entry, source: str, where: str) -> PartitionReassignment:
    topic = require_topic(entry, source, where)
    partition = require_int(entry, "partition", source, where)
    where = f"partition {topic}-{partition}: "
    replicas = tuple(_non_negative(broker, "a broker id", source, where)
                     for broker in require_list(entry, "replicas", source, where))
    if not replicas:
        raise ReassignmentJsonError(source, f"{where}the replica list is empty")
    for broker in replicas:
        if replicas.count(broker) > 1:
            raise ReassignmentJsonError(source, f"{where}broker {broker} is listed twice in "
                                                f"replicas {list(replicas)}")
    if "log_dirs" in entry:
        log_dirs = require_list(entry, "log_dirs", source, where)
        if len(log_dirs) != len(replicas):
            raise ReassignmentJsonError(source, f"{where}{len(log_dirs)} log_dirs for "
                                                f"{len(replicas)} replicas")
        if any(log_dir != ANY_LOG_DIR for log_dir in log_dirs):
            raise ReassignmentJsonError(source, f'{where}log_dirs other than "{ANY_LOG_DIR}" '
                                                "are not supported (one log directory per broker)")
    return PartitionReassignment(topic, partition, replicas)


def check_against_cluster(reassignments: Iterable[PartitionReassignment],
                          assignments: Mapping[str, Mapping[int, tuple[int, ...]]],
                          broker_ids: Iterable[int], source: str) -> None:
    """ReassignmentJsonError unless every partition exists in ``assignments`` (topic ->
    partition -> replicas) and every broker id is in ``broker_ids`` (the registered ones)."""
    registered = set(broker_ids)
    for reassignment in reassignments:
        topic = assignments.get(reassignment.topic)
        if topic is None:
            raise ReassignmentJsonError(source, f"topic {reassignment.topic!r} does not exist")
        if reassignment.partition not in topic:
            raise ReassignmentJsonError(source, f"partition {reassignment.tp} does not exist "
                                                f"(the topic has {len(topic)} partitions)")
        unknown = sorted(set(reassignment.replicas) - registered)
        if unknown:
            raise ReassignmentJsonError(
                source, f"partition {reassignment.tp}: broker(s) {_ids(unknown)} are not "
                        f"registered (registered: {_ids(sorted(registered)) or 'none'})")


def encode_reassignment(reassignments: Iterable[PartitionReassignment]) -> bytes:
    """The reassignment JSON (compact, as Kafka writes it), partitions in topic-partition
    order, without "log_dirs"."""
    ordered = sorted(reassignments, key=lambda r: r.tp)
    return json.dumps({"version": VERSION, "partitions": [r.to_json() for r in ordered]},
                      separators=(",", ":")).encode()


def decode_reassignment(data: bytes) -> list[PartitionReassignment]:
    """The partitions listed in the ``/admin/reassign_partitions`` node."""
    if not data:
        return []
    return _parse_partitions(load_json_object(data, REASSIGN_PARTITIONS), REASSIGN_PARTITIONS)


def reassignments_of(assignments: Mapping[str, Mapping[int, tuple[int, ...]]],
                     ) -> list[PartitionReassignment]:
    """Topic -> partition -> replicas as reassignment entries (to print an assignment)."""
    return [PartitionReassignment(topic, partition, tuple(replicas))
            for topic, partitions in assignments.items()
            for partition, replicas in partitions.items()]


def _ids(broker_ids: Iterable[int]) -> str:
    return ",".join(map(str, broker_ids))


def _kind(value) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            type(None): "null"}.get(type(value), "a number")
