"""Child process for the crash tests: append to a log in a loop until SIGKILLed.

``python -m tests.log.crash_child LOG_DIR SEED FIRST_TAG`` loads the log dir through a
LogManager (recovering it), then appends batches forever. Batch ``tag`` (counting from
FIRST_TAG) is ``expected_batch(tag)``, so the parent can check every byte. After each
flush it prints ``flushed <log end offset> <next tag>`` on stdout.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

from pylog.log import LogConfig, LogManager
from tests.log.batches import make_batch

CONFIG = LogConfig(segment_bytes=64 * 1024, index_interval_bytes=512)


def expected_batch(tag: int) -> bytes:
    rng = random.Random(tag)
    return make_batch(rng.randint(1, 8), value_size=rng.randint(10, 400), tag=tag)


def main() -> None:
    log_dir, seed, tag = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(seed)
    manager = LogManager([log_dir], CONFIG)
    manager.load()
    log = manager.get_or_create("crash-test", 0)
    print(f"ready {log.log_end_offset}", flush=True)
    while True:
        group = [expected_batch(t) for t in range(tag, tag + rng.randint(1, 4))]
        log.append(b"".join(group))
        tag += len(group)
        if rng.random() < 0.3:
            log.flush()
            print(f"flushed {log.log_end_offset} {tag}", flush=True)


if __name__ == "__main__":
    main()
