"""``__consumer_offsets`` stays small: compaction keeps one record per committed partition.

100,000 offset commits of one group (1,000 requests of 100 partitions, pipelined) go to a
broker whose offsets topic rolls small segments; the cleaner must bring the partition to
a small fraction of what was written, and the newest offsets must survive a restart.
"""

from __future__ import annotations

import time

from pylog.coordinator.records import OffsetValue, offset_key, offset_value
from pylog.protocol import ApiKey
from pylog.records import build_batch
from pylog.testing.broker import BrokerProcess
from tests.broker.wire import WireClient

REQUESTS = 1000
PARTITIONS = 100


def commit_body(round_: int) -> dict:
    return {"group_id": "busy", "generation_id_or_member_epoch": -1, "member_id": "",
            "group_instance_id": None, "retention_time_ms": -1,
            "topics": [{"name": "tracked", "partitions": [
                {"partition_index": p, "committed_offset": round_ * 10 + p,
                 "committed_leader_epoch": -1, "committed_metadata": ""}
                for p in range(PARTITIONS)]}]}


def batch_bytes(round_: int) -> int:
    """The size of the batch the coordinator writes for one commit request."""
    records = [(offset_key("busy", "tracked", p),
                offset_value(OffsetValue(round_ * 10 + p, -1, "", 0)), (), 0)
               for p in range(PARTITIONS)]
    return len(build_batch(records))


def offsets_bytes(broker: BrokerProcess) -> int:
    """The partition's segment bytes; the cleaner may delete a segment between listing and stat."""
    total = 0
    for segment in (broker.log_dir / "__consumer_offsets-0").glob("*.log"):
        try:
            total += segment.stat().st_size
        except FileNotFoundError:
            pass
    return total


def test_a_hundred_thousand_commits_compact_to_a_small_log(tmp_path):
    settings = {"offsets.topic.num.partitions": 1, "offsets.topic.segment.bytes": 64 * 1024,
                "log.cleaner.backoff.ms": 100, "num.partitions": PARTITIONS}
    with BrokerProcess(tmp_path / "b", settings) as broker:
        with WireClient(broker.bootstrap) as wire:
            found = wire.call(ApiKey.FIND_COORDINATOR, 2, {"key": "busy", "key_type": 0})
            assert found["error_code"] == 0
            wire.call(ApiKey.METADATA, 4, {"topics": [{"name": "tracked"}],
                                           "allow_auto_topic_creation": True})
            for start in range(0, REQUESTS, 50):  # 50 requests in flight at a time
                sent = [wire.send(ApiKey.OFFSET_COMMIT, 2, commit_body(r))
                        for r in range(start, start + 50)]
                for _ in sent:
                    _, response = wire.receive(ApiKey.OFFSET_COMMIT, 2)
                    codes = {p["error_code"] for p in response["topics"][0]["partitions"]}
                    assert codes == {0}
        written = REQUESTS * batch_bytes(0)
        deadline = time.monotonic() + 60
        while offsets_bytes(broker) > written / 20 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert offsets_bytes(broker) <= written / 20, (offsets_bytes(broker), written)
        broker.stop()
        broker.start()
        with WireClient(broker.bootstrap) as wire:
            deadline = time.monotonic() + 30
            while True:
                fetched = wire.call(ApiKey.OFFSET_FETCH, 2, {"group_id": "busy", "topics": None})
                if fetched["error_code"] != 14 or time.monotonic() > deadline:
                    break  # 14: COORDINATOR_LOAD_IN_PROGRESS
                time.sleep(0.05)
        assert fetched["error_code"] == 0
        last = REQUESTS - 1
        assert {p["partition_index"]: p["committed_offset"]
                for p in fetched["topics"][0]["partitions"]} == \
            {p: last * 10 + p for p in range(PARTITIONS)}
