"""Compaction throughput: many small Parquet files of one table partition into one file.

    python benchmarks/compaction_bench.py [--files 300] [--rows-per-file 4000] [--repeat 3]

One run, all in this process, on the same generated files (loader-shaped rows: payload
columns plus _topic, _partition, _offset, _timestamp, _key; zstd, one file per range):

* **pylog** -- ``pylog.etl.compact.compact_tables`` over a file:// warehouse: the lock,
  the streaming rewrite (row groups of ``row_group_mb``, sorted by (_partition, _offset)),
  hard links, the journal, the directory exchange and the clean-up.
* **pyarrow** -- pyarrow alone: read every file, concatenate the rows in memory and write
  them as one zstd file (``pq.write_table``, its default row groups), nothing else: the
  most the rewrite itself can do (pylog streams instead, so its memory stays bounded).

Prints MB/s rewritten (input Parquet bytes per second) for each, best of ``--repeat``, and
pylog's ratio to pyarrow alone (goal: at least 0.8).
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pylog.etl.compact import compact_tables  # noqa: E402
from pylog.etl.config import load_config  # noqa: E402

MB = 1024 * 1024
PARTITION = ("dt=2026-11-20", "hr=07")
BASE_MS = 1763622000000


def make_files(directory: Path, files: int, rows: int) -> int:
    """``files`` load-named Parquet files of ``rows`` rows each; returns their total bytes."""
    rng = random.Random(7)
    directory.mkdir(parents=True)
    for n in range(files):
        partition, first = n % 4, (n // 4) * rows
        offsets = pa.array(range(first, first + rows), pa.int64())
        table = pa.table({
            "user_id": pa.array([rng.randrange(10_000_000) for _ in range(rows)], pa.int64()),
            "url": [f"https://shop.example.com/p/{rng.randrange(99999)}" for _ in range(rows)],
            "duration_ms": pa.array([rng.randrange(60000) for _ in range(rows)], pa.int32()),
            "_topic": pa.array(["page_views"] * rows),
            "_partition": pa.array([partition] * rows, pa.int32()),
            "_offset": offsets,
            "_timestamp": pa.array([BASE_MS + i * 7 for i in range(first, first + rows)], pa.timestamp("ms")),
            "_key": pa.array([None] * rows, pa.binary()),
        })
        pq.write_table(table, directory / f"page_views-{partition}-{first}-{first + rows - 1}.parquet",
                       compression="zstd")
    return sum(p.stat().st_size for p in directory.iterdir())


def pyarrow_alone(source: Path, target: Path) -> None:
    rows = pa.concat_tables([pq.read_table(path) for path in sorted(source.iterdir())])
    pq.write_table(rows, target, compression="zstd")


def pylog_compaction(root: Path) -> None:
    raw = {"source": {"bootstrap_servers": "127.0.0.1:9"}, "warehouse": (root / "warehouse").as_uri(),
           "state": (root / "state").as_uri(),
           "topics": {"page_views": {"format": "raw"}}}
    (root / "loader.yaml").write_text(yaml.safe_dump(raw))
    [result] = compact_tables(load_config(root / "loader.yaml"))
    assert len(result.partitions) == 1, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--rows-per-file", type=int, default=4000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pylog-compaction-bench-") as scratch:
        pristine = Path(scratch) / "pristine"
        size = make_files(pristine, args.files, args.rows_per_file)
        best = {"pyarrow": float("inf"), "pylog": float("inf")}
        for attempt in range(args.repeat):
            run = Path(scratch) / f"run{attempt}"
            partition = run.joinpath("warehouse", "page_views", *PARTITION)
            shutil.copytree(pristine, partition)
            started = time.perf_counter()
            pyarrow_alone(partition, run / "one.parquet")
            best["pyarrow"] = min(best["pyarrow"], time.perf_counter() - started)
            started = time.perf_counter()
            pylog_compaction(run)
            best["pylog"] = min(best["pylog"], time.perf_counter() - started)
            assert pq.read_metadata(next(partition.glob("compacted-*.parquet"))).num_rows == \
                args.files * args.rows_per_file
            shutil.rmtree(run)
    print(f"compaction of {args.files} files, {args.files * args.rows_per_file} rows, "
          f"{size / MB:.1f} MB of zstd Parquet into one partition (best of {args.repeat})")
    for name, seconds in best.items():
        print(f"  {name:8s} {seconds:7.3f} s  {size / MB / seconds:8.1f} MB/s rewritten")
    print(f"  ratio pylog / pyarrow alone: {best['pyarrow'] / best['pylog']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
