"""The records of __consumer_offsets against hand-built bytes of every version Kafka wrote,
and the group partitioning against Java's String.hashCode."""

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

from pylog.coordinator.records import (
    GroupKey, GroupValue, MemberValue, OffsetKey, OffsetValue, decode_group_value, decode_key,
    decode_offset_value, group_key, group_value, java_string_hash, offset_key, offset_value,
    partition_for, subscribed_topics)
from pylog.errors import CorruptMessageError


def string(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def blob(raw: bytes) -> bytes:
    return struct.pack(">i", len(raw)) + raw


# -- keys ---------------------------------------------------------------------------------

def test_offset_key_bytes_are_kafkas_v1_layout():
    assert offset_key("g", "tp", 7) == (struct.pack(">h", 1) + string("g") + string("tp")
                                        + struct.pack(">i", 7))


def test_group_key_bytes_are_kafkas_v2_layout():
    assert group_key("my-group") == struct.pack(">h", 2) + string("my-group")


@pytest.mark.parametrize("version", [0, 1])
def test_offset_keys_of_both_versions_decode(version):
    raw = struct.pack(">h", version) + string("grp") + string("orders") + struct.pack(">i", 3)
    assert decode_key(raw) == OffsetKey("grp", "orders", 3)


def test_keys_round_trip():
    assert decode_key(offset_key("ü-group", "topic.with.dots", 2**31 - 1)) == \
        OffsetKey("ü-group", "topic.with.dots", 2**31 - 1)
    assert decode_key(group_key("")) == GroupKey("")


@pytest.mark.parametrize("raw", [b"", b"\x00", struct.pack(">h", 3) + string("g"),
                                 struct.pack(">h", 1) + string("g") + string("t"),
                                 struct.pack(">h", 2) + b"\x00\x09abc"])
def test_corrupt_keys_raise(raw):
    with pytest.raises(CorruptMessageError):
        decode_key(raw)


# -- offset values ------------------------------------------------------------------------

def test_offset_value_round_trips_as_v3():
    value = OffsetValue(offset=123456789012, leader_epoch=4, metadata="meta ✓",
                        commit_timestamp=1_700_000_000_000)
    raw = offset_value(value)
    assert raw == (struct.pack(">hqi", 3, 123456789012, 4) + string("meta ✓")
                   + struct.pack(">q", 1_700_000_000_000))
    assert decode_offset_value(raw) == value


def test_offset_value_v0():
    raw = struct.pack(">hq", 0, 42) + string("m0") + struct.pack(">q", 1000)
    assert decode_offset_value(raw) == OffsetValue(42, -1, "m0", 1000)


def test_offset_value_v1_with_expire_timestamp():
    raw = struct.pack(">hq", 1, 43) + string("m1") + struct.pack(">qq", 2000, 9000)
    assert decode_offset_value(raw) == OffsetValue(43, -1, "m1", 2000)


def test_offset_value_v2():
    raw = struct.pack(">hq", 2, 44) + string("") + struct.pack(">q", 3000)
    assert decode_offset_value(raw) == OffsetValue(44, -1, "", 3000)


@pytest.mark.parametrize("raw", [
    b"\x00",                                                   # no whole version
    struct.pack(">h", 9) + b"\x00" * 30,                       # unknown version
    struct.pack(">hq", 3, 1),                                  # truncated after the offset
    struct.pack(">hqi", 3, 1, 0) + b"\x00\x20ab",              # string longer than the value
    struct.pack(">hq", 1, 43) + string("m1") + struct.pack(">q", 2000),  # v1 lacks expiry
])
def test_corrupt_offset_values_raise(raw):
    with pytest.raises(CorruptMessageError):
        decode_offset_value(raw)


# -- group values -------------------------------------------------------------------------

MEMBER = MemberValue(member_id="c-1", group_instance_id="instance-1", client_id="client",
                     client_host="/10.0.0.1", rebalance_timeout=300000, session_timeout=45000,
                     subscription=b"\x00\x01sub", assignment=b"\x00\x01asg")


def test_group_value_round_trips_as_v3():
    value = GroupValue(protocol_type="consumer", generation=12, protocol="range",
                       leader="c-1", current_state_timestamp=1_700_000_000_123,
                       members=(MEMBER, MemberValue("c-2", None, "client", "/10.0.0.2",
                                                    60000, 10000, b"", b"")))
    raw = group_value(value)
    assert raw[:2] == struct.pack(">h", 3)
    assert decode_group_value(raw) == value


def test_empty_group_value_round_trips():
    value = GroupValue("consumer", 3, None, None, 5, ())
    assert decode_group_value(group_value(value)) == value


def test_group_value_v0():
    member = (string("m") + string("cid") + string("/h") + struct.pack(">i", 10000)
              + blob(b"S") + blob(b"A"))
    raw = (struct.pack(">h", 0) + string("consumer") + struct.pack(">i", 2) + string("range")
           + string("m") + struct.pack(">i", 1) + member)
    assert decode_group_value(raw) == GroupValue(
        "consumer", 2, "range", "m", -1,
        (MemberValue("m", None, "cid", "/h", -1, 10000, b"S", b"A"),))


def test_group_value_v1_adds_the_rebalance_timeout():
    member = (string("m") + string("cid") + string("/h") + struct.pack(">ii", 60000, 10000)
              + blob(b"S") + blob(b""))
    raw = (struct.pack(">h", 1) + string("consumer") + struct.pack(">i", 5) + string("range")
           + string("m") + struct.pack(">i", 1) + member)
    assert decode_group_value(raw) == GroupValue(
        "consumer", 5, "range", "m", -1,
        (MemberValue("m", None, "cid", "/h", 60000, 10000, b"S", b""),))


def test_group_value_v2_adds_the_state_timestamp_and_allows_null_protocol():
    raw = (struct.pack(">h", 2) + string("consumer") + struct.pack(">i", 6) + string(None)
           + string(None) + struct.pack(">q", 1234567) + struct.pack(">i", 0))
    assert decode_group_value(raw) == GroupValue("consumer", 6, None, None, 1234567, ())


@pytest.mark.parametrize("raw", [
    b"",
    struct.pack(">h", 8) + string("consumer"),
    struct.pack(">h", 3) + string("consumer") + struct.pack(">i", 1),  # stops mid-value
    struct.pack(">h", 3) + string("consumer") + struct.pack(">i", 1) + string("r")
    + string("m") + struct.pack(">qi", 0, 2),                          # 2 members, none there
])
def test_corrupt_group_values_raise(raw):
    with pytest.raises(CorruptMessageError):
        decode_group_value(raw)


# -- partitioning -------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("", 0), ("a", 97), ("hello", 99162322), ("Aa", 2112), ("BB", 2112),
    ("polygenelubricants", -2147483648), ("console-consumer-1", 35782224),
    ("\U0001F600", 1772899),  # a surrogate pair: two UTF-16 code units
    ("ü-gruppe \U0001F600", 1587744471),
])
def test_java_string_hash_of_known_values(text, expected):
    # Expected values printed by a JVM's String.hashCode.
    assert java_string_hash(text) == expected


@pytest.mark.parametrize("group, partition", [("hello", 22), ("console-consumer-1", 24),
                                              ("\U0001F600", 49), ("ü-gruppe \U0001F600", 21)])
def test_partition_for_matches_kafka(group, partition):
    assert partition_for(group, 50) == partition


def test_partition_of_integer_min_value_hash_is_zero():
    # Kafka's Utils.abs masks the sign bit, so MIN_VALUE maps to 0, not to a negative.
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("polygenelubricants", 7) == 0


def reference_hash(text: str) -> int:
    """String.hashCode by its definition: s[0]*31^(n-1) + ... + s[n-1], over UTF-16 units."""
    units = []
    for char in text:
        point = ord(char)
        if point > 0xFFFF:
            point -= 0x10000
            units += [0xD800 + (point >> 10), 0xDC00 + (point & 0x3FF)]
        else:
            units.append(point)
    n = len(units)
    total = sum(unit * 31 ** (n - 1 - i) for i, unit in enumerate(units)) % 2**32
    return total - 2**32 if total >= 2**31 else total


@given(st.text(alphabet=st.characters(codec="utf-8")) | st.text(
    alphabet=st.characters(min_codepoint=0x10000, max_codepoint=0x10FFFF)))
def test_java_string_hash_matches_the_definition(text):
    assert java_string_hash(text) == reference_hash(text)
    # Kafka's Utils.abs(n) is n & 0x7fffffff, not Math.abs.
    assert partition_for(text, 50) == (reference_hash(text) & 0x7FFFFFFF) % 50


# -- subscriptions ------------------------------------------------------------------------

@pytest.mark.parametrize("version", [0, 1, 3])
def test_subscribed_topics_of_a_consumer_subscription(version):
    subscription = ConsumerProtocolSubscription(
        topics=["orders", "payments"], user_data=b"\x01\x02",
        owned_partitions=[ConsumerProtocolSubscription.TopicPartition(topic="orders",
                                                                      partitions=[0, 1])],
        generation_id=4, rack_id="rack-a", version=version)
    assert subscribed_topics(subscription.encode(version=version)) == {"orders", "payments"}


def test_subscribed_topics_of_other_bytes_is_empty():
    assert subscribed_topics(b"") == set()
    assert subscribed_topics(b"\x00\x00\x7f\xff\xff\xff") == set()
