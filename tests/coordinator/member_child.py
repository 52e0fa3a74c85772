"""A confluent-kafka group member in its own process, so a test can SIGKILL it.

    python -m tests.coordinator.member_child BOOTSTRAP GROUP TOPIC OUT_FILE SESSION_MS [INSTANCE_ID]

Writes ``assigned p,p,...`` on every assignment and ``record <partition> <value>`` per
record to OUT_FILE (one flushed line each), and commits after every record.
"""

import sys

import confluent_kafka


def main() -> None:
    bootstrap, group, topic, out_file, session_ms = sys.argv[1:6]
    settings = {"bootstrap.servers": bootstrap, "group.id": group,
                "auto.offset.reset": "earliest", "enable.auto.commit": False,
                "session.timeout.ms": int(session_ms), "heartbeat.interval.ms": 300,
                "log_level": 3}
    if len(sys.argv) > 6:
        settings["group.instance.id"] = sys.argv[6]
    consumer = confluent_kafka.Consumer(settings)
    with open(out_file, "a", buffering=1) as out:
        def on_assign(_consumer, partitions):
            out.write("assigned " + ",".join(str(p.partition) for p in partitions) + "\n")

        consumer.subscribe([topic], on_assign=on_assign)
        while True:
            message = consumer.poll(0.2)
            if message is None or message.error():
                continue
            out.write(f"record {message.partition()} {message.value().decode()}\n")
            consumer.commit(message, asynchronous=False)


if __name__ == "__main__":
    main()
