"""The config handlers in-process over a real StandaloneMetadata: the request shapes no
stock client sends (duplicate keys, unknown operations and resource types, another
broker's id) and the edges of APPEND, SUBTRACT and DELETE."""

from __future__ import annotations

import pytest

from pylog.broker.config import BrokerConfig
from pylog.broker.configs import ConfigHandlers
from pylog.broker.dynamic_config import DynamicBrokerConfig
from pylog.broker.dynamic_store import FileBrokerConfigStore
from pylog.cluster.standalone import StandaloneMetadata
from pylog.errors import InvalidConfigError, InvalidRequestError, UnknownTopicOrPartitionError
from pylog.protocol.configs import AlterConfigOp, ConfigResourceType
from pylog.types import BrokerEndpoint

TOPIC, BROKER = int(ConfigResourceType.TOPIC), int(ConfigResourceType.BROKER)
SET, DELETE = int(AlterConfigOp.SET), int(AlterConfigOp.DELETE)
APPEND, SUBTRACT = int(AlterConfigOp.APPEND), int(AlterConfigOp.SUBTRACT)


@pytest.fixture
def handlers(tmp_path):
    config = BrokerConfig.load(None, {"log.dirs": str(tmp_path), "broker.id": "7"})
    metadata = StandaloneMetadata(tmp_path, BrokerEndpoint(7, "127.0.0.1", 9092), "cluster")
    metadata.create_topic("t", 1, configs={"retention.ms": "1000"})
    yield ConfigHandlers(DynamicBrokerConfig(config, FileBrokerConfigStore(tmp_path), 7), metadata)
    metadata.close()


def incremental(handlers, *operations, kind=TOPIC, name="t", validate_only=False) -> dict:
    body = {"resources": [{"resource_type": kind, "resource_name": name, "configs": [
        {"name": n, "config_operation": op, "value": v} for n, op, v in operations]}],
        "validate_only": validate_only}
    [response] = handlers.incremental_alter_configs(body, 1)["responses"]
    return response


def stored(handlers) -> dict:
    return dict(handlers.metadata.topic("t").configs)


def test_append_and_subtract_start_from_the_default(handlers):
    assert incremental(handlers, ("cleanup.policy", APPEND, "compact"))["error_code"] == 0
    assert stored(handlers)["cleanup.policy"] == "delete,compact"
    assert incremental(handlers, ("cleanup.policy", APPEND, "compact"),
                       ("cleanup.policy", SUBTRACT, "delete"))["error_code"] == \
        InvalidRequestError.errno  # one key, two operations: refused as a whole
    assert incremental(handlers, ("cleanup.policy", SUBTRACT, "delete"))["error_code"] == 0
    assert stored(handlers)["cleanup.policy"] == "compact"


@pytest.mark.parametrize("operations, error, needle", [
    ((("retention.ms", SET, "1"), ("retention.ms", DELETE, None)), InvalidRequestError,
     "retention.ms"),
    ((("retention.ms", 9, "1"),), InvalidRequestError, "operation 9"),
    ((("retention.ms", SET, None),), InvalidRequestError, "retention.ms"),
    ((("no.such.key", DELETE, None),), InvalidConfigError, "no.such.key"),
    ((("segment.ms", SUBTRACT, "1"),), InvalidConfigError, "segment.ms"),
])
def test_refusals_name_the_key_and_change_nothing(handlers, operations, error, needle):
    response = incremental(handlers, *operations)
    assert response["error_code"] == error.errno
    assert needle in response["error_message"]
    assert stored(handlers) == {"retention.ms": "1000"}


def test_an_unknown_override_can_be_deleted(handlers):
    # As if another tool had written it: pylog cannot check it, but lets it go.
    handlers.metadata.alter_topic_configs("t", lambda current: {**current, "odd.key": "1"})
    assert incremental(handlers, ("retention.ms", SET, "5"))["error_code"] == \
        InvalidConfigError.errno
    assert incremental(handlers, ("odd.key", DELETE, None))["error_code"] == 0
    assert stored(handlers) == {"retention.ms": "1000"}


def test_alter_configs_replaces_and_validate_only_keeps(handlers):
    body = {"resources": [{"resource_type": TOPIC, "resource_name": "t", "configs": [
        {"name": "segment.ms", "value": "100"}, {"name": "flush.ms", "value": None}]}],
        "validate_only": True}
    assert handlers.alter_configs(body, 0)["responses"][0]["error_code"] == 0
    assert stored(handlers) == {"retention.ms": "1000"}
    body["validate_only"] = False
    assert handlers.alter_configs(body, 0)["responses"][0]["error_code"] == 0
    assert stored(handlers) == {"segment.ms": "100"}


@pytest.mark.parametrize("kind, name, error", [
    (BROKER, "3", InvalidRequestError),  # another broker's settings are its own
    (8, "7", InvalidRequestError),  # BROKER_LOGGER: not served
    (TOPIC, "missing", UnknownTopicOrPartitionError),
])
def test_resources_pylog_cannot_change(handlers, kind, name, error):
    response = incremental(handlers, ("retention.ms", SET, "1"), kind=kind, name=name)
    assert response["error_code"] == error.errno
    body = {"resources": [{"resource_type": kind, "resource_name": name,
                           "configuration_keys": None}],
            "include_synonyms": False, "include_documentation": False}
    [result] = handlers.describe_configs(body, 4)["results"]
    assert result["error_code"] == error.errno and result["configs"] == []


def test_this_broker_and_the_cluster_default(handlers):
    body = {"resources": [{"resource_type": BROKER, "resource_name": name,
                           "configuration_keys": ["broker.id"]} for name in ("7", "")],
            "include_synonyms": False, "include_documentation": False}
    mine, default = handlers.describe_configs(body, 4)["results"]
    assert [(c["name"], c["value"]) for c in mine["configs"]] == [("broker.id", "7")]
    assert default["error_code"] == 0 and default["configs"] == []
    assert incremental(handlers, kind=BROKER, name="7")["error_code"] == 0  # nothing to do


def broker_configs(handlers, name: str = "7") -> dict:
    return handlers.dynamic.configs(name)


def test_broker_operations_write_the_dynamic_configs(handlers):
    assert incremental(handlers, ("log.retention.ms", SET, "5000"),
                       ("log.cleanup.policy", APPEND, "compact"), kind=BROKER,
                       name="7")["error_code"] == 0
    assert broker_configs(handlers) == {"log.retention.ms": "5000",
                                        "log.cleanup.policy": "delete,compact"}
    assert handlers.dynamic.current["log.retention.ms"] == 5000
    assert handlers.default_log_config.compact  # the topics' default follows
    assert incremental(handlers, ("log.cleanup.policy", SUBTRACT, "delete"),
                       ("log.retention.ms", DELETE, None), kind=BROKER,
                       name="7")["error_code"] == 0
    assert broker_configs(handlers) == {"log.cleanup.policy": "compact"}
    assert incremental(handlers, ("num.io.threads", SET, "4"), kind=BROKER,
                       name="")["error_code"] == 0  # the cluster default; ignored by pylog
    assert broker_configs(handlers, "") == {"num.io.threads": "4"}


@pytest.mark.parametrize("operations, error, needle", [
    ((("num.partitions", SET, "3"),), InvalidRequestError, "restart"),
    ((("no.such.setting", DELETE, None),), InvalidConfigError, "no.such.setting"),
    ((("log.retention.ms", APPEND, "1"),), InvalidConfigError, "log.cleanup.policy"),
    ((("log.segment.bytes", SET, "12"),), InvalidConfigError, "log.segment.bytes"),
])
def test_broker_refusals_name_the_key_and_change_nothing(handlers, operations, error, needle):
    for name in ("7", ""):
        response = incremental(handlers, *operations, kind=BROKER, name=name)
        assert response["error_code"] == error.errno and needle in response["error_message"]
        assert broker_configs(handlers, name) == {}
    assert incremental(handlers, ("log.retention.ms", SET, "1"), kind=BROKER, name="7",
                       validate_only=True)["error_code"] == 0
    assert broker_configs(handlers) == {}


def test_append_to_the_cluster_default_starts_from_the_file_not_this_broker(handlers):
    assert incremental(handlers, ("log.cleanup.policy", SET, "compact"), kind=BROKER,
                       name="7")["error_code"] == 0
    assert incremental(handlers, ("log.cleanup.policy", APPEND, "delete"), kind=BROKER,
                       name="")["error_code"] == 0
    assert broker_configs(handlers, "") == {"log.cleanup.policy": "delete"}


def test_stored_values_that_do_not_fit_are_left_out_one_by_one(tmp_path, caplog):
    from pylog.broker.dynamic_store import FileBrokerConfigStore

    (tmp_path / "broker-configs.json").write_text(
        '{"version": 1, "brokers": {"<default>": {"log.roll.hours": "-5"}, "7": {'
        '"log.retention.ms": "1000", "listener.name.ssl.ssl.key.password": "hunter2", '
        '"log.segment.bytes": "12"}}}')
    config = BrokerConfig.load(None, {"log.dirs": str(tmp_path), "broker.id": "7"})
    dynamic = DynamicBrokerConfig(config, FileBrokerConfigStore(tmp_path), 7)
    assert dynamic.current["log.retention.ms"] == 1000  # kept: it fits
    assert dynamic.current["log.roll.hours"] == config["log.roll.hours"]
    assert dynamic.current["log.segment.bytes"] == config["log.segment.bytes"]
    assert "log.roll.hours=-5 left out" in caplog.text
    assert "log.segment.bytes=12 left out" in caplog.text
    assert "hunter2" not in caplog.text
