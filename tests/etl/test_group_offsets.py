"""The loader publishes its committed offsets to a consumer group, for Kafka's lag tools.

Against librdkafka's mock cluster and a pylog broker stock clients read the group's
offsets; when the coordinator refuses the commit the load still commits, with a warning.
"""

from __future__ import annotations

import logging
import time

import confluent_kafka
from confluent_kafka import TopicPartition

from pylog.client import SimpleConsumer
from pylog.client.group_offsets import fetch_group_offsets
from pylog.etl.job import LoadRequest, run_load
from pylog.etl.state import StateStore
from pylog.testing.broker import BrokerProcess
from tests.etl.helpers import events, produce, write_config


def group_offsets_seen_by_librdkafka(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                         "enable.auto.commit": False, "log_level": 3})
    try:
        committed = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=20)
        return {tp.partition: tp.offset for tp in committed}
    finally:
        consumer.close()


def test_each_scheduled_load_publishes_its_offsets_to_the_tables_group(spark, mock_cluster, tmp_path):
    config = write_config(tmp_path, mock_cluster.bootstrap, max_records_per_task=100)
    mock_cluster.produce("ev", events(0, 120))
    run_load(config, spark, LoadRequest(run_id="r1"))
    state = StateStore(config.state)
    assert group_offsets_seen_by_librdkafka(mock_cluster.bootstrap, "pylog-loader.ev", "ev", 4) == \
        state.committed_offsets("ev") == {0: 30, 1: 30, 2: 30, 3: 30}

    mock_cluster.produce("ev", events(120, 40))
    run_load(config, spark, LoadRequest(run_id="r2"))
    assert group_offsets_seen_by_librdkafka(mock_cluster.bootstrap, "pylog-loader.ev", "ev", 4) == \
        {0: 40, 1: 40, 2: 40, 3: 40}
    with SimpleConsumer(mock_cluster.bootstrap) as consumer:  # and our own reader agrees
        assert fetch_group_offsets(consumer.network, "pylog-loader.ev", "ev", [0, 1, 2, 3]) == \
            {0: 40, 1: 40, 2: 40, 3: 40}
        assert fetch_group_offsets(consumer.network, "nobody", "ev", [0, 1]) == {0: -1, 1: -1}


def test_a_named_group_or_none(spark, mock_cluster, tmp_path):
    mock_cluster.produce("ev", events(0, 40))
    (tmp_path / "named").mkdir()
    (tmp_path / "off").mkdir()
    named = write_config(tmp_path / "named", mock_cluster.bootstrap, consumer_group="analytics-lag")
    run_load(named, spark, LoadRequest(run_id="r1"))
    assert group_offsets_seen_by_librdkafka(mock_cluster.bootstrap, "analytics-lag", "ev", 4) == \
        {0: 10, 1: 10, 2: 10, 3: 10}
    off = write_config(tmp_path / "off", mock_cluster.bootstrap, table="ev_off", consumer_group=False)
    run_load(off, spark, LoadRequest(run_id="r1"))
    assert set(group_offsets_seen_by_librdkafka(mock_cluster.bootstrap, "pylog-loader.ev_off", "ev", 4)
               .values()) == {confluent_kafka.OFFSET_INVALID}


def test_a_pylog_broker_serves_the_loaders_group_and_a_busy_group_costs_only_a_warning(
        spark, tmp_path, caplog):
    """The coordinator refuses a commit from outside a group that has live members
    (UNKNOWN_MEMBER_ID): the load still commits, and says so in a warning."""
    settings = {"num.partitions": 2, "group.initial.rebalance.delay.ms": 0,
                "offsets.topic.num.partitions": 3}
    with BrokerProcess(tmp_path / "broker", settings) as broker:
        produce(broker.bootstrap, "ev", events(0, 20), 2)
        config = write_config(tmp_path, broker.bootstrap)
        audits = run_load(config, spark, LoadRequest(run_id="r1"))
        assert audits[0].rows_written == 20
        assert group_offsets_seen_by_librdkafka(broker.bootstrap, "pylog-loader.ev", "ev", 2) == \
            {0: 10, 1: 10}

        member = confluent_kafka.Consumer({
            "bootstrap.servers": broker.bootstrap, "group.id": "pylog-loader.ev",
            "enable.auto.commit": False, "session.timeout.ms": 6000, "log_level": 3})
        try:
            member.subscribe(["ev"])
            deadline = time.monotonic() + 30
            while not member.assignment() and time.monotonic() < deadline:
                member.poll(0.2)
            assert member.assignment(), "the member never got its partitions"
            produce(broker.bootstrap, "ev", events(20, 10), 2)
            with caplog.at_level(logging.WARNING, logger="pylog.etl.job"):
                audits = run_load(config, spark, LoadRequest(run_id="r2"))
        finally:
            member.close()
        assert audits[0].rows_written == 10
        assert StateStore(config.state).committed_offsets("ev") == {0: 15, 1: 15}
        assert "not published to consumer group pylog-loader.ev" in caplog.text
        assert group_offsets_seen_by_librdkafka(broker.bootstrap, "pylog-loader.ev", "ev", 2) == \
            {0: 10, 1: 10}
