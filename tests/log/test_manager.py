"""LogManager: partition dirs, checkpoints, the clean-shutdown marker, background work."""

from __future__ import annotations

import threading
import time

import pytest

from pylog.errors import ConfigError, InvalidTopicError, KafkaStorageError
from pylog.log import LogConfig, LogManager
from pylog.log import layout
from pylog.log.checkpoint import OffsetCheckpointFile
from pylog.types import TopicPartition
from tests.log.batches import make_batch


def test_partitions_across_log_dirs_round_trip(tmp_path, clock):
    dirs = [tmp_path / "a", tmp_path / "b"]
    mgr = LogManager(dirs, LogConfig(), clock)
    assert mgr.load() == []
    names = [("my-topic-with-dashes", 3), ("plain", 0), ("plain", 1), ("x-1", 10)]
    for topic, partition in names:
        mgr.get_or_create(topic, partition).append(make_batch(partition + 1))
    assert {d.name for d in dirs for d in d.iterdir() if d.is_dir()} == {
        "my-topic-with-dashes-3", "plain-0", "plain-1", "x-1-10"}
    assert all(len([c for c in d.iterdir() if c.is_dir()]) == 2 for d in dirs)
    mgr.close()
    for d in dirs:
        assert (d / layout.CLEAN_SHUTDOWN_FILE).exists()
        points = OffsetCheckpointFile(d / layout.RECOVERY_POINT_CHECKPOINT).read()
        assert all(points[tp] == tp.partition + 1 for tp in points)

    again = LogManager(dirs, LogConfig(), clock)
    loaded = again.load()
    assert sorted(loaded) == sorted(TopicPartition(t, p) for t, p in names)
    assert again.partitions() == sorted(loaded)
    for topic, partition in names:
        log = again.get(topic, partition)
        assert log.log_end_offset == partition + 1 and log.bytes_truncated == 0
    assert again.get("nope", 0) is None
    assert not (dirs[0] / layout.CLEAN_SHUTDOWN_FILE).exists()  # a crash now would be unclean
    again.close()


def test_a_log_dir_is_owned_by_one_manager(tmp_path):
    first = LogManager([tmp_path], LogConfig())
    first.load()
    with pytest.raises(KafkaStorageError, match="in use"):
        LogManager([tmp_path], LogConfig()).load()
    first.close()
    second = LogManager([tmp_path], LogConfig())
    second.load()
    second.close()


def test_unclean_dir_recovers_from_the_recovery_point(tmp_path):
    mgr = LogManager([tmp_path], LogConfig())
    mgr.load()
    log = mgr.get_or_create("t", 0)
    for i in range(5):
        log.append(make_batch(2, tag=i))
    mgr.flush_all()
    assert OffsetCheckpointFile(tmp_path / layout.RECOVERY_POINT_CHECKPOINT).read() == {TopicPartition("t", 0): 10}
    mgr.close()
    (tmp_path / layout.CLEAN_SHUTDOWN_FILE).unlink()  # as if the process had died
    with open(layout.log_file(tmp_path / "t-0", 0), "ab") as f:
        f.write(b"\x00\x01" * 40)
    again = LogManager([tmp_path], LogConfig())
    again.load()
    assert again.get("t", 0).bytes_truncated == 80 and again.get("t", 0).log_end_offset == 10
    again.close()


def test_corrupt_checkpoint_means_recovering_from_the_start(tmp_path):
    mgr = LogManager([tmp_path], LogConfig())
    mgr.load()
    mgr.get_or_create("t", 0).append(make_batch(3))
    mgr.close()
    (tmp_path / layout.RECOVERY_POINT_CHECKPOINT).write_text("0\n5\nt 0 zzz\n")
    (tmp_path / layout.CLEAN_SHUTDOWN_FILE).unlink()
    again = LogManager([tmp_path], LogConfig())
    again.load()
    assert again.get("t", 0).log_end_offset == 3
    again.close()


def test_retention_moves_the_checkpointed_log_start(tmp_path, clock):
    cfg = LogConfig(segment_bytes=400, retention_bytes=500, retention_ms=None)
    mgr = LogManager([tmp_path], cfg, clock)
    mgr.load()
    log = mgr.get_or_create("t", 0)
    for i in range(12):
        log.append(make_batch(1, value_size=100, tag=i))
    assert mgr.run_retention() > 0
    start = log.log_start_offset
    assert start > 0
    assert OffsetCheckpointFile(tmp_path / layout.LOG_START_OFFSET_CHECKPOINT).read() == {TopicPartition("t", 0): start}
    mgr.close()
    again = LogManager([tmp_path], cfg, clock)
    again.load()
    assert again.get("t", 0).log_start_offset == start
    again.close()


def test_get_or_create_applies_a_config_and_delete_partition_removes_it(tmp_path):
    mgr = LogManager([tmp_path], LogConfig())
    mgr.load()
    log = mgr.get_or_create("t", 0)
    assert mgr.get_or_create("t", 0, LogConfig(segment_bytes=1000)) is log
    assert log.config.segment_bytes == 1000
    assert mgr.delete_partition("t", 0) and not mgr.delete_partition("t", 0)
    assert not (tmp_path / "t-0").exists() and mgr.partitions() == []
    assert OffsetCheckpointFile(tmp_path / layout.RECOVERY_POINT_CHECKPOINT).read() == {}
    mgr.close()


def test_background_thread_flushes_by_flush_ms(tmp_path, clock):
    mgr = LogManager([tmp_path], LogConfig(flush_ms=1000, expose_unflushed=False), clock)
    mgr.load()
    log = mgr.get_or_create("t", 0)
    log.append(make_batch(4))
    mgr.start(flush_check_ms=5, retention_check_ms=5)
    try:
        time.sleep(0.05)
        assert log.high_watermark == 0  # the injected clock has not moved
        clock.advance(ms=1001)
        deadline = time.monotonic() + 10
        while log.high_watermark != 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert log.high_watermark == 4
    finally:
        mgr.close()
    assert OffsetCheckpointFile(tmp_path / layout.RECOVERY_POINT_CHECKPOINT).read() == {TopicPartition("t", 0): 4}


@pytest.mark.parametrize("topic, partition", [("", 0), ("..", 0), ("a b", 0), ("a/b", 0),
                                               ("x" * 250, 0), ("ok", -1)])
def test_names_kafka_refuses_are_refused(tmp_path, topic, partition):
    mgr = LogManager([tmp_path], LogConfig())
    mgr.load()
    with pytest.raises(InvalidTopicError):
        mgr.get_or_create(topic, partition)
    assert mgr.partitions() == [] and [p.name for p in tmp_path.iterdir() if p.is_dir()] == []
    mgr.close()
    with pytest.raises(ConfigError, match="^log_dirs"):
        LogManager([], LogConfig())


def test_checkpoint_file_round_trip_and_atomic_write(tmp_path):
    cp = OffsetCheckpointFile(tmp_path / "cp")
    assert cp.read() == {}
    offsets = {TopicPartition("a-b", 1): 5, TopicPartition("c", 0): 0}
    cp.write(offsets)
    assert cp.read() == offsets
    assert (tmp_path / "cp").read_text() == "0\n2\na-b 1 5\nc 0 0\n"
    assert [p.name for p in tmp_path.iterdir()] == ["cp"]


@pytest.mark.parametrize("name, parsed", [
    ("my-topic-3", TopicPartition("my-topic", 3)), ("a-0", TopicPartition("a", 0)),
    ("a--1", TopicPartition("a-", 1)), ("nodash", None), ("t-x", None), ("-5", None)])
def test_partition_dir_names(name, parsed):
    assert layout.parse_partition_dir(name) == parsed
    if parsed is not None:
        assert layout.partition_dir_name(parsed) == name


def test_a_closed_log_does_not_stop_retention_or_flushing_of_the_others(tmp_path, clock):
    cfg = LogConfig(segment_bytes=400, retention_bytes=500, retention_ms=None, flush_ms=1000,
                    expose_unflushed=False)
    mgr = LogManager([tmp_path], cfg, clock)
    mgr.load()
    gone = mgr.get_or_create("gone", 0)
    kept = mgr.get_or_create("kept", 0)
    for i in range(12):
        gone.append(make_batch(1, value_size=100, tag=i))
        kept.append(make_batch(1, value_size=100, tag=i))
    gone.close()  # as when a topic is deleted while a pass is running
    assert mgr.run_retention() > 0
    assert kept.log_start_offset > 0
    kept.append(make_batch(2))
    clock.advance(ms=1001)
    assert mgr.flush_due() == 1
    assert kept.high_watermark == kept.log_end_offset
    mgr.delete_partition("gone", 0)
    mgr.close()


def test_checkpoints_written_from_several_threads_at_once(tmp_path):
    mgr = LogManager([tmp_path], LogConfig())
    mgr.load()
    for p in range(50):
        mgr.get_or_create("t", p).append(make_batch(1))
    errors: list[BaseException] = []

    def flush_repeatedly() -> None:
        try:
            for _ in range(60):
                mgr.flush_all()
        except BaseException as exc:  # noqa: BLE001 - reported by the assert below
            errors.append(exc)

    def delete_some() -> None:
        try:
            for p in range(40):
                mgr.delete_partition("t", p)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=flush_repeatedly) for _ in range(3)]
    threads.append(threading.Thread(target=delete_some))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    mgr.close()
    points = OffsetCheckpointFile(tmp_path / layout.RECOVERY_POINT_CHECKPOINT).read()
    assert points == {TopicPartition("t", p): 1 for p in range(40, 50)}
    assert not list(tmp_path.glob("*" + layout.TEMP_SUFFIX))


def test_replicated_high_watermarks_are_checkpointed_and_restored_not_applied(tmp_path):
    mgr = LogManager([tmp_path], LogConfig())
    mgr.load()
    replicated, standalone = mgr.get_or_create("r", 0), mgr.get_or_create("s", 0)
    for log in (replicated, standalone):
        log.append(make_batch(5), leader_epoch=2)
    replicated.set_high_watermark(3)
    mgr.flush_all()
    path = tmp_path / layout.REPLICATION_OFFSET_CHECKPOINT
    assert path.read_text() == "0\n1\nr 0 3\n"
    replicated.set_high_watermark(4)
    mgr.close()
    assert OffsetCheckpointFile(path).read() == {TopicPartition("r", 0): 4}

    again = LogManager([tmp_path], LogConfig())
    again.load()
    replicated, standalone = again.get("r", 0), again.get("s", 0)
    assert (replicated.restored_high_watermark, replicated.replicated_high_watermark) == (4, None)
    assert standalone.restored_high_watermark is None and replicated.high_watermark == 5
    assert replicated.latest_epoch == 2
    again.close()  # not applied yet: the restored value is kept, not dropped
    assert OffsetCheckpointFile(path).read() == {TopicPartition("r", 0): 4}

    third = LogManager([tmp_path], LogConfig())
    third.load()
    third.get("r", 0).set_high_watermark(5)
    third.delete_partition("s", 0)
    assert OffsetCheckpointFile(path).read() == {TopicPartition("r", 0): 5}
    third.close()


def test_background_thread_checkpoints_high_watermarks_without_a_flush(tmp_path):
    mgr = LogManager([tmp_path], LogConfig())
    mgr.load()
    log = mgr.get_or_create("r", 0)
    log.append(make_batch(5), leader_epoch=1)
    log.set_high_watermark(5)
    path = tmp_path / layout.REPLICATION_OFFSET_CHECKPOINT
    mgr.start(flush_check_ms=60_000, retention_check_ms=60_000, checkpoint_ms=20)
    try:
        deadline = time.monotonic() + 10
        while OffsetCheckpointFile(path).read_or_empty() != {TopicPartition("r", 0): 5}:
            assert time.monotonic() < deadline, "the high watermark was never checkpointed"
            time.sleep(0.02)
    finally:
        mgr.close()


def test_a_new_log_dir_is_not_reported_as_an_unclean_shutdown(tmp_path, caplog):
    caplog.set_level("INFO", logger="pylog.log.manager")
    manager = LogManager([tmp_path / "fresh"], LogConfig())
    manager.load()
    manager.get_or_create("t", 0).append(make_batch(1))
    manager.close()
    assert "a new log dir" in caplog.text and "unclean" not in caplog.text
    caplog.clear()
    again = LogManager([tmp_path / "fresh"], LogConfig())
    again.load()
    again.close()
    assert "loaded 1 logs after a clean shutdown" in caplog.text
