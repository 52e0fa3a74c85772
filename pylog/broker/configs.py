"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs, for topics and brokers.

Topics: a topic's overrides are kept by ClusterMetadata (``topics.json`` standalone,
``/config/topics/<topic>`` in ZooKeeper); every other topic config takes the broker's
default. AlterConfigs replaces a topic's whole set of overrides; IncrementalAlterConfigs
SETs, DELETEs, APPENDs to or SUBTRACTs from single configs. The result is checked by
``LogConfig.with_overrides`` before anything is written, and a bad key or value answers
INVALID_CONFIG naming it. ``validate_only`` checks and writes nothing. Once written, the
metadata listener (``PartitionLogs.on_metadata_change``) gives the running logs the new
config, on every broker.

Brokers: ``server.properties`` is read at start, so a broker's settings are described but
read-only. Changing one answers INVALID_REQUEST (INVALID_CONFIG for a key pylog does not
have), naming the key. A broker resource is named by its id; the empty name is the
cluster-wide dynamic default, which pylog does not have (no entries).

Each resource is answered on its own: one bad resource costs only itself.
"""

from __future__ import annotations

import logging
from typing import Callable, Iterable

from pylog.broker.config import BrokerConfig, broker_settings
from pylog.broker.config_entries import broker_entries, topic_entries
from pylog.cluster.metadata import ClusterMetadata
from pylog.errors import (
    ConfigError, InvalidConfigError, InvalidRequestError, KafkaError,
    UnknownTopicOrPartitionError)
from pylog.log import LogConfig
from pylog.log.topic_configs import TOPIC_CONFIGS
from pylog.protocol.configs import AlterConfigOp, ConfigResourceType

log = logging.getLogger(__name__)

Overrides = dict[str, str]


class ConfigHandlers:
    """The config APIs of one broker.

    Parameters:
        config: this broker's settings (described, never changed).
        metadata: where topic overrides are kept.
        default_log_config: the LogConfig every topic starts from (the broker's defaults).
    """

    def __init__(self, config: BrokerConfig, metadata: ClusterMetadata,
                 default_log_config: LogConfig) -> None:
        self.config = config
        self.metadata = metadata
        self.default_log_config = default_log_config

    # -- DescribeConfigs --------------------------------------------------------------------

    def describe_configs(self, body: dict, version: int) -> dict:
        results = []
        for resource in body["resources"]:
            result = {"error_code": 0, "error_message": None,
                      "resource_type": resource["resource_type"],
                      "resource_name": resource["resource_name"], "configs": []}
            try:
                result["configs"] = self._describe(resource, body["include_synonyms"],
                                                   body["include_documentation"])
            except KafkaError as error:
                result.update(error_code=error.errno, error_message=str(error))
            results.append(result)
        return {"throttle_time_ms": 0, "results": results}

    def _describe(self, resource: dict, synonyms: bool, documentation: bool) -> list[dict]:
        kind, name = resource["resource_type"], resource["resource_name"]
        keys = resource["configuration_keys"]
        if kind == ConfigResourceType.TOPIC:
            return topic_entries(self._overrides(name), self.default_log_config, self.config,
                                 keys, include_synonyms=synonyms,
                                 include_documentation=documentation)
        if kind == ConfigResourceType.BROKER:
            if self._broker_resource(name) is None:
                return []  # the cluster-wide dynamic default: pylog has none
            return broker_entries(self.config, keys, include_synonyms=synonyms,
                                  include_documentation=documentation)
        raise _unsupported_type(kind)

    # -- AlterConfigs / IncrementalAlterConfigs ---------------------------------------------

    def alter_configs(self, body: dict, version: int) -> dict:
        """AlterConfigs: each topic's overrides become exactly the configs given (a null
        value leaves that config out, as Kafka does)."""
        def change(resource: dict) -> Callable[[Overrides], Overrides]:
            configs = resource["configs"]
            _check_unique(c["name"] for c in configs)
            return lambda current: {c["name"]: c["value"] for c in configs
                                    if c["value"] is not None}
        return self._alter(body, change)

    def incremental_alter_configs(self, body: dict, version: int) -> dict:
        """IncrementalAlterConfigs: the operations, in order, on the topic's overrides."""
        def change(resource: dict) -> Callable[[Overrides], Overrides]:
            operations = resource["configs"]
            _check_unique(c["name"] for c in operations)
            return lambda current: self._apply_operations(current, operations)
        return self._alter(body, change)

    def _alter(self, body: dict, change: Callable[[dict], Callable[[Overrides], Overrides]]
               ) -> dict:
        responses = []
        for resource in body["resources"]:
            response = {"error_code": 0, "error_message": None,
                        "resource_type": resource["resource_type"],
                        "resource_name": resource["resource_name"]}
            try:
                self._alter_one(resource, change(resource), body["validate_only"])
            except KafkaError as error:
                response.update(error_code=error.errno, error_message=str(error))
            responses.append(response)
        return {"throttle_time_ms": 0, "responses": responses}

    def _alter_one(self, resource: dict, change: Callable[[Overrides], Overrides],
                   validate_only: bool) -> None:
        kind, name = resource["resource_type"], resource["resource_name"]
        if kind == ConfigResourceType.BROKER:
            self._refuse_broker_change(name, [c["name"] for c in resource["configs"]])
            return
        if kind != ConfigResourceType.TOPIC:
            raise _unsupported_type(kind)

        def checked(current: Overrides) -> Overrides:
            proposed = change(current)
            self._check(proposed)
            return proposed

        if validate_only:
            checked(self._overrides(name))
            return
        configs = self.metadata.alter_topic_configs(name, checked)
        log.info("topic %s: config overrides are now %s", name, configs)

    def _apply_operations(self, current: Overrides, operations: list[dict]) -> Overrides:
        configs = dict(current)
        for operation in operations:
            name, value, kind = operation["name"], operation["value"], operation["config_operation"]
            if kind == AlterConfigOp.SET:
                if value is None:
                    raise InvalidRequestError(f"{name}: SET needs a value")
                configs[name] = value
            elif kind == AlterConfigOp.DELETE:
                if name not in TOPIC_CONFIGS and name not in configs:
                    raise InvalidConfigError(f"{name}: not a topic config")
                configs.pop(name, None)
            elif kind in (AlterConfigOp.APPEND, AlterConfigOp.SUBTRACT):
                key = TOPIC_CONFIGS.get(name)
                if key is None or not key.is_list:
                    raise InvalidConfigError(f"{name}: APPEND and SUBTRACT only apply to "
                                             f"list configs (cleanup.policy)")
                if value is None:
                    raise InvalidRequestError(f"{name}: {AlterConfigOp(kind).name} needs a value")
                items = _items(configs.get(name, self.default_log_config.kafka_value(name)))
                given = _items(value)
                if kind == AlterConfigOp.APPEND:
                    items += [item for item in given if item not in items]
                else:
                    items = [item for item in items if item not in given]
                configs[name] = ",".join(items)
            else:
                raise InvalidRequestError(f"{name}: unknown config operation {kind}")
        return configs

    def _check(self, overrides: Overrides) -> None:
        """InvalidConfigError naming the first key that is unknown or has a bad value."""
        for name in overrides:
            if name not in TOPIC_CONFIGS:
                raise InvalidConfigError(f"{name}: not a topic config pylog knows")
        try:
            self.default_log_config.with_overrides(overrides)
        except ConfigError as error:
            raise InvalidConfigError(f"{error.key}: {error.problem}") from None

    # -- helpers ----------------------------------------------------------------------------

    def _overrides(self, topic: str) -> Overrides:
        meta = self.metadata.topic(topic)
        if meta is None:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
        return dict(meta.configs)

    def _broker_resource(self, name: str) -> int | None:
        """This broker's id for resource ``name`` (None for "", the cluster default).

        Raises InvalidRequestError for another broker's id: its settings are its own.
        """
        if name == "":
            return None
        local = self.config["broker.id"]
        if name.strip() != str(local):
            raise InvalidRequestError(f"broker {name!r} is not this broker ({local}); "
                                      f"send the request to broker {name}")
        return local

    def _refuse_broker_change(self, name: str, keys: list[str]) -> None:
        self._broker_resource(name)
        if not keys:
            return
        known = {setting.name for setting in broker_settings()}
        unknown = [key for key in keys if key not in known]
        if unknown:
            raise InvalidConfigError(f"{', '.join(unknown)}: not a pylog broker setting")
        raise InvalidRequestError(
            f"{', '.join(keys)}: broker settings are read-only while the broker runs; "
            f"set them in server.properties and restart the broker")


def _check_unique(names: Iterable[str]) -> None:
    seen = set()
    for name in names:
        if name in seen:
            raise InvalidRequestError(f"{name}: given more than once")
        seen.add(name)


def _items(value: str) -> list[str]:
    """A list config's items: ``"compact, delete"`` -> ``["compact", "delete"]``."""
    return [item.strip() for item in value.split(",") if item.strip()]


def _unsupported_type(kind: int) -> InvalidRequestError:
    try:
        label = ConfigResourceType(kind).name
    except ValueError:
        label = str(kind)
    return InvalidRequestError(f"resource type {label} is not supported; pylog serves "
                               f"configs of topics (2) and brokers (4)")
