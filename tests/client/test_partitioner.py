"""murmur2 placement against kafka-python's port of Java's Utils.murmur2, and sticky partitioning."""

import random

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from pylog.client import DefaultPartitioner, RoundRobinPartitioner, murmur2, murmur2_partition


@settings(max_examples=500, deadline=None)
@given(key=st.binary(max_size=64))
def test_murmur2_matches_the_java_algorithm(key):
    assert murmur2(key) & 0x7FFFFFFF == kafka_python_murmur2(bytearray(key)) & 0x7FFFFFFF


def test_java_test_vectors():
    # Signed results of org.apache.kafka.common.utils.Utils.murmur2 from Kafka's UtilsTest.
    cases = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
             b"a-little-bit-longer-string": -1486304829, b"abc": 479470107,
             b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971}
    for key, signed in cases.items():
        assert murmur2(key) == signed & 0xFFFFFFFF, key


def test_sticky_partitioning_without_key():
    partitioner = DefaultPartitioner(random.Random(7))
    partitions = [0, 1, 2, 3]
    first = {partitioner.partition("t", None, partitions, partitions) for _ in range(50)}
    assert len(first) == 1
    (sticky,) = first
    seen = {sticky}
    for _ in range(40):
        partitioner.on_new_batch("t", sticky)
        sticky = partitioner.partition("t", None, partitions, partitions)
        seen.add(sticky)
    assert seen == set(partitions)
    assert partitioner.partition("t", b"key", partitions, partitions) == murmur2_partition(b"key", 4)


def test_round_robin():
    partitioner = RoundRobinPartitioner()
    assert [partitioner.partition("t", b"k", [0, 1, 2], [0, 1, 2]) for _ in range(6)] == [0, 1, 2, 0, 1, 2]
