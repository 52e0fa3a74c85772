"""Prometheus metrics (``metrics.listener``), scraped from a real broker process while
confluent-kafka produces and consumes; the values are checked against what the clients did.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer
from prometheus_client.parser import text_string_to_metric_families

from pylog.testing.broker import BrokerProcess
from pylog.testing.process import free_port, wait_for_port

TOPIC = "metered"
COUNT = 3000
VALUE = b"v" * 100


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    """Every sample as {(name, sorted label items): value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


@pytest.fixture(scope="module")
def metered(tmp_path_factory):
    port = free_port()
    broker = BrokerProcess(tmp_path_factory.mktemp("metered"), {
        "num.partitions": 2, "metrics.listener": f"127.0.0.1:{port}"}).start()
    try:
        # The broker starts its metrics listener after it binds its client port.
        wait_for_port("127.0.0.1", port, 30, broker.process.process, broker.log_path)
        yield broker, port
    finally:
        broker.stop()


def test_a_scrape_during_a_load_counts_what_the_clients_did(metered):
    broker, port = metered
    scrapes: list[dict] = []
    producing = threading.Event()
    producing.set()

    def scrape_while_producing() -> None:
        while producing.is_set():
            scrapes.append(scrape(port))

    scraper = threading.Thread(target=scrape_while_producing)
    scraper.start()
    try:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        for n in range(COUNT):
            producer.produce(TOPIC, key=str(n).encode(), value=VALUE, partition=n % 2)
            if n % 500 == 0:
                producer.poll(0)
        assert producer.flush(30) == 0
    finally:
        producing.clear()
        scraper.join()
    assert scrapes, "no scrape finished during the load"

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "metered",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([TOPIC])
    read = 0
    while read < COUNT:
        message = consumer.poll(10)
        assert message is not None, f"only {read} of {COUNT} records read back"
        assert message.error() is None, message.error()
        read += 1
    consumer.close()

    after = scrape(port)
    topic = (("topic", TOPIC),)
    assert after[("pylog_topic_messages_in_total", topic)] == COUNT
    # Batches carry headers and record framing on top of the values.
    assert after[("pylog_topic_bytes_in_total", topic)] > COUNT * len(VALUE)
    assert after[("pylog_topic_bytes_out_total", topic)] >= \
        after[("pylog_topic_bytes_in_total", topic)]
    assert after[("pylog_requests_total", (("api", "Produce"),))] >= 1
    assert after[("pylog_requests_total", (("api", "Fetch"),))] >= 1
    assert after[("pylog_request_latency_seconds_count", (("api", "Produce"),))] == \
        after[("pylog_requests_total", (("api", "Produce"),))]
    for partition in (0, 1):
        labels = (("partition", str(partition)), ("topic", TOPIC))
        assert after[("pylog_log_end_offset", labels)] == COUNT // 2
        assert after[("pylog_log_start_offset", labels)] == 0
        assert after[("pylog_log_size_bytes", labels)] > 0
    assert after[("pylog_leader_partitions", ())] >= 2
    assert after[("pylog_under_replicated_partitions", ())] == 0
    assert after[("pylog_active_controller", ())] == 1  # standalone: its own controller
    # The counters only grow: every scrape taken during the load saw at most the total.
    during = [s.get(("pylog_topic_messages_in_total", topic), 0) for s in scrapes]
    assert during == sorted(during) and during[-1] <= COUNT


def test_connections_and_parked_requests_are_seen(metered):
    broker, port = metered
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "waiting",
                         "auto.offset.reset": "latest", "fetch.wait.max.ms": 5000})
    consumer.subscribe([TOPIC])
    try:
        for _ in range(20):  # join the group; then its fetches long-poll an idle topic
            consumer.poll(0.5)
            values = scrape(port)
            if values[("pylog_parked_requests", ())] >= 1:
                break
        assert values[("pylog_parked_requests", ())] >= 1
        assert values[("pylog_connections", (("listener", "PLAINTEXT"),))] >= 1
    finally:
        consumer.close()


def test_a_bad_metrics_listener_names_the_key(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "pylog.cli.main", "broker", "--override",
         f"log.dirs={tmp_path}", "--override", "metrics.listener=nowhere"],
        capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "metrics.listener" in result.stderr and "HOST:PORT" in result.stderr
    assert "Traceback" not in result.stderr
