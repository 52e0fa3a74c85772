"""Offset translation: a consumer group that read half a topic on the source fails over to
the mirror's target with ``pylog mirror translate-offsets --apply`` and reads the other
half there, each record once. The source is secured (SASL_SSL, SCRAM, ACLs): the mirror
gets its settings from ``--source-command-config``, and never prints the password."""

from __future__ import annotations

import subprocess
import sys
import time

import confluent_kafka as ck
import pytest

from pylog.testing.secured import SecuredBroker
from tests.mirror.conftest import ALIAS, create_topic, mirror_args
from tests.mirror.helpers import MirrorProcess, produce, wait_for_commit

PASSWORD = "s3cret-Mirror-pw"


@pytest.fixture(scope="module")
def secured_source(tmp_path_factory):
    with SecuredBroker(tmp_path_factory.mktemp("secured"), {"admin": PASSWORD},
                       overrides={"group.min.session.timeout.ms": 1000,
                                  "transaction.state.log.num.partitions": 1,
                                  "transaction.state.log.replication.factor": 1,
                                  "transaction.state.log.min.isr": 1}) as broker:
        yield broker

APP_GROUP = "clicks-app"


def consume(bootstrap: str, group: str, topic: str, count: int, to_the_end: bool = False,
            timeout: float = 60.0) -> list[bytes]:
    """``count`` records' values read by ``group`` (committed afterwards), read_committed;
    ``to_the_end``: and whatever else comes within two seconds."""
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                            "enable.auto.commit": False, "auto.offset.reset": "earliest",
                            "isolation.level": "read_committed", "session.timeout.ms": 6000})
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(values) < count and time.monotonic() < deadline:
            for message in consumer.consume(count - len(values), 0.5):
                if message.error() is None:
                    values.append(message.value())
        if values:
            consumer.commit(asynchronous=False)
        if to_the_end:
            values += [m.value() for m in consumer.consume(100, 2.0) if m.error() is None]
    finally:
        consumer.close()
    return values


def consume_half(bootstrap: str, group: str, topic: str, partitions: int, total: int,
                 security: dict) -> list[bytes]:
    """The first half of each partition, as read by ``group``, whose offsets are then
    committed right after it (mid-transaction on the source, past some control records)."""
    consumer = ck.Consumer({**security, "bootstrap.servers": bootstrap, "group.id": group,
                            "enable.auto.commit": False, "auto.offset.reset": "earliest",
                            "isolation.level": "read_committed"})
    consumer.subscribe([topic])
    by_partition: dict[int, list] = {}
    deadline = time.monotonic() + 60
    try:
        while sum(map(len, by_partition.values())) < total and time.monotonic() < deadline:
            for message in consumer.consume(total, 0.5):
                if message.error() is None:
                    by_partition.setdefault(message.partition(), []).append(message)
        assert len(by_partition) == partitions
        half = {p: messages[:len(messages) // 2] for p, messages in by_partition.items()}
        consumer.commit(offsets=[ck.TopicPartition(topic, p, messages[-1].offset() + 1)
                                 for p, messages in half.items()], asynchronous=False)
    finally:
        consumer.close()
    return [m.value() for messages in half.values() for m in messages]


def translate(args: list[str], *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pylog.cli.main", "mirror", "translate-offsets",
                           *args, "--group", APP_GROUP, *extra],
                          capture_output=True, text=True, timeout=120)


def test_a_group_fails_over_at_translated_offsets(secured_source, target, tmp_path):
    source = secured_source.bootstrap
    security = secured_source.client_settings("admin")
    create_topic(source, "clicks", 2, security=security)
    properties = tmp_path / "source.properties"
    properties.write_text("".join(f"{k}={v}\n" for k, v in security.items()))
    args = mirror_args(tmp_path, source, target.bootstrap, "clicks") + [
        "--source-command-config", str(properties)]
    mirror = MirrorProcess(tmp_path, args).start()
    translate_args = [a for a in args if a not in ("--topics", "clicks")]
    # Batches the mirror copies in separate transactions: their markers make target
    # offsets differ from source offsets.
    sent = []
    for batch in range(5):
        sent += produce(source, "clicks", len(sent), 40, 2, security=security)
        wait_for_commit(mirror, target.bootstrap, f"{ALIAS}.clicks", 2, len(sent) - 1)
    first_half = consume_half(source, APP_GROUP, "clicks", 2, len(sent), security)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert mirror.alive(), mirror.logs()[-3000:]
            shown = translate(translate_args)
            rows = [line.split() for line in shown.stdout.splitlines()[1:]]
            if shown.returncode == 0 and len(rows) == 2:
                break
            assert time.monotonic() < deadline, shown.stderr + mirror.logs()[-3000:]
            time.sleep(0.5)
        assert {row[0] for row in rows} == {f"{ALIAS}.clicks"}
        applied = translate(translate_args, "--apply")
        assert applied.returncode == 0, applied.stderr
        assert f"committed 2 offsets for group {APP_GROUP}" in applied.stdout
    finally:
        mirror.stop()
    assert PASSWORD not in mirror.logs()
    second_half = consume(target.bootstrap, APP_GROUP, f"{ALIAS}.clicks", 100, to_the_end=True)
    assert len(second_half) == 100, "the group read records twice or missed some on the target"
    assert sorted(first_half + second_half) == sorted(r.value for r in sent)


def test_translate_offsets_of_an_unknown_group_is_one_line(target, tmp_path):
    shown = subprocess.run(
        [sys.executable, "-m", "pylog.cli.main", "mirror", "translate-offsets",
         "--target-bootstrap-server", target.bootstrap, "--source-alias", "nowhere",
         "--group", "nobody"],
        capture_output=True, text=True, timeout=120)
    assert shown.returncode == 1
    assert len(shown.stderr.strip().splitlines()) == 1, shown.stderr
    assert shown.stderr.startswith("pylog mirror: error:")
