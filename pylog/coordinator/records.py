"""The records of ``__consumer_offsets``: keys and values as Kafka writes them.

Every record's key and value start with an int16 version. The key's version says what
the record is about; a record with a null value (a tombstone) deletes that key, which
is what log compaction keeps until ``delete.retention.ms``::

    offset commit key (v0, v1)      group string, topic string, partition int32
    offset commit value v3          offset int64, leader_epoch int32, metadata string,
                                    commit_timestamp int64
        (v0: offset, metadata, commit_timestamp; v1: ... expire_timestamp int64;
         v2: offset, metadata, commit_timestamp; v4: v3, flexible)
    group metadata key (v2)         group string
    group metadata value v3         protocol_type string, generation int32,
                                    protocol string?, leader string?,
                                    current_state_timestamp int64 (v2+),
                                    members [member_id string, group_instance_id string?
                                    (v3+), client_id string, client_host string,
                                    rebalance_timeout int32 (v1+), session_timeout int32,
                                    subscription bytes, assignment bytes]

Transaction markers are control batches whose one record's key says which::

    control record key (v0)         version int16, type int16 (0 ABORT, 1 COMMIT)

pylog writes offset values v3 and group values v3 (Kafka 2.3 and later read both) and
reads every version. Pure code over bytes: no files, no clocks.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass

from pylog.errors import CorruptMessageError, InvalidRequestError
from pylog.protocol.schema import F, compile_struct
from pylog.records import control

_VERSION = struct.Struct(">h")

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3

_OFFSET_KEY = (F("group", "string"), F("topic", "string"), F("partition", "int32"))
_GROUP_KEY = (F("group", "string"),)
_OFFSET_VALUE = (
    F("offset", "int64"),
    F("leader_epoch", "int32", "3+", default=-1),
    F("metadata", "string"),
    F("commit_timestamp", "int64"),
    F("expire_timestamp", "int64", "1", default=-1),
)
_GROUP_VALUE = (
    F("protocol_type", "string"),
    F("generation", "int32"),
    F("protocol", "string", nullable="0+"),
    F("leader", "string", nullable="0+"),
    F("current_state_timestamp", "int64", "2+", default=-1),
    F("members", "[]", fields=(
        F("member_id", "string"),
        F("group_instance_id", "string", "3+", nullable="3+", default=None),
        F("client_id", "string"),
        F("client_host", "string"),
        F("rebalance_timeout", "int32", "1+", default=-1),
        F("session_timeout", "int32"),
        F("subscription", "bytes"),
        F("assignment", "bytes"),
    )),
)


def _codec(fields, version: int, flexible_from: int | None = None):
    return compile_struct(fields, version, flexible_from is not None and version >= flexible_from)


_OFFSET_KEYS = {v: _codec(_OFFSET_KEY, v) for v in (0, 1)}
_GROUP_KEYS = {2: _codec(_GROUP_KEY, 2)}
_OFFSET_VALUES = {v: _codec(_OFFSET_VALUE, v, 4) for v in range(5)}
_GROUP_VALUES = {v: _codec(_GROUP_VALUE, v, 4) for v in range(5)}


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


@dataclass(frozen=True, slots=True)
class OffsetValue:
    """A committed offset as stored: the next offset to read, and its context."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


@dataclass(frozen=True, slots=True)
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberValue, ...]


def encode_versioned(version: int, codec, value: dict) -> bytes:
    """A record key or value of an internal topic: the schema version (int16), then
    ``value`` as ``codec`` writes it."""
    out = bytearray(_VERSION.pack(version))
    codec.write(out, value)
    return bytes(out)


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return encode_versioned(OFFSET_KEY_VERSION, _OFFSET_KEYS[OFFSET_KEY_VERSION],
                   {"group": group, "topic": topic, "partition": partition})


def group_key(group: str) -> bytes:
    return encode_versioned(GROUP_KEY_VERSION, _GROUP_KEYS[GROUP_KEY_VERSION], {"group": group})


def offset_value(value: OffsetValue) -> bytes:
    return encode_versioned(OFFSET_VALUE_VERSION, _OFFSET_VALUES[OFFSET_VALUE_VERSION], {
        "offset": value.offset, "leader_epoch": value.leader_epoch,
        "metadata": value.metadata, "commit_timestamp": value.commit_timestamp})


def group_value(value: GroupValue) -> bytes:
    return encode_versioned(GROUP_VALUE_VERSION, _GROUP_VALUES[GROUP_VALUE_VERSION], {
        "protocol_type": value.protocol_type, "generation": value.generation,
        "protocol": value.protocol, "leader": value.leader,
        "current_state_timestamp": value.current_state_timestamp,
        "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                     "client_id": m.client_id, "client_host": m.client_host,
                     "rebalance_timeout": m.rebalance_timeout,
                     "session_timeout": m.session_timeout,
                     "subscription": m.subscription, "assignment": m.assignment}
                    for m in value.members]})


def read_version(buf: bytes, what: str) -> int:
    """The schema version a record key or value starts with; CorruptMessageError naming
    ``what`` if it is too short."""
    if len(buf) < 2:
        raise CorruptMessageError(f"{what} of {len(buf)} bytes has no version")
    return _VERSION.unpack_from(buf)[0]


def decode_versioned(table: dict, version: int, buf: bytes, what: str) -> dict:
    """Decode ``buf`` after its version with the codec of ``version`` in ``table``;
    CorruptMessageError naming ``what`` for an unknown version or bytes that do not
    decode."""
    codec = table.get(version)
    if codec is None:
        raise CorruptMessageError(f"unknown {what} version {version}")
    try:
        return codec.read(buf, 2)[0]
    except InvalidRequestError as error:
        raise CorruptMessageError(f"malformed {what} v{version}: {error}") from None


def decode_key(buf: bytes) -> OffsetKey | GroupKey:
    """The key of a ``__consumer_offsets`` record; CorruptMessageError if it is none."""
    version = read_version(buf, "key")
    if version in _OFFSET_KEYS:
        key = decode_versioned(_OFFSET_KEYS, version, buf, "offset commit key")
        return OffsetKey(key["group"], key["topic"], key["partition"])
    key = decode_versioned(_GROUP_KEYS, version, buf, "group metadata key")
    return GroupKey(key["group"])


def decode_offset_value(buf: bytes) -> OffsetValue:
    value = decode_versioned(_OFFSET_VALUES, read_version(buf, "offset value"), buf, "offset commit value")
    return OffsetValue(value["offset"], value["leader_epoch"], value["metadata"],
                       value["commit_timestamp"])


def decode_group_value(buf: bytes) -> GroupValue:
    value = decode_versioned(_GROUP_VALUES, read_version(buf, "group value"), buf, "group metadata value")
    members = tuple(MemberValue(
        m["member_id"], m["group_instance_id"], m["client_id"], m["client_host"],
        m["rebalance_timeout"], m["session_timeout"], bytes(m["subscription"]),
        bytes(m["assignment"])) for m in value["members"])
    return GroupValue(value["protocol_type"], value["generation"], value["protocol"],
                      value["leader"], value["current_state_timestamp"], members)


CONTROL_ABORT = control.ABORT
CONTROL_COMMIT = control.COMMIT
_CONTROL_KEY = struct.Struct(">hh")  # the layout is in pylog.records.control


def decode_control_type(key: bytes | None) -> int:
    """The type of a control record (CONTROL_ABORT, CONTROL_COMMIT, or another kind)."""
    if key is None or len(key) < _CONTROL_KEY.size:
        raise CorruptMessageError(f"control record key of {0 if key is None else len(key)} "
                                  "bytes: expected version and type")
    return _CONTROL_KEY.unpack_from(key)[1]


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@functools.lru_cache(maxsize=65536)
def partition_for(group: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition of a group: Kafka's
    ``Utils.abs(groupId.hashCode) % n``, where ``abs`` masks the sign bit."""
    return (java_string_hash(group) & 0x7FFFFFFF) % num_partitions


# -- the consumer protocol's subscription (to know which topics a group reads) -----------

# Every version starts with the topics; later fields (user data, owned partitions) are not needed.
_SUBSCRIPTION_TOPICS = compile_struct((F("topics", "[]string"),), 0, False)


def subscribed_topics(subscription: bytes) -> set[str]:
    """Topics of a ``consumer`` protocol subscription; empty if it does not parse."""
    try:
        return set(_SUBSCRIPTION_TOPICS.read(subscription, 2)[0]["topics"])
    except Exception:  # noqa: BLE001 -- another protocol's bytes: no known topics
        return set()
