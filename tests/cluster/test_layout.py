"""ZooKeeper node JSON against the 0.8-era layout Kafka tools read."""

import json
import uuid

import pytest

from pylog.cluster import layout
from pylog.cluster.layout import BrokerRegistration, PartitionStateNode


def test_broker_registration_json():
    node = json.loads(BrokerRegistration(3, "127.0.0.1", 9093).encode(now_ms=1700000000000))
    assert node == {"version": 2, "host": "127.0.0.1", "port": 9093,
                    "endpoints": ["PLAINTEXT://127.0.0.1:9093"], "jmx_port": -1,
                    "timestamp": "1700000000000"}


def test_broker_registration_with_rack_round_trips():
    registration = BrokerRegistration(1, "h", 1, rack="r1")
    data = registration.encode(now_ms=1)
    assert json.loads(data)["version"] == 3
    assert BrokerRegistration.decode(1, data) == registration


def test_registration_with_endpoints_only_is_read_from_the_plaintext_endpoint():
    data = json.dumps({"version": 4, "host": None, "port": -1, "jmx_port": -1,
                       "endpoints": ["SSL://h:1", "PLAINTEXT://broker-2:9092"]}).encode()
    assert BrokerRegistration.decode(2, data).endpoint.address == "broker-2:9092"


def test_partition_state_json_round_trip():
    state = PartitionStateNode(leader=2, leader_epoch=5, isr=(2,), controller_epoch=7)
    assert json.loads(state.encode()) == {"controller_epoch": 7, "leader": 2, "version": 1,
                                          "leader_epoch": 5, "isr": [2]}
    assert PartitionStateNode.decode(state.encode()) == state


def test_assignment_json_round_trip():
    data = layout.encode_assignment({1: (2, 0), 0: (1, 2)})
    assert json.loads(data) == {"version": 1, "partitions": {"0": [1, 2], "1": [2, 0]}}
    assert layout.decode_assignment(data) == {0: (1, 2), 1: (2, 0)}
    assert layout.decode_topic_id(data) is None


def test_topic_ids_in_the_topic_node_as_kafka_writes_them():
    topic_id = uuid.UUID("0123456789abcdef0123456789abcdef")
    data = layout.encode_assignment({0: (1, 2)}, topic_id)
    assert json.loads(data) == {"version": 3, "topic_id": "ASNFZ4mrze8BI0VniavN7w",
                                "partitions": {"0": [1, 2]}, "adding_replicas": {},
                                "removing_replicas": {}}
    assert layout.decode_topic_id(data) == topic_id
    grown = layout.replace_assignment(data, {0: (1, 2), 1: (2, 1)})
    assert layout.decode_topic_id(grown) == topic_id
    assert layout.decode_assignment(grown) == {0: (1, 2), 1: (2, 1)}
    old = layout.encode_assignment({0: (3,)})
    assert layout.decode_topic_id(layout.with_topic_id(old, topic_id)) == topic_id
    with pytest.raises(ValueError):
        layout.parse_uuid_text("AAAA")


def test_controller_and_cluster_id_nodes():
    assert json.loads(layout.encode_controller(4, 12)) == {
        "version": 1, "brokerid": 4, "timestamp": "12"}
    assert layout.decode_controller(layout.encode_controller(4, 12)) == 4
    cluster_id = layout.new_cluster_id()
    assert len(cluster_id) == 22
    assert layout.decode_cluster_id(layout.encode_cluster_id(cluster_id)) == cluster_id
