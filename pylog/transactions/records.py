"""The records of ``__transaction_state``: keys and values as Kafka writes them.

Key and value each start with an int16 version. A record with a null value (a
tombstone) deletes its transactional id, which is what log compaction keeps::

    key v0                  transactional_id string
    value v0                producer_id int64, producer_epoch int16,
                            transaction_timeout_ms int32, transaction_status int8,
                            transaction_partitions [topic string,
                                                    partition_ids [int32]] (nullable),
                            last_update_timestamp_ms int64, start_timestamp_ms int64
    value v1 (flexible)     v0, with tagged fields previous_producer_id (tag 0),
                            next_producer_id (tag 1), client_transaction_version (tag 2)

The status byte is the transaction state: 0 Empty, 1 Ongoing, 2 PrepareCommit,
3 PrepareAbort, 4 CompleteCommit, 5 CompleteAbort, 6 Dead, 7 PrepareEpochFence.
pylog writes value v0, as Kafka 3.x does, and reads v0 and v1. Pure code over bytes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from pylog.coordinator.records import decode_versioned, encode_versioned, read_version
from pylog.errors import CorruptMessageError
from pylog.protocol.schema import F, compile_struct
from pylog.types import TopicPartition

KEY_VERSION = 0
VALUE_VERSION = 0

_KEY = (F("transactional_id", "string"),)
_VALUE = (
    F("producer_id", "int64"),
    F("previous_producer_id", "int64", "1+", tag=0, tagged="1+", default=-1),
    F("next_producer_id", "int64", "1+", tag=1, tagged="1+", default=-1),
    F("producer_epoch", "int16"),
    F("transaction_timeout_ms", "int32"),
    F("transaction_status", "int8"),
    F("transaction_partitions", "[]", nullable="0+", fields=(
        F("topic", "string"),
        F("partition_ids", "[]int32"),
    )),
    F("last_update_timestamp_ms", "int64"),
    F("start_timestamp_ms", "int64"),
    F("client_transaction_version", "int16", "1+", tag=2, tagged="1+", default=0),
)

_KEYS = {0: compile_struct(_KEY, 0, False)}
_VALUES = {v: compile_struct(_VALUE, v, v >= 1) for v in (0, 1)}


class TxnState(enum.IntEnum):
    """A transactional id's state; the value is the status byte written to the log."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def wire_name(self) -> str:
        """The name DescribeTransactions and ListTransactions use (``PrepareCommit``)."""
        return _WIRE_NAMES[self]

    @classmethod
    def from_wire_name(cls, name: str) -> "TxnState | None":
        return _BY_WIRE_NAME.get(name)


_WIRE_NAMES = {
    TxnState.EMPTY: "Empty", TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit", TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit", TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead", TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_WIRE_NAME = {name: state for state, name in _WIRE_NAMES.items()}


@dataclass(frozen=True, slots=True)
class TxnValue:
    """One transactional id's state as stored."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    last_update_ms: int
    start_ms: int
    previous_producer_id: int = -1  # v1 only
    next_producer_id: int = -1  # v1 only


def encode_key(transactional_id: str) -> bytes:
    return encode_versioned(KEY_VERSION, _KEYS[KEY_VERSION],
                            {"transactional_id": transactional_id})


def encode_value(value: TxnValue) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(value.partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return encode_versioned(VALUE_VERSION, _VALUES[VALUE_VERSION], {
        "producer_id": value.producer_id, "producer_epoch": value.producer_epoch,
        "transaction_timeout_ms": value.timeout_ms, "transaction_status": int(value.state),
        "transaction_partitions": [{"topic": t, "partition_ids": ps}
                                   for t, ps in by_topic.items()],
        "last_update_timestamp_ms": value.last_update_ms,
        "start_timestamp_ms": value.start_ms})


def _read(table: dict, buf: bytes, what: str) -> dict:
    return decode_versioned(table, read_version(buf, what), buf, what)


def decode_key(buf: bytes) -> str:
    """The transactional id of a ``__transaction_state`` key."""
    return _read(_KEYS, buf, "transaction log key")["transactional_id"]


def decode_value(buf: bytes) -> TxnValue:
    value = _read(_VALUES, buf, "transaction log value")
    try:
        state = TxnState(value["transaction_status"])
    except ValueError:
        raise CorruptMessageError(
            f"unknown transaction status {value['transaction_status']}") from None
    partitions = frozenset(TopicPartition(t["topic"], p)
                           for t in value["transaction_partitions"] or ()
                           for p in t["partition_ids"])
    return TxnValue(value["producer_id"], value["producer_epoch"],
                    value["transaction_timeout_ms"], state, partitions,
                    value["last_update_timestamp_ms"], value["start_timestamp_ms"],
                    value["previous_producer_id"], value["next_producer_id"])
