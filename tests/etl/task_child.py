"""Run one map task in this process under an address-space cap; print its figures as JSON.

    python -m tests.etl.task_child SPEC_PICKLE CAP_BYTES

The cap (RLIMIT_AS) makes any allocation past it fail, so a task that held its whole
range in memory would die with MemoryError instead of finishing.
"""

from __future__ import annotations

import json
import pickle
import resource
import sys


def main(spec_path: str, cap_bytes: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (cap_bytes, cap_bytes))
    from pylog.etl.task import run_task

    with open(spec_path, "rb") as f:
        spec = pickle.load(f)
    marker = run_task(spec)
    import pyarrow as pa
    print(json.dumps({"rows": marker.rows_written, "records": marker.records_fetched,
                      "bytes_fetched": marker.bytes_fetched, "files": list(marker.files),
                      "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                      "arrow_pool": pa.default_memory_pool().backend_name,
                      "arrow_peak_bytes": pa.default_memory_pool().max_memory()}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
