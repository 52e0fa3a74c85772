"""Compaction of loaded partitions: every row stays exactly once, the audit still adds up,
a SIGKILL anywhere is finished by the next ``pylog compact``, and compactions and loads
take turns on the table lock.

Real broker subprocess, real loads through the loader on the shared SparkSession, the
real ``pylog compact`` command in a session of its own for the SIGKILLs.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pylog.errors import ConfigError
from pylog.etl.compact import compact_tables
from pylog.etl.config import load_config, parse_config
from pylog.etl.errors import TableLockedError
from pylog.etl.job import LoadRequest, run_load
from pylog.etl.state import StateStore
from pylog.orchestration.audit import audit_run, enforce
from pylog.testing.broker import broker_fixture
from pylog.testing.spark import spark_env
from tests.etl.helpers import assert_exactly_once, broker_records, events, produce, write_config

broker = broker_fixture(scope="module", overrides={"num.partitions": 2})

MINUTE, HOUR = 60_000, 3_600_000
T07 = int(datetime(2026, 11, 20, 7, tzinfo=timezone.utc).timestamp() * 1000)
T08 = T07 + HOUR
PRODUCED: set[str] = set()


def hours(in_07: int, in_08: int) -> list[int]:
    """Log timestamps: ``in_07`` records at 07:10, then ``in_08`` at 08:10."""
    return [T07 + 10 * MINUTE] * in_07 + [T08 + 10 * MINUTE] * in_08


def pylog_compact(config_path, *args: str, fault: str = "", **env: str) -> subprocess.CompletedProcess:
    environment = spark_env()
    environment.update(PYLOG_FAULT=fault, **env)
    command = [sys.executable, "-m", "pylog.cli.main", "compact", "--config", str(config_path), *args]
    return subprocess.run(command, env=environment, capture_output=True, text=True, timeout=120,
                          start_new_session=True)


def partition_files(warehouse: Path, table: str) -> dict[str, list[str]]:
    """``{"dt=../hr=..": [file names]}`` of a table."""
    root = warehouse / table
    return {str(d.relative_to(root)): sorted(f.name for f in d.glob("*.parquet"))
            for d in sorted(root.glob("dt=*/hr=*"))}


def assert_finished(tmp_path: Path, table: str) -> None:
    """No journal, staging or trash of a compaction is left behind."""
    assert not list((tmp_path / "state" / "compactions" / table).glob("*.json"))
    for area in ("_staging", "_trash"):
        assert not list((tmp_path / "warehouse" / area).glob("compact-*"))


def loaded_in_small_files(spark, broker, tmp_path: Path, topic: str, **overrides):
    """One load of 80 records in hours 07 and 08 in ranges of 5 (many small files per hour),
    then an empty load (so the latest run has no files); returns config and broker records."""
    config = write_config(tmp_path, broker.bootstrap, topic=topic, max_records_per_task=5, **overrides)
    if topic not in PRODUCED:  # the parametrized cases share the topic
        PRODUCED.add(topic)
        produce(broker.bootstrap, topic, events(0, 80), 2, hours(40, 40))
    run_load(config, spark, LoadRequest(run_id="s1"))
    run_load(config, spark, LoadRequest(run_id="s2"))
    return config, broker_records(broker.bootstrap, topic)


def test_compaction_keeps_rows_exactly_once_and_the_audit_adds_up(spark, broker, tmp_path):
    topic = "many"
    config = write_config(tmp_path, broker.bootstrap, topic=topic, max_records_per_task=4)
    warehouse = tmp_path / "warehouse"
    for run in range(3):  # three loads, each a file per range and hour
        produce(broker.bootstrap, topic, events(40 * run, 40), 2, hours(20, 20))
        run_load(config, spark, LoadRequest(run_id=f"s{run}"))
    held = broker_records(broker.bootstrap, topic)
    before = partition_files(warehouse, topic)
    assert min(len(names) for names in before.values()) >= 10

    result = pylog_compact(config.path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"{topic} dt=2026-11-20/hr=07: " in result.stdout and "2 partitions compacted" in result.stdout
    latest = {f"{r.name}.parquet" for r in StateStore(config.state).latest_audit(topic).ranges}
    for partition, names in partition_files(warehouse, topic).items():
        compacted = [n for n in names if n.startswith("compacted-")]
        assert len(compacted) == 1 and set(names) - set(compacted) <= latest, (partition, names)
    assert_exactly_once(spark, warehouse, topic, held)
    enforce(audit_run(config, "s2"))  # the latest run's files still hold what it wrote
    assert_finished(tmp_path, topic)

    produce(broker.bootstrap, topic, events(120, 40), 2, [T08 + 20 * MINUTE] * 40)
    run_load(config, spark, LoadRequest(run_id="s3"))
    assert pylog_compact(config.path, "--table", topic).returncode == 0  # compacted + s2's files
    held = broker_records(broker.bootstrap, topic)
    assert_exactly_once(spark, warehouse, topic, held)
    enforce(audit_run(config, "s3"))
    hour_08 = partition_files(warehouse, topic)["dt=2026-11-20/hr=08"]
    assert len([n for n in hour_08 if n.startswith("compacted-")]) == 1
    [again] = compact_tables(config)
    assert not again.partitions and not again.notes


@pytest.mark.parametrize("fault, exchange", [("compact_before_journal", True), ("compact_mid_swap", True),
                                             ("compact_mid_swap", False)])
def test_sigkill_during_compaction_then_rerun(spark, broker, tmp_path, monkeypatch, fault, exchange):
    topic = "killed"
    config, held = loaded_in_small_files(spark, broker, tmp_path, topic)
    warehouse = tmp_path / "warehouse"
    env = {} if exchange else {"PYLOG_NO_EXCHANGE": "1"}

    killed = pylog_compact(config.path, fault=fault, **env)
    assert killed.returncode == -9, killed.stderr[-3000:]
    journals = list((tmp_path / "state" / "compactions" / topic).glob("*.json"))
    assert len(journals) == (0 if fault == "compact_before_journal" else 1)
    assert list((warehouse / "_staging").glob("compact-*"))
    if exchange:  # a reader in the middle of the exchange sees each row once
        assert_exactly_once(spark, warehouse, topic, held)
    else:  # two renames: cut between them, the first partition's directory is missing
        assert len(partition_files(warehouse, topic)) == 1
    with pytest.raises(TableLockedError, match="locked by compaction run 'compaction'"):
        run_load(config, spark, LoadRequest(run_id="s3"))  # the dead compaction's lock is fresh

    for name, value in env.items():  # the rerun in this process takes the same path
        monkeypatch.setenv(name, value)
    [rerun] = compact_tables(config)  # takes the dead holder's lock over and finishes
    assert len(rerun.partitions) == 2
    assert_exactly_once(spark, warehouse, topic, held)
    assert all(len(names) == 1 for names in partition_files(warehouse, topic).values())
    assert_finished(tmp_path, topic)
    run_load(config, spark, LoadRequest(run_id="s3"))
    enforce(audit_run(config, "s3"))


@pytest.mark.parametrize("exchange", [True, False])
def test_a_load_between_the_kill_and_the_rerun(spark, broker, tmp_path, monkeypatch, exchange):
    """The killed compaction's lock goes stale, a load publishes into both hours, then the
    rerun finishes the journal: a swapped hour keeps the load's files, an hour cut between
    two renames gets the staged files next to them, an unswapped hour that changed keeps
    its files (and is compacted afresh)."""
    topic = "between"
    config, _ = loaded_in_small_files(spark, broker, tmp_path, topic)
    env = {} if exchange else {"PYLOG_NO_EXCHANGE": "1"}
    assert pylog_compact(config.path, fault="compact_mid_swap", **env).returncode == -9
    Path(config.path).write_text(Path(config.path).read_text().replace("lock_timeout_seconds: 600",
                                                                       "lock_timeout_seconds: 1"))
    produce(broker.bootstrap, topic, events(80, 20), 2, [T07 + 40 * MINUTE] * 10 + [T08 + 40 * MINUTE] * 10)
    time.sleep(1.5)  # the dead compaction's lock goes stale
    config = load_config(config.path)
    run_load(config, spark, LoadRequest(run_id="s3"))

    for name, value in env.items():  # the rerun in this process takes the same path
        monkeypatch.setenv(name, value)
    [rerun] = compact_tables(config)
    assert [note.split(":")[0] for note in rerun.notes] == [f"{topic} dt=2026-11-20/hr=08"]
    assert "changed since compaction" in rerun.notes[0]
    assert_exactly_once(spark, tmp_path / "warehouse", topic, broker_records(broker.bootstrap, topic))
    assert_finished(tmp_path, topic)
    enforce(audit_run(config, "s3"))


def test_a_load_and_a_compaction_take_turns_on_the_lock(spark, broker, tmp_path):
    topic = "turns"
    config, _ = loaded_in_small_files(spark, broker, tmp_path, topic)
    state = StateStore(config.state)
    produce(broker.bootstrap, topic, events(80, 40), 2, [T08 + 30 * MINUTE] * 40)
    errors: list[BaseException] = []

    def scheduled_load():
        try:
            run_load(config, spark, LoadRequest(run_id="s3"))
        except BaseException as exc:  # noqa: BLE001 -- reported by the assertion below
            errors.append(exc)

    loader = threading.Thread(target=scheduled_load)
    loader.start()
    deadline = time.monotonic() + 60
    while (state.read_lock(topic) is None or state.read_lock(topic).run_id != "s3") and loader.is_alive():
        assert time.monotonic() < deadline
        time.sleep(0.005)
    assert loader.is_alive(), "the load finished before the compaction could contend with it"
    [result] = compact_tables(config)  # waits for the load, then compacts
    loader.join()
    assert not errors, errors
    assert result.lock_wait_seconds > 0 and len(result.partitions) == 2
    assert state.is_committed(topic, "s3")
    s3_files = {f"{r.name}.parquet" for r in state.latest_audit(topic).ranges}
    files = partition_files(tmp_path / "warehouse", topic)
    assert s3_files & set(files["dt=2026-11-20/hr=08"])  # compacted after the load committed
    assert_exactly_once(spark, tmp_path / "warehouse", topic, broker_records(broker.bootstrap, topic))
    enforce(audit_run(config, "s3"))

    # A load holding the lock longer than compaction.lock_wait_seconds: one readable line.
    held = state.acquire_lock(topic, "s4", "scheduled", 600)
    short = write_config(tmp_path, broker.bootstrap, topic=topic, max_records_per_task=5)
    text = Path(short.path).read_text() + "compaction: {lock_wait_seconds: 1}\n"
    Path(short.path).write_text(text)
    refused = pylog_compact(short.path)
    state.release_lock(topic, held)
    assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1
    assert refused.stderr.startswith(f"pylog compact: error: table {topic} is locked by scheduled run 's4'")
    assert "compaction waited 1s" in refused.stderr


def test_compacted_files_roll_at_the_target_size(spark, broker, tmp_path):
    topic = "rolling"
    config = write_config(tmp_path, broker.bootstrap, topic=topic, max_records_per_task=500,
                          target_file_mb=0.01, row_group_mb=0.01)  # ~10 KB files, ~3 KB row groups
    produce(broker.bootstrap, topic, events(0, 4000), 2, hours(2000, 2000))
    run_load(config, spark, LoadRequest(run_id="s1"))
    run_load(config, spark, LoadRequest(run_id="s2"))
    target = 0.01 * 1024 * 1024

    [result] = compact_tables(config)
    assert len(result.partitions) == 2 and max(len(entry.new) for entry in result.partitions) >= 2
    for entry in result.partitions:
        paths = [tmp_path / "warehouse" / topic / Path(*entry.parts) / name for name in entry.new]
        assert all(p.stat().st_size >= target for p in paths[:-1])  # a new file once one is full
        assert all(size >= 0.75 * target for _, size in entry.carried)  # near the target: kept
        for path in paths:  # rows in (_partition, _offset) order
            keys = pq.read_table(path, columns=["_partition", "_offset"]).to_pylist()
            assert keys == sorted(keys, key=lambda k: (k["_partition"], k["_offset"]))
    assert_exactly_once(spark, tmp_path / "warehouse", topic, broker_records(broker.bootstrap, topic))


def test_older_than_leaves_recent_partitions_alone(spark, broker, tmp_path):
    topic = "recent"
    now = int(time.time() * 1000)
    config = write_config(tmp_path, broker.bootstrap, topic=topic, max_records_per_task=5)
    produce(broker.bootstrap, topic, events(0, 40), 2, [T07 + 10 * MINUTE] * 20 + [now] * 20)
    run_load(config, spark, LoadRequest(run_id="s1"))
    run_load(config, spark, LoadRequest(run_id="s2"))
    before = partition_files(tmp_path / "warehouse", topic)
    current = datetime.fromtimestamp(now / 1000, tz=timezone.utc).strftime("dt=%Y-%m-%d/hr=%H")

    result = pylog_compact(config.path, "--older-than", "2h")
    assert result.returncode == 0, result.stderr[-3000:]
    after = partition_files(tmp_path / "warehouse", topic)
    assert after[current] == before[current] and len(before[current]) > 1
    assert len(after["dt=2026-11-20/hr=07"]) == 1
    assert_exactly_once(spark, tmp_path / "warehouse", topic, broker_records(broker.bootstrap, topic))


def test_cli_mistakes_are_one_line(tmp_path):
    config = write_config(tmp_path, "127.0.0.1:9", topic="ev")
    for args, message in (
            (["--older-than", "2x"], "--older-than: '2x' is not a duration such as 90s, 30m, 2h or 1d"),
            (["--table", "nope"], "--table: no table 'nope' in the configuration (tables: ev)")):
        result = pylog_compact(config.path, *args)
        assert result.returncode == 1 and result.stderr.strip() == f"pylog compact: error: {message}"
    raw = {"source": {"bootstrap_servers": "h:1"}, "warehouse": "file:///w", "state": "file:///s",
           "topics": {"ev": {"format": "raw"}}}
    for section, key in (({"older_than": "soon"}, "compaction.older_than"),
                         ({"after_load": "yes"}, "compaction.after_load"),
                         ({"every": "2h"}, "compaction.every")):
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            parse_config({**raw, "compaction": section})
    parsed = parse_config({**raw, "compaction": {"after_load": False, "older_than": "90m"}}).compaction
    assert not parsed.after_load and parsed.older_than_seconds == 5400


def test_the_dag_task_follows_the_compaction_section(tmp_path):
    from pylog.orchestration import loads

    config = write_config(tmp_path, "127.0.0.1:9", topic="ev")
    text = Path(config.path).read_text()
    Path(config.path).write_text(text + "compaction: {after_load: false}\n")
    assert loads.compact(config.path) is None  # the DAG skips its compact task
    Path(config.path).write_text(text + "compaction: {after_load: true, older_than: 2h}\n")
    assert loads.compact(config.path).startswith("ev: nothing to compact")
