"""murmur2 placement against kafka-python's port of Java's Utils.murmur2, Kafka's own test
vectors and librdkafka's ``murmur2_random``, for both the C hash (``pylog/records/_speedups.c``)
and its pure-Python twin; and sticky partitioning."""

import array
import os
import random
import subprocess
import sys

import confluent_kafka
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from pylog.client import DefaultPartitioner, RoundRobinPartitioner, murmur2, murmur2_partition
from pylog.client import partitioner as partitioner_module
from pylog.client.partitioner import native_murmur2, py_murmur2

HASHES = [pytest.param(native_murmur2, id="c"), pytest.param(py_murmur2, id="python")]

# lengths 0-7 (every tail of 0-3 bytes after 0 or 1 whole words), a little longer, and long
keys = st.binary(max_size=7) | st.binary(min_size=8, max_size=64) | st.binary(min_size=1000, max_size=5000)


def test_the_c_hash_is_built_and_used():
    """make test builds the extension from source (pip install -e .): a missing compiler
    or header would silently leave the slow hash in place."""
    assert native_murmur2 is not None
    assert partitioner_module.native_hash()
    assert murmur2 is native_murmur2


def test_without_speedups_the_python_hash_is_used():
    code = ("from pylog.client import murmur2, DefaultPartitioner\n"
            "from pylog.client.partitioner import py_murmur2\n"
            "assert murmur2 is py_murmur2\n"
            "p = DefaultPartitioner()\n"
            "print([p.partition('t', b'key-%d' % i, range(7), range(7)) for i in range(50)])\n")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYLOG_RECORDS_SPEEDUPS": "0"},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str([murmur2_partition(b"key-%d" % i, 7) for i in range(50)])


@settings(max_examples=300, deadline=None)
@given(key=keys)
def test_the_c_and_python_hashes_agree(key):
    expected = py_murmur2(key)
    assert 0 <= expected <= 0xFFFFFFFF
    for form in (key, bytearray(key), memoryview(key), memoryview(b"x" + key + b"y")[1:-1]):
        assert native_murmur2(form) == expected
        assert py_murmur2(form) == expected


@pytest.mark.parametrize("hash_", HASHES)
@settings(max_examples=200, deadline=None)
@given(key=keys)
def test_murmur2_matches_the_java_algorithm(hash_, key):
    assert hash_(key) & 0x7FFFFFFF == kafka_python_murmur2(bytearray(key)) & 0x7FFFFFFF


@pytest.mark.parametrize("hash_", HASHES)
def test_java_test_vectors(hash_):
    # Signed results of org.apache.kafka.common.utils.Utils.murmur2 from Kafka's UtilsTest.
    cases = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
             b"a-little-bit-longer-string": -1486304829, b"abc": 479470107,
             b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971}
    for key, signed in cases.items():
        assert hash_(key) == signed & 0xFFFFFFFF, key
        assert hash_(bytearray(key)) == hash_(memoryview(key)) == signed & 0xFFFFFFFF, key


@pytest.mark.parametrize("hash_", HASHES)
def test_any_buffer_hashes_its_bytes(hash_):
    data = bytes(range(256)) * 3
    for buffer in (memoryview(data).cast("I"), memoryview(data).cast("b"), array.array("H", data[:64]),
                   memoryview(data[:20]).cast("B", (4, 5))):
        assert hash_(buffer) == hash_(bytes(buffer)) == py_murmur2(bytes(buffer))


@pytest.mark.parametrize("hash_", HASHES)
def test_what_is_not_a_buffer_is_refused(hash_):
    for not_bytes in ("key", None, 7, [1, 2]):
        with pytest.raises(TypeError):
            hash_(not_bytes)
    with pytest.raises((TypeError, BufferError)):  # not contiguous
        hash_(memoryview(b"abcdefgh")[::2])


@pytest.mark.parametrize("hash_", HASHES)
def test_same_partitions_as_librdkafka(hash_, librdkafka_placement):
    partitions, placed = librdkafka_placement
    assert {key: (hash_(key) & 0x7FFFFFFF) % partitions for key in placed} == placed


@pytest.fixture(scope="module")
def librdkafka_placement(mock_bootstrap):
    """Where librdkafka's murmur2_random puts keys of every length from 1 to 40 and some
    of 1-4 KB (the mock cluster creates the topic with 4 partitions: 2 bits of the hash
    per key, a wrong hash shows in 3 keys out of 4): (partitions, {key: partition})."""
    topic = "murmur2-placement"
    rng = random.Random(11)
    keys = {rng.randbytes(length) for length in range(1, 41) for _ in range(5)}
    keys |= {rng.randbytes(rng.randrange(1000, 4000)) for _ in range(10)} | {b"key-%d" % i for i in range(50)}
    placed, errors = {}, []
    producer = confluent_kafka.Producer({"bootstrap.servers": mock_bootstrap,
                                        "partitioner": "murmur2_random", "log_level": 3})
    for key in keys:
        producer.produce(topic, b"v", key, on_delivery=lambda err, msg: (
            errors.append(err) if err else placed.__setitem__(msg.key(), msg.partition())))
    assert producer.flush(30) == 0 and errors == []
    assert placed.keys() == keys
    partitions = len(producer.list_topics(topic, timeout=10).topics[topic].partitions)
    assert len(set(placed.values())) == partitions > 1
    return partitions, placed


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
