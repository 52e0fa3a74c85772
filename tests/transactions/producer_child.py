"""A confluent-kafka transactional producer in its own process, so a test can SIGKILL it
in the middle of a transaction.

    python -m tests.transactions.producer_child BOOTSTRAP TRANSACTIONAL_ID TOPIC TIMEOUT_MS

Begins a transaction, writes three records to partition 0, flushes them, prints
``ready`` and waits to be killed.
"""

import sys
import time

import confluent_kafka


def main() -> None:
    bootstrap, transactional_id, topic, timeout_ms = sys.argv[1:5]
    producer = confluent_kafka.Producer({
        "bootstrap.servers": bootstrap, "transactional.id": transactional_id,
        "transaction.timeout.ms": int(timeout_ms), "message.timeout.ms": int(timeout_ms),
        "log_level": 2})
    producer.init_transactions(60)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, value=f"killed-{i}".encode(), partition=0)
    producer.flush(30)
    print("ready", flush=True)
    time.sleep(3600)


if __name__ == "__main__":
    main()
