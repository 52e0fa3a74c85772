"""``__transaction_state`` keys and values against bytes laid out by hand from Kafka's
TransactionLogKey/TransactionLogValue schemas."""

import struct

import pytest

from pylog.errors import CorruptMessageError
from pylog.transactions.records import (
    TxnState, TxnValue, decode_key, decode_value, encode_key, encode_value)
from pylog.types import TopicPartition


def kafka_string(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def test_key_is_version_0_and_the_id():
    assert encode_key("tx-1") == b"\x00\x00" + kafka_string("tx-1")
    assert decode_key(encode_key("tx-1")) == "tx-1"


def test_value_v0_layout_and_round_trip():
    value = TxnValue(7, 3, 60000, TxnState.PREPARE_COMMIT,
                     frozenset({TopicPartition("b", 1), TopicPartition("a", 2),
                                TopicPartition("a", 0)}), 2000, 1000)
    expected = (struct.pack(">hqhib", 0, 7, 3, 60000, 2)
                + struct.pack(">i", 2)
                + kafka_string("a") + struct.pack(">iii", 2, 0, 2)
                + kafka_string("b") + struct.pack(">ii", 1, 1)
                + struct.pack(">qq", 2000, 1000))
    assert encode_value(value) == expected
    assert decode_value(expected) == value


def test_value_v1_with_tagged_fields_is_read():
    # Flexible: compact strings and arrays (length + 1), tagged fields at the end.
    tagged = (b"\x02"                                   # two tagged fields
              + b"\x00\x08" + struct.pack(">q", 5)      # tag 0: previous producer id 5
              + b"\x02\x02" + struct.pack(">h", 2))     # tag 2: client transaction version
    buf = (struct.pack(">hqhib", 1, 9, 0, 1000, 4)
           + b"\x02" + b"\x02t" + b"\x02" + struct.pack(">i", 3) + b"\x00"
           + struct.pack(">qq", 20, 10) + tagged)
    value = decode_value(buf)
    assert value == TxnValue(9, 0, 1000, TxnState.COMPLETE_COMMIT,
                             frozenset({TopicPartition("t", 3)}), 20, 10,
                             previous_producer_id=5)


def test_null_partitions_and_bad_input():
    buf = struct.pack(">hqhib", 0, 1, 0, 100, 0) + struct.pack(">i", -1) + struct.pack(">qq", 1, -1)
    assert decode_value(buf).partitions == frozenset()
    with pytest.raises(CorruptMessageError, match="status 9"):
        decode_value(struct.pack(">hqhib", 0, 1, 0, 100, 9) + struct.pack(">iqq", -1, 1, -1))
    with pytest.raises(CorruptMessageError, match="version 3"):
        decode_value(struct.pack(">h", 3) + b"\x00" * 30)
    with pytest.raises(CorruptMessageError):
        decode_key(b"\x00")
