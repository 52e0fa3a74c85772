"""Parquet files per table partition, named by the task's range, replaced on a retry."""

from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.parquet as pq

from pylog.etl.fs import Storage
from pylog.etl.model import TaskRange
from pylog.etl.writer import in_window, write_partitioned


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
