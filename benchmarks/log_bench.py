"""Benchmark of the partition log (pylog.log): prints figures, asserts nothing.

    python benchmarks/log_bench.py [--append-mb 256] [--big-mb 2048] [--reads 3000]

* Append throughput (MB/s, records/s) for 200-byte records in 16 KB and 1 MB batches,
  next to a plain ``write()`` of the same bytes to a file (the page-cache limit).
* Read latency (``Log.read`` to a region, then closing it) at random offsets in a ~20 MB
  log and in a ~2 GB log, after a warm-up pass, and their ratio: the segment search and the sparse index keep
  lookups O(log n), so the ratio should stay near 1.
* Recovery speed: re-validating (length + CRC-32C) and re-indexing the unflushed ~2 GB
  log, next to reading the same files and computing CRC-32C over them.

Everything lives in a temporary directory that is deleted afterwards.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from crc32c import crc32c

from pylog.log import Log, LogConfig
from pylog.records import build_batch

RECORD_VALUE = 200


def prebuilt_batch(target_bytes: int, seed: int) -> tuple[bytes, int]:
    """An uncompressed batch of 200-byte records of about ``target_bytes``; (bytes, records)."""
    rng = random.Random(seed)
    count = max(1, target_bytes // (RECORD_VALUE + 10))  # ~10 bytes of varints per record
    records = [(None, rng.randbytes(RECORD_VALUE), (), 1_700_000_000_000 + i) for i in range(count)]
    return build_batch(records), count


def bench_append(workdir: Path, batch_bytes: int, total_mb: int, rounds: int = 2) -> None:
    """Best of ``rounds`` alternating runs of each side, so page-cache warm-up and other
    load on the machine hit both alike."""
    batch, count = prebuilt_batch(batch_bytes, seed=batch_bytes)
    n = max(1, total_mb * 1024 * 1024 // len(batch))
    volume = n * len(batch) / 1e6
    plain_s = log_s = float("inf")
    for _ in range(rounds):
        plain = workdir / "plain.bin"
        start = time.perf_counter()
        with open(plain, "wb", buffering=0) as f:
            for _ in range(n):
                f.write(batch)
        plain_s = min(plain_s, time.perf_counter() - start)
        plain.unlink()

        log = Log.open(workdir / f"append-{batch_bytes}-0", LogConfig())
        start = time.perf_counter()
        for _ in range(n):
            log.append(batch)
        log_s = min(log_s, time.perf_counter() - start)
        log.delete()

    label = f"{len(batch) / 1024:.0f} KB batches ({count} records)"
    print(f"append, {label}: {volume / log_s:8.1f} MB/s {n * count / log_s:12,.0f} records/s"
          f"   plain write(): {volume / plain_s:8.1f} MB/s   log/plain = {plain_s / log_s:.2f}")


def build_log(directory: Path, size_mb: int) -> Log:
    batches = [prebuilt_batch(16 * 1024, seed=i)[0] for i in range(8)]
    log = Log.open(directory, LogConfig())
    target = size_mb * 1024 * 1024
    i = 0
    while log.size_bytes < target:
        for _ in range(256):
            log.append(batches[i % len(batches)])
            i += 1
    return log


def read_latencies(log: Log, reads: int, rng: random.Random) -> list[float]:
    end = log.log_end_offset
    offsets = [rng.randrange(0, end) for _ in range(reads)]
    out = []
    for offset in offsets:
        start = time.perf_counter()
        result = log.read(offset, 64 * 1024)
        result.region.close()
        out.append(time.perf_counter() - start)
    return out


def describe(latencies: list[float]) -> str:
    ordered = sorted(latencies)
    p99 = ordered[int(len(ordered) * 0.99)]
    return f"median {statistics.median(ordered) * 1e6:7.1f} us   p99 {p99 * 1e6:7.1f} us"


def bench_recovery(directory: Path) -> None:
    size = sum(p.stat().st_size for p in directory.glob("*.log"))
    start = time.perf_counter()
    for path in sorted(directory.glob("*.log")):
        with open(path, "rb", buffering=0) as f:
            while chunk := f.read(8 << 20):
                crc32c(chunk)
    baseline_s = time.perf_counter() - start
    start = time.perf_counter()
    log = Log.open(directory, LogConfig(), recovery_point=0, had_clean_shutdown=False)
    recover_s = time.perf_counter() - start
    assert log.bytes_truncated == 0
    log.close()
    print(f"recovery of {size / 1e6:.0f} MB from recovery point 0 (every batch validated, indexes rebuilt): "
          f"{size / 1e6 / recover_s:8.1f} MB/s   read+CRC-32C baseline: {size / 1e6 / baseline_s:8.1f} MB/s"
          f"   recovery/baseline = {baseline_s / recover_s:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--append-mb", type=int, default=256, help="bytes appended per append case")
    parser.add_argument("--small-mb", type=int, default=20, help="size of the small log")
    parser.add_argument("--big-mb", type=int, default=2048, help="size of the big log")
    parser.add_argument("--reads", type=int, default=3000, help="random reads per log")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="pylog-log-bench-"))
    try:
        for batch_bytes in (16 * 1024, 1000 * 1024):
            bench_append(workdir, batch_bytes, args.append_mb)
        rng = random.Random(1)
        small = build_log(workdir / "small-0", args.small_mb)
        start = time.perf_counter()
        big = build_log(workdir / "big-0", args.big_mb)
        build_s = time.perf_counter() - start
        print(f"built a {big.size_bytes / 1e9:.2f} GB log of {big.log_end_offset:,} records "
              f"in {len(big.segments)} segments in {build_s:.1f} s")
        for log in (small, big):  # warm up: map index pages, fill CPU caches
            read_latencies(log, args.reads, rng)
        small_lat = read_latencies(small, args.reads, rng)
        big_lat = read_latencies(big, args.reads, rng)
        print(f"read, {small.size_bytes / 1e6:6.0f} MB log: {describe(small_lat)}")
        print(f"read, {big.size_bytes / 1e6:6.0f} MB log: {describe(big_lat)}")
        print(f"read latency ratio big/small (median): "
              f"{statistics.median(big_lat) / statistics.median(small_lat):.2f}")
        small.close()
        big_dir = big.directory
        big.close()
        bench_recovery(big_dir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    os.nice(5)
    main()
