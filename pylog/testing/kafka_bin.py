"""A ``bin/`` directory of Apache Kafka's command-line scripts over the Maven-fetched jars.

Tools written against a Kafka distribution (librdkafka's test suite with ``KAFKA_PATH``,
scripts an operator keeps) call ``$KAFKA_PATH/bin/kafka-topics.sh`` and its siblings. Kafka
publishes its jars to Maven Central but not the distribution's scripts; each of those is one
line that runs ``kafka-run-class.sh <main class> "$@"``, and so are the ones written here,
with the same main classes (Kafka 4.4's ``bin/``)::

    python -m pylog.testing.kafka_bin /tmp/kafka     # then KAFKA_PATH=/tmp/kafka
    /tmp/kafka/bin/kafka-topics.sh --bootstrap-server 127.0.0.1:9092 --list
"""

from __future__ import annotations

import sys
from pathlib import Path

from pylog.testing.apache_kafka import kafka_classpath
from pylog.testing.maven import JVM_OPTIONS, log4j2_console

# script -> main class, as in Kafka 4.4's bin/.
SCRIPTS = {
    "kafka-topics.sh": "org.apache.kafka.tools.TopicCommand",
    "kafka-acls.sh": "org.apache.kafka.tools.AclCommand",
    "kafka-configs.sh": "org.apache.kafka.tools.ConfigCommand",
    "kafka-consumer-groups.sh": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-console-producer.sh": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-consumer.sh": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-delete-records.sh": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-get-offsets.sh": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-log-dirs.sh": "org.apache.kafka.tools.LogDirsCommand",
    "kafka-reassign-partitions.sh": "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
    "kafka-transactions.sh": "org.apache.kafka.tools.TransactionsCommand",
    "kafka-leader-election.sh": "org.apache.kafka.tools.LeaderElectionCommand",
    "kafka-broker-api-versions.sh": "org.apache.kafka.tools.BrokerApiVersionsCommand",
}

RUN_CLASS = """\
#!/bin/sh
# Kafka's kafka-run-class.sh, reduced to what the tools need: the Maven-fetched jars.
exec java ${{KAFKA_HEAP_OPTS:--Xmx256m}} {jvm_options} \\
    -Dlog4j2.configurationFile="$(dirname "$0")/../config/tools-log4j2.properties" \\
    -cp "{classpath}" "$@"
"""
SCRIPT = """\
#!/bin/sh
exec "$(dirname "$0")/kafka-run-class.sh" {main_class} "$@"
"""
# Warnings and errors, on stderr, as Kafka's config/tools-log4j2.yaml.
TOOLS_LOG4J2 = log4j2_console("WARN", target="SYSTEM_ERR")


def write_kafka_bin(directory: Path) -> Path:
    """Write ``bin/`` and ``config/`` under ``directory`` (a ``KAFKA_PATH``); returns it."""
    directory = Path(directory)
    bin_dir = directory / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    (directory / "config").mkdir(exist_ok=True)
    (directory / "config" / "tools-log4j2.properties").write_text(TOOLS_LOG4J2)
    scripts = {"kafka-run-class.sh": RUN_CLASS.format(classpath=kafka_classpath(),
                                                      jvm_options=" ".join(JVM_OPTIONS))}
    scripts.update({name: SCRIPT.format(main_class=main_class)
                    for name, main_class in SCRIPTS.items()})
    for name, text in scripts.items():
        path = bin_dir / name
        path.write_text(text)
        path.chmod(0o755)
    return directory


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m pylog.testing.kafka_bin DIRECTORY", file=sys.stderr)
        sys.exit(2)
    print(write_kafka_bin(Path(sys.argv[1])))
