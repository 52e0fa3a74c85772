"""The ZooKeeper layout of a pylog cluster (Kafka's 0.8-era layout) and its JSON nodes.

Pure code: paths and encode/decode of node data, no ZooKeeper calls. All paths are
relative to the chroot given in ``zookeeper.connect``.

``/cluster/id`` (persistent)::

    {"version": "1", "id": "<22-char url-safe base64 uuid>"}

``/brokers/ids/<id>`` (ephemeral, one per live broker)::

    {"version": 2, "host": "127.0.0.1", "port": 9092,
     "endpoints": ["PLAINTEXT://127.0.0.1:9092"], "jmx_port": -1,
     "timestamp": "1700000000000"}            (+ "rack": "r1" and version 3 with a rack)

A broker with named listeners or other security protocols writes Kafka's version 4, every
advertised listener in ``endpoints`` and its protocol in the map; ``host``/``port`` are
the PLAINTEXT endpoint's (null and -1 without one)::

    {"version": 4, "host": null, "port": -1, "jmx_port": -1, "timestamp": "1700000000000",
     "endpoints": ["CLIENT://h:9093", "INTERNAL://h:9092"],
     "listener_security_protocol_map": {"CLIENT": "SASL_SSL", "INTERNAL": "PLAINTEXT"}}

``/brokers/topics/<topic>`` (persistent, replica assignment; Kafka's version 3 with the
topic id, which topics created by older brokers lack until the controller gives them one)::

    {"version": 3, "topic_id": "<22-char url-safe base64 uuid>",
     "partitions": {"0": [1, 2], "1": [2, 0]}, "adding_replicas": {}, "removing_replicas": {}}

``/brokers/topics/<topic>/partitions/<p>/state`` (persistent, written by the controller)::

    {"controller_epoch": 3, "leader": 1, "version": 1, "leader_epoch": 0, "isr": [1]}

``/controller`` (ephemeral, the elected controller)::

    {"version": 1, "brokerid": 1, "timestamp": "1700000000000"}

``/controller_epoch`` (persistent): the decimal epoch, incremented by each new controller.

``/config/topics/<topic>`` (persistent): ``{"version": 1, "config": {"retention.ms": "1000"}}``,
the topic's config overrides, written at creation and by AlterConfigs (``topic_config``);
every broker watches it.

``/admin/delete_topics/<topic>`` (persistent, empty): a deletion request the controller
carries out and then removes.

``/admin/preferred_replica_election`` (persistent, removed by the controller once done)::

    {"version": 1, "partitions": [{"topic": "events", "partition": 0}]}

``/admin/reassign_partitions`` (persistent; the controller removes each partition from it as
its reassignment completes, and the node when none is left)::

    {"version": 1, "partitions": [{"topic": "events", "partition": 0, "replicas": [2, 3]}]}

While partition p moves from replicas OAR to RAR its assignment is RAR + (OAR - RAR); once
every replica of RAR is in the ISR, leadership moves into RAR if it must, and the
assignment becomes RAR, whose brokers alone keep the partition.

``/admin/controlled_shutdown/<id>`` (ephemeral, empty): broker ``id`` is shutting down
cleanly; the controller moves its leaderships to other in-sync replicas and drops it from
every ISR, and the broker stops once it leads nothing another replica could lead.

Consumer groups of the seeds' high-level consumer live under ``/consumers/<group>/``:
``ids/<consumer id>`` (ephemeral, subscription JSON), ``owners/<topic>/<p>`` (ephemeral,
owning consumer id) and ``offsets/<topic>/<p>`` (persistent, decimal next offset).
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Mapping

from pylog.cluster.metadata import NO_LEADER
from pylog.protocol.primitives import parse_uuid_text, uuid_text
from pylog.types import BrokerEndpoint, ListenerEndpoint

CLUSTER_ID = "/cluster/id"
BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
CONFIG_TOPICS = "/config/topics"
DELETE_TOPICS = "/admin/delete_topics"
CONTROLLED_SHUTDOWN = "/admin/controlled_shutdown"
PREFERRED_ELECTION = "/admin/preferred_replica_election"
# pylog's own: Kafka's controller takes unclean elections (ElectLeaders) over RPC. Same JSON
# as the preferred election request.
UNCLEAN_ELECTION = "/admin/unclean_leader_election"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
CONSUMERS = "/consumers"

# Created at start so watches on them always have a node to sit on.
PERSISTENT_ROOTS = (BROKER_IDS, BROKER_TOPICS, CONFIG_TOPICS, DELETE_TOPICS, CONTROLLED_SHUTDOWN,
                    "/cluster")


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}/state"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


def controlled_shutdown_path(broker_id: int) -> str:
    return f"{CONTROLLED_SHUTDOWN}/{broker_id}"


_ENDPOINT = re.compile(r"^(?P<protocol>[A-Za-z0-9_-]+)://\[?(?P<host>[^\]]*)\]?:(?P<port>\d+)$")


def _now_ms_text(now_ms: int) -> str:
    return str(int(now_ms))


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """What a broker publishes about itself at ``/brokers/ids/<id>``.

    ``host``/``port`` are the PLAINTEXT endpoint, or the first one; ``listeners`` every
    advertised listener (empty: just ``PLAINTEXT://host:port``)."""

    broker_id: int
    host: str
    port: int
    rack: str | None = None
    listeners: tuple[ListenerEndpoint, ...] = ()

    @property
    def all_listeners(self) -> tuple[ListenerEndpoint, ...]:
        return self.listeners or (ListenerEndpoint("PLAINTEXT", self.host, self.port),)

    @property
    def endpoint(self) -> BrokerEndpoint:
        return BrokerEndpoint(self.broker_id, self.host, self.port, self.rack,
                              self.all_listeners)

    def encode(self, now_ms: int) -> bytes:
        listeners = self.all_listeners
        if _only_default_plaintext(listeners):
            node = {"version": 3 if self.rack else 2, "host": self.host, "port": self.port,
                    "endpoints": [str(listeners[0])], "jmx_port": -1,
                    "timestamp": _now_ms_text(now_ms)}
        else:
            plaintext = next((ep for ep in listeners if ep.security_protocol == "PLAINTEXT"),
                             None)
            node = {"version": 4, "host": plaintext.host if plaintext else None,
                    "port": plaintext.port if plaintext else -1,
                    "endpoints": [str(ep) for ep in listeners],
                    "listener_security_protocol_map": {
                        ep.name: ep.security_protocol for ep in listeners},
                    "jmx_port": -1, "timestamp": _now_ms_text(now_ms)}
        if self.rack:
            node["rack"] = self.rack
        return json.dumps(node).encode()

    @classmethod
    def decode(cls, broker_id: int, data: bytes) -> "BrokerRegistration":
        node = json.loads(data)
        protocols = node.get("listener_security_protocol_map") or {}
        listeners = []
        for text in node.get("endpoints", []):
            match = _ENDPOINT.match(text)
            if match:
                name = match["protocol"]
                listeners.append(ListenerEndpoint(name, match["host"], int(match["port"]),
                                                  protocols.get(name, name)))
        host, port = node.get("host"), node.get("port", -1)
        # Newer registrations may leave host/port empty and list only endpoints.
        chosen = next((ep for ep in listeners if ep.security_protocol == "PLAINTEXT"),
                      listeners[0] if listeners and not host else None)
        if chosen is not None:
            host, port = chosen.host, chosen.port
        if not listeners and host:
            listeners = [ListenerEndpoint("PLAINTEXT", host, int(port))]
        kept = () if _only_default_plaintext(listeners, host, port) else tuple(listeners)
        return cls(broker_id, host or "", int(port), node.get("rack"), kept)


def _only_default_plaintext(listeners, host=None, port=None) -> bool:
    """One listener named PLAINTEXT (at host:port, if given): the seeds' format."""
    if len(listeners) != 1:
        return False
    only = listeners[0]
    return (only.name == "PLAINTEXT" and only.security_protocol == "PLAINTEXT"
            and (host is None or (only.host, only.port) == (host, int(port))))


@dataclass(frozen=True, slots=True)
class PartitionStateNode:
    """Leader and ISR of one partition as the controller wrote it."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int

    @property
    def online(self) -> bool:
        return self.leader != NO_LEADER

    def encode(self) -> bytes:
        return json.dumps({"controller_epoch": self.controller_epoch, "leader": self.leader,
                           "version": 1, "leader_epoch": self.leader_epoch,
                           "isr": list(self.isr)}).encode()

    @classmethod
    def decode(cls, data: bytes) -> "PartitionStateNode":
        node = json.loads(data)
        return cls(int(node["leader"]), int(node["leader_epoch"]),
                   tuple(int(b) for b in node.get("isr", [])), int(node["controller_epoch"]))


def encode_assignment(assignment: Mapping[int, tuple[int, ...]],
                      topic_id: uuid.UUID | None = None) -> bytes:
    """A topic node: Kafka's version 3 with ``topic_id``, else version 1."""
    partitions = _partitions_json(assignment)
    if topic_id is None:
        return json.dumps({"version": 1, "partitions": partitions}).encode()
    return json.dumps({"version": 3, "topic_id": uuid_text(topic_id), "partitions": partitions,
                       "adding_replicas": {}, "removing_replicas": {}}).encode()


def replace_assignment(data: bytes, assignment: Mapping[int, tuple[int, ...]]) -> bytes:
    """The topic node ``data`` with a new assignment, every other field (the topic id)
    kept."""
    node = json.loads(data)
    node["partitions"] = _partitions_json(assignment)
    return json.dumps(node).encode()


def _partitions_json(assignment: Mapping[int, tuple[int, ...]]) -> dict[str, list[int]]:
    return {str(p): list(replicas) for p, replicas in sorted(assignment.items())}


def with_topic_id(data: bytes, topic_id: uuid.UUID) -> bytes:
    """The topic node ``data`` of a topic created without an id, given ``topic_id``."""
    node = json.loads(data)
    node.update(version=max(int(node.get("version", 1)), 3), topic_id=uuid_text(topic_id))
    node.setdefault("adding_replicas", {})
    node.setdefault("removing_replicas", {})
    return json.dumps(node).encode()


def decode_topic_id(data: bytes) -> uuid.UUID | None:
    """The topic id of a topic node; None for a topic created without one."""
    text = json.loads(data).get("topic_id")
    return parse_uuid_text(text) if text else None


def decode_assignment(data: bytes) -> dict[int, tuple[int, ...]]:
    node = json.loads(data)
    return {int(p): tuple(int(b) for b in replicas)
            for p, replicas in node.get("partitions", {}).items()}


def encode_preferred_election(partitions) -> bytes:
    """``/admin/preferred_replica_election``: the partitions to move back to replica 0."""
    return json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": int(partition)}
        for topic, partition in sorted(partitions)]}).encode()


def decode_preferred_election(data: bytes) -> list[tuple[str, int]]:
    node = json.loads(data)
    return [(str(p["topic"]), int(p["partition"])) for p in node.get("partitions", [])]


def encode_reassignment(targets: Mapping[tuple[str, int], tuple[int, ...]],
                        originals: Mapping[tuple[str, int], tuple[int, ...]] | None = None
                        ) -> bytes:
    """``/admin/reassign_partitions``; with a partition's replicas before the reassignment
    (pylog's "original_replicas", kept by AlterPartitionReassignments to list and cancel
    it)."""
    originals = originals or {}
    entries = []
    for (topic, partition), replicas in sorted(targets.items()):
        entry = {"topic": topic, "partition": partition, "replicas": list(replicas)}
        if (topic, partition) in originals:
            entry["original_replicas"] = list(originals[(topic, partition)])
        entries.append(entry)
    return json.dumps({"version": 1, "partitions": entries}).encode()


def decode_reassignment(data: bytes) -> dict[tuple[str, int], tuple[int, ...]]:
    node = json.loads(data)
    return {(str(p["topic"]), int(p["partition"])): tuple(int(r) for r in p["replicas"])
            for p in node.get("partitions", [])}


def decode_reassignment_originals(data: bytes) -> dict[tuple[str, int], tuple[int, ...]]:
    """The "original_replicas" of the entries that have them."""
    node = json.loads(data)
    return {(str(p["topic"]), int(p["partition"])): tuple(int(r) for r in p["original_replicas"])
            for p in node.get("partitions", []) if p.get("original_replicas") is not None}


def encode_controller(broker_id: int, now_ms: int) -> bytes:
    return json.dumps({"version": 1, "brokerid": broker_id,
                       "timestamp": _now_ms_text(now_ms)}).encode()


def decode_controller(data: bytes) -> int:
    return int(json.loads(data)["brokerid"])


def encode_topic_config(configs: Mapping[str, str]) -> bytes:
    return json.dumps({"version": 1, "config": {k: str(v) for k, v in configs.items()}}).encode()


def decode_topic_config(data: bytes) -> dict[str, str]:
    return {k: str(v) for k, v in json.loads(data).get("config", {}).items()}


def new_cluster_id() -> str:
    """A cluster id as Kafka makes them: a random UUID in url-safe base64, unpadded."""
    return uuid_text(uuid.uuid4())


def encode_cluster_id(cluster_id: str) -> bytes:
    return json.dumps({"version": "1", "id": cluster_id}).encode()


def decode_cluster_id(data: bytes) -> str:
    return str(json.loads(data)["id"])
