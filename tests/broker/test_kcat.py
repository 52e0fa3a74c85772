"""kcat (librdkafka) against a real broker: every codec, metadata, timestamp lookups."""

import subprocess
import time

import pytest

from pylog.protocol import ApiKey
from pylog.records import iter_batch_headers
from tests.broker.wire import WireClient, fetch_body

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def kcat(broker, *args, stdin: str | None = None) -> str:
    result = subprocess.run(["kcat", "-b", broker.bootstrap, *args], input=stdin,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def consume(broker, topic, *args, fmt="%p|%o|%k|%s|%h|%T\\n") -> list[list[str]]:
    out = kcat(broker, "-C", "-t", topic, "-e", "-q", "-f", fmt, *args)
    return [line.split("|") for line in out.splitlines()]


@pytest.mark.parametrize("codec", list(CODECS))
def test_produce_and_consume_with_each_codec(broker, codec):
    topic = f"kcat-{codec}"
    lines = "".join(f"key{i}:value-{i}-{'x' * (i % 50)}\n" for i in range(500))
    before = int(time.time() * 1000)
    kcat(broker, "-P", "-t", topic, "-K:", "-z", codec, "-H", "source=kcat", "-H", f"codec={codec}",
         stdin=lines)
    rows = consume(broker, topic, "-o", "beginning")
    assert [r[2] for r in rows] == [f"key{i}" for i in range(500)]
    assert [r[3] for r in rows] == [f"value-{i}-{'x' * (i % 50)}" for i in range(500)]
    assert [int(r[1]) for r in rows] == list(range(500))
    assert all(r[4] == f"source=kcat,codec={codec}" for r in rows)
    assert all(int(r[5]) >= before - 1000 for r in rows)
    # The batches stay compressed on the broker exactly as the producer sent them
    # (librdkafka sends a batch uncompressed when compression would not shrink it).
    with WireClient(broker.bootstrap) as wire:
        fetched = wire.call(ApiKey.FETCH, 11, fetch_body(topic, {0: 0}))
    raw = bytes(fetched["responses"][0]["partitions"][0]["records"])
    stored = {h.compression for _, h in iter_batch_headers(raw)}
    assert CODECS[codec] in stored and stored <= {0, CODECS[codec]}


def test_metadata_listing(broker):
    kcat(broker, "-P", "-t", "kcat-meta", stdin="hello\n")
    out = kcat(broker, "-L")
    assert f"broker 0 at {broker.bootstrap}" in out
    assert 'topic "kcat-meta" with 1 partitions' in out
    assert "leader 0, replicas: 0, isrs: 0" in out


def test_start_at_timestamp(broker):
    topic = "kcat-time"
    kcat(broker, "-P", "-t", topic, stdin="".join(f"early{i}\n" for i in range(10)))
    cut = max(int(r[5]) for r in consume(broker, topic, "-o", "beginning")) + 1
    while int(time.time() * 1000) <= cut:
        time.sleep(0.01)
    kcat(broker, "-P", "-t", topic, stdin="".join(f"late{i}\n" for i in range(10)))
    rows = consume(broker, topic, "-o", f"s@{cut}")
    assert [r[3] for r in rows] == [f"late{i}" for i in range(10)]
    assert [int(r[1]) for r in rows] == list(range(10, 20))
    # After every record: nothing to read (offset -1 from the broker).
    assert consume(broker, topic, "-o", f"s@{int(time.time() * 1000) + 3600_000}") == []


def test_partitions_keep_their_own_order(broker):
    topic = "kcat-parts"
    with WireClient(broker.bootstrap) as wire:
        from tests.broker.wire import create_body
        wire.call(ApiKey.CREATE_TOPICS, 4, create_body(topic, 3))
    for p in range(3):
        kcat(broker, "-P", "-t", topic, "-p", str(p), stdin="".join(f"p{p}-{i}\n" for i in range(50)))
    rows = consume(broker, topic, "-o", "beginning")
    for p in range(3):
        assert [r[3] for r in rows if r[0] == str(p)] == [f"p{p}-{i}" for i in range(50)]
