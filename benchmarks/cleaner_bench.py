"""Log cleaner throughput: one compaction pass over a generated log, next to reading it.

    python benchmarks/cleaner_bench.py [--mb 128] [--live 0.1] [--value-bytes 100]
                                       [--batch 100] [--segment-mb 32] [--compression none]

Generates a compacted log of about ``--mb`` MB: batches of ``--batch`` keyed records whose
keys are drawn from ``live x records`` distinct keys, so about 10% of the records are the
newest of their key. The log is rolled, so all of it is cleanable. Then, on the same files
(warm in the page cache after writing them):

* **read** -- every segment file read front to back (4 MB ``pread`` calls), nothing else;
* **read+crc** -- the same, walking the batch headers and checking each batch's CRC-32C;
* **cleaner** -- one :class:`pylog.log.cleaner.Cleaner` pass: the offset map over the
  whole log, the rewrite of every segment, fsyncs and the swap-in.

Prints MB/s (log bytes before cleaning per second) for each, the cleaner's ratio to the
plain read, and the size after cleaning. ``--mb 1024`` gives the issue's 1 GB figure.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pylog.log import Log, LogConfig  # noqa: E402
from pylog.log.cleaner import Cleaner  # noqa: E402
from pylog.records.batch import build_batch  # noqa: E402
from pylog.records.compression import Compression  # noqa: E402
from pylog.records.header import iter_batch_headers  # noqa: E402

MB = 1024 * 1024
BASE_MS = 1_763_622_000_000


def generate(directory: Path, args: argparse.Namespace) -> Log:
    config = LogConfig(segment_bytes=args.segment_mb * MB, cleanup_policy="compact",
                       retention_ms=None, max_batch_size=64 * MB)
    log = Log.open(directory, config)
    rng = random.Random(7)
    value = b"v" * args.value_bytes
    record_bytes = args.value_bytes + 30
    records = args.mb * MB // record_bytes
    keys = max(1, int(records * args.live))
    compression = Compression[args.compression.upper()]
    written = 0
    while log.size_bytes < args.mb * MB:
        batch = [(b"user-%09d" % rng.randrange(keys), value, (), BASE_MS + written)
                 for _ in range(args.batch)]
        log.append(build_batch(batch, compression=compression))
        written += args.batch
    log.roll()
    log.flush()
    return log


def read_files(log: Log, check_crc: bool) -> float:
    started = time.perf_counter()
    for segment in log.segments[:-1]:
        fd = os.open(segment.records.path, os.O_RDONLY)
        try:
            position, pending = 0, b""
            while True:
                chunk = os.pread(fd, 4 * MB, position)
                if not chunk:
                    break
                position += len(chunk)
                if check_crc:
                    data = pending + chunk
                    used = 0
                    try:
                        for pos, header in iter_batch_headers(data):
                            used = pos + header.size
                    except Exception:  # a batch continues in the next chunk
                        pass
                    pending = data[used:]
        finally:
            os.close(fd)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=128, help="log size to generate (MB)")
    parser.add_argument("--live", type=float, default=0.1, help="distinct keys / records")
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--batch", type=int, default=100, help="records per batch")
    parser.add_argument("--segment-mb", type=int, default=32)
    parser.add_argument("--compression", default="none", help="none, gzip, snappy, lz4, zstd")
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="cleaner-bench-", dir=args.dir))
    try:
        started = time.perf_counter()
        log = generate(root / "bench-0", args)
        size = sum(s.size for s in log.segments[:-1])
        print(f"generated {size / MB:.0f} MB in {len(log.segments) - 1} segments "
              f"({time.perf_counter() - started:.1f} s)")
        read_s = read_files(log, check_crc=False)
        crc_s = read_files(log, check_crc=True)
        started = time.perf_counter()
        result = Cleaner(dedupe_buffer_bytes=1 << 30).clean(log, 0, BASE_MS + 10**9)
        clean_s = time.perf_counter() - started
        after = sum(s.size for s in log.segments[:-1])
        print(f"read      {size / MB / read_s:9.1f} MB/s")
        print(f"read+crc  {size / MB / crc_s:9.1f} MB/s")
        print(f"cleaner   {size / MB / clean_s:9.1f} MB/s  ({clean_s:.1f} s, {result.map_entries} keys, "
              f"{size / MB:.0f} MB -> {after / MB:.1f} MB, {result.segments_before} segments -> "
              f"{result.segments_after})")
        print(f"cleaner / read = {read_s / clean_s:.3f}")
        log.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
