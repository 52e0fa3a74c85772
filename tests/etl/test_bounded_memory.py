"""A map task's memory is bounded whatever its range: 2 GiB of JSON records through one
task whose address space is capped far below that (a real broker, a real fetch path).
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pylog.etl.model import SCHEDULED, TaskRange
from pylog.etl.task import TaskSpec
from pylog.testing.broker import BrokerProcess
from tests.etl.helpers import write_config

RANGE_MB = 2048
VALUE_BYTES = 64 * 1024
# Address space, not only resident memory (imports alone take ~400 MB of it); the task's
# resident peak is about 480 MB, for any range size (also measured at 4 GiB).
CAP_BYTES = 1024 << 20
ROOT = Path(__file__).resolve().parents[2]


def big_values(count: int, first: int = 0) -> list[bytes]:
    """JSON events with a ~64 KiB text field that zstd compresses several times over (so the
    broker stores a few hundred MB while the task decodes the full size)."""
    words = " ".join(f"w{(n * 7919) % 100003:05d}" for n in range(40_000))
    values = []
    for i in range(first, first + count):
        at = (i * 4099) % (len(words) - VALUE_BYTES)
        values.append(b'{"user":"u%d","n":%d,"ts":"2026-11-20T07:15:00Z","text":"%s"}'
                      % (i % 7, i, words[at:at + VALUE_BYTES].encode()))
    return values


@pytest.fixture(scope="module")
def big_topic(tmp_path_factory):
    import confluent_kafka

    base = tmp_path_factory.mktemp("big")
    with BrokerProcess(base / "broker", {"num.partitions": 1, "message.max.bytes": 8 << 20,
                                         "log.segment.bytes": 512 << 20}) as broker:
        count = RANGE_MB * (1 << 20) // VALUE_BYTES
        producer = confluent_kafka.Producer({
            "bootstrap.servers": broker.bootstrap, "compression.type": "zstd", "linger.ms": 50,
            "batch.size": 4 << 20, "message.max.bytes": 8 << 20, "log_level": 3,
            "queue.buffering.max.kbytes": 256 << 10})
        produced = 0
        for start in range(0, count, 1024):
            for value in big_values(min(1024, count - start), start):
                while True:
                    try:
                        producer.produce("big", value=value, partition=0)
                        break
                    except BufferError:
                        producer.poll(0.1)
                produced += len(value)
            producer.poll(0)
        assert producer.flush(300) == 0
        yield broker, base, count, produced


def test_a_2gb_range_loads_with_a_task_capped_far_below_it(big_topic):
    broker, base, count, produced = big_topic
    assert produced >= RANGE_MB * (1 << 20) * 0.99
    config = write_config(base, broker.bootstrap, topic="big", target_file_mb=64, row_group_mb=16,
                          schema={"user": "string", "n": "int64", "ts": "timestamp", "text": "string"})
    topic = config.topics[0]
    spec = TaskSpec("bounded", SCHEDULED, 0, TaskRange("big", 0, 0, count), topic,
                    config.source, config.warehouse, config.state)
    spec_path = base / "spec.pickle"
    spec_path.write_bytes(pickle.dumps(spec))
    result = subprocess.run([sys.executable, "-m", "tests.etl.task_child", str(spec_path), str(CAP_BYTES)],
                            cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(result.stdout.splitlines()[-1])
    assert figures["rows"] == figures["records"] == count
    assert figures["max_rss_bytes"] < CAP_BYTES <= produced / 2
    # Files of about target_file_mb, one after another in the hour: <range>.parquet, .1, .2 ...
    files = sorted(figures["files"])
    assert len(files) >= 2, files
    offsets = []
    for path in files:
        parquet = pq.ParquetFile(path)
        assert parquet.metadata.num_row_groups >= 1
        offsets += parquet.read(columns=["_offset"]).column("_offset").to_pylist()
    assert sorted(offsets) == list(range(count))  # every record once
    sizes = [os.path.getsize(p) for p in files]
    assert max(sizes) < 64 * (1 << 20) + 2 * 16 * (1 << 20)
