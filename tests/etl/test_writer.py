"""Parquet files per table partition, named by the task's range, replaced on a retry."""

import random
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.parquet as pq

from pylog.etl.fs import Storage
from pylog.etl.model import TaskRange
from pylog.etl.layout import range_of_file
from pylog.etl.writer import PartitionedWriter, in_window, remove_range_files, write_partitioned


def ms(hour: int, minute: int = 0) -> int:
    return int(datetime(2026, 11, 20, hour, minute, tzinfo=timezone.utc).timestamp() * 1000)


def test_rows_split_by_hour_under_deterministic_names(tmp_path):
    storage = Storage.from_uri(tmp_path.as_uri())
    rows = pa.table({"n": [1, 2, 3, 4], "_offset": [10, 11, 12, 13]})
    event_ms = pa.array([ms(7, 59), ms(8), ms(7, 1), ms(23, 30)], pa.int64())
    task_range = TaskRange("ev", 2, 10, 20)
    files = write_partitioned(storage, storage.join("tbl"), rows, event_ms, ("dt", "hr"), task_range)
    found = {p.relative_to(tmp_path).as_posix(): pq.read_table(p).column("n").to_pylist()
             for p in tmp_path.rglob("*.parquet")}
    assert found == {"tbl/dt=2026-11-20/hr=07/ev-2-10-19.parquet": [1, 3],
                     "tbl/dt=2026-11-20/hr=08/ev-2-10-19.parquet": [2],
                     "tbl/dt=2026-11-20/hr=23/ev-2-10-19.parquet": [4]}
    assert sum(f.rows for f in files) == 4
    assert pq.ParquetFile(tmp_path / "tbl/dt=2026-11-20/hr=07/ev-2-10-19.parquet").metadata \
        .row_group(0).column(0).compression == "ZSTD"

    write_partitioned(storage, storage.join("tbl"), rows, event_ms, ("dt", "hr"), task_range)  # a retry
    assert len(list(tmp_path.rglob("*.parquet"))) == 3 and not list(tmp_path.rglob("*.tmp"))
    write_partitioned(storage, storage.join("daily"), rows, event_ms, ("dt",), task_range)
    assert [p.relative_to(tmp_path).as_posix() for p in (tmp_path / "daily").rglob("*.parquet")] == [
        "daily/dt=2026-11-20/ev-2-10-19.parquet"]


def test_in_window():
    mask = in_window(pa.array([ms(7, 59), ms(8), ms(8, 59), ms(9)], pa.int64()), (ms(8), ms(9)))
    assert mask.to_pylist() == [False, True, True, False]


def test_rows_stream_into_row_groups_and_roll_into_numbered_files(tmp_path):
    storage = Storage.from_uri(tmp_path.as_uri())
    task_range = TaskRange("ev", 0, 0, 30_000)
    schema = pa.schema([("n", pa.int64()), ("text", pa.string())])
    writer = PartitionedWriter(storage, storage.join("tbl"), schema, ("dt", "hr"), task_range,
                               target_file_bytes=150_000, row_group_bytes=50_000)
    for start in range(0, 30_000, 1000):  # one "fetch" at a time; hours 7 and 8 interleave
        n = pa.array(range(start, start + 1000), pa.int64())
        rows = pa.table({"n": n, "text": pa.array([random.randbytes(32).hex() for _ in range(1000)])})
        writer.add(rows, pa.array([ms(7 + i % 2) for i in range(start, start + 1000)], pa.int64()))
        assert writer._buffered_bytes <= writer.max_buffered_bytes
    files = writer.close()
    hour7 = sorted(p.name for p in (tmp_path / "tbl/dt=2026-11-20/hr=07").iterdir())
    assert hour7[0] == "ev-0-0-29999.1.parquet" and "ev-0-0-29999.parquet" in hour7 and len(hour7) >= 3
    assert {range_of_file(name) for name in hour7} == {"ev-0-0-29999"}
    numbers = []
    for f in files:
        parquet = pq.ParquetFile(f.path)
        assert parquet.metadata.num_rows == f.rows and f.bytes == (tmp_path / f.path).stat().st_size
        assert parquet.metadata.num_row_groups >= 1
        numbers += parquet.read(columns=["n"]).column("n").to_pylist()
    assert sorted(numbers) == list(range(30_000))
    assert max(f.bytes for f in files) < 150_000 + 75_000
    assert sum(pq.ParquetFile(f.path).metadata.num_row_groups for f in files) > len(files)
    assert not list(tmp_path.rglob(".*.tmp"))


def test_open_files_are_bounded_and_a_failed_attempt_leaves_no_temporaries(tmp_path):
    storage = Storage.from_uri(tmp_path.as_uri())
    task_range = TaskRange("ev", 1, 0, 100)
    writer = PartitionedWriter(storage, storage.join("tbl"), pa.schema([("n", pa.int64())]), ("dt", "hr"),
                               task_range, row_group_bytes=1, max_open_files=2)
    hours = [ms(h) for h in range(10)]
    writer.add(pa.table({"n": pa.array(range(10), pa.int64())}), pa.array(hours, pa.int64()))
    assert len(writer._open) == 2  # the others were finished early
    writer.abort()
    assert not list(tmp_path.rglob(".*.tmp"))
    finished = sorted(tmp_path.rglob("*.parquet"))
    assert len(finished) == 8
    assert remove_range_files(storage, storage.join("tbl"), task_range) == 8
    assert not list(tmp_path.rglob("*.parquet"))


def test_range_of_file():
    assert range_of_file("ev-2-10-19.parquet") == "ev-2-10-19"
    assert range_of_file("ev-2-10-19.3.parquet") == "ev-2-10-19"
    assert range_of_file("my.topic-0-5-9.12.parquet") == "my.topic-0-5-9"
    assert range_of_file(".ev-2-10-19.parquet.abc.tmp") is None
    assert range_of_file("part-0001.snappy.parquet") is None
