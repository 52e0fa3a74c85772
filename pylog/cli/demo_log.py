"""The partition log at work, as part of ``pylog demo --log-only``: write, read back,
crash, recover.

Writes records through a LogManager into a log dir, reads them back and decodes them,
looks an offset up by timestamp, then has a child process append in a loop until it is
killed with SIGKILL, leaves half a batch at the tail as a crash in the middle of a write
would, and reloads the dir: recovery cuts the torn tail and every flushed record is still there.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from pylog.log import LogConfig, LogManager
from pylog.records import build_batch, decode_batch, iter_batch_headers
from pylog.records.compression import Compression

TOPIC = "demo-events"
CONFIG = LogConfig(segment_bytes=16 * 1024, index_interval_bytes=1024)
BASE_TS = 1_700_000_000_000


def _records(start: int, count: int) -> list[tuple]:
    return [(f"user-{i % 7}".encode(), f'{{"event": {i}, "amount": {i * 3 % 101}}}'.encode(), (),
             BASE_TS + i * 1000) for i in range(start, start + count)]


def _read_everything(log) -> list:
    records, offset = [], log.log_start_offset
    while (result := log.read(offset, 256 * 1024)).region is not None:
        with result.region as region:
            raw = region.read_bytes()
        for position, header in iter_batch_headers(raw):
            records += [r for r in decode_batch(raw, position).records if r.offset >= offset]
            offset = header.next_offset
    return records


def log_demo(log_dir: Path) -> int:
    """Run the walk-through in ``log_dir``; 0 when every check held."""
    print(f"log dir: {log_dir}")
    manager = LogManager([log_dir], CONFIG)
    manager.load()
    log = manager.get_or_create(TOPIC, 0)
    first = log.log_end_offset
    codecs = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
    for n in range(40):
        log.append(build_batch(_records(first + n * 50, 50), compression=codecs[n % len(codecs)]))
    print(f"1. appended 2000 records in 40 batches (none/gzip/snappy/lz4/zstd) -> offsets "
          f"{first}..{log.log_end_offset - 1} in {len(log.segments)} segments, {log.size_bytes:,} bytes")

    records = _read_everything(log)
    expected = _records(log.log_start_offset, log.log_end_offset - log.log_start_offset)
    ok = [(r.key, r.value, r.timestamp) for r in records] == [(k, v, ts) for k, v, _, ts in expected]
    print(f"2. read back {len(records)} records through the sparse indexes: "
          f"{'identical to what was written' if ok else 'MISMATCH'}; e.g. offset "
          f"{records[1234].offset}: {records[1234].value.decode()}")
    found = log.offset_for_timestamp(BASE_TS + 1500 * 1000 + 1)
    print(f"3. first record at or after timestamp +1500.001 s: offset {found[0]} (timestamp +{(found[1] - BASE_TS) / 1000:.0f} s)")
    manager.close()

    flushed = _crash_child(log_dir)
    print(f"4. a child process appended in a loop and was killed with SIGKILL "
          f"(it had reported everything below offset {flushed} flushed)")
    torn = _leave_torn_batch(log_dir / f"{TOPIC}-0")
    print(f"   and {torn} bytes of a half-written batch were left at the tail, as a crash mid-write would")

    manager = LogManager([log_dir], CONFIG)
    manager.load()
    log = manager.get(TOPIC, 0)
    records = _read_everything(log)
    contiguous = [r.offset for r in records] == list(range(log.log_start_offset, log.log_end_offset))
    ok = ok and contiguous and log.log_end_offset >= flushed and log.bytes_truncated == torn
    print(f"5. reloaded without a clean-shutdown marker: recovery truncated {log.bytes_truncated} bytes; "
          f"log end offset {log.log_end_offset}; {len(records)} records, offsets "
          f"{'contiguous' if contiguous else 'NOT contiguous'}, every flushed record present: "
          f"{log.log_end_offset >= flushed}")
    manager.close()
    print("demo OK" if ok else "demo FAILED")
    return 0 if ok else 1


def _crash_child(log_dir: Path) -> int:
    child = subprocess.Popen([sys.executable, "-m", "pylog.cli.main", "demo", "--child-append-loop",
                              str(log_dir)], stdout=subprocess.PIPE, text=True)
    flushed = 0
    try:
        for _ in range(20):
            line = child.stdout.readline()
            if not line:
                break
            flushed = int(line.split()[1])
        child.send_signal(signal.SIGKILL)
        for line in child.stdout:
            flushed = int(line.split()[1])
    finally:
        child.kill()
        child.wait()
    return flushed


def child_append_loop(log_dir: Path) -> int:
    """The child the walk-through kills: append and flush until SIGKILL."""
    manager = LogManager([log_dir], CONFIG)
    manager.load()
    log = manager.get_or_create(TOPIC, 0)
    while True:
        start = log.log_end_offset
        log.append(build_batch(_records(start, 25)))
        if start % 100 == 0:
            log.flush()
            print(f"flushed {log.log_end_offset}", flush=True)


def _leave_torn_batch(partition_dir: Path) -> int:
    newest = max(partition_dir.glob("*.log"))
    batch = build_batch(_records(0, 25))
    with open(newest, "ab") as f:
        f.write(batch[:len(batch) // 2])
    return len(batch) // 2
