"""A high-level consumer in its own process, so a test can kill it with SIGKILL.

    python -m tests.cluster.consumer_child ZK_CONNECT GROUP TOPIC OUT_FILE

Writes ``partition offset value`` per processed record to OUT_FILE (flushed each line),
then goes on to the next record, which is when the record counts as processed.
"""

import sys
import time

from pylog.client.zk_consumer import ZkConsumer


def main() -> None:
    zk_connect, group, topic, out_file = sys.argv[1:5]
    consumer = ZkConsumer(zk_connect, group, topics=[topic], auto_commit_interval_ms=100,
                          session_timeout_ms=2000, consumer_id=f"{group}_child")
    with open(out_file, "a", buffering=1) as out:
        for record in consumer:
            out.write(f"{record.partition} {record.offset} {record.value.decode()}\n")
            time.sleep(0.01)


if __name__ == "__main__":
    main()
