"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs, for topics and brokers.

Topics: a topic's overrides are kept by ClusterMetadata (``topics.json`` standalone,
``/config/topics/<topic>`` in ZooKeeper); every other topic config takes the broker's
default. AlterConfigs replaces a topic's whole set of overrides; IncrementalAlterConfigs
SETs, DELETEs, APPENDs to or SUBTRACTs from single configs. The result is checked by
``LogConfig.with_overrides`` before anything is written, and a bad key or value answers
INVALID_CONFIG naming it. ``validate_only`` checks and writes nothing. Once written, the
metadata listener (``PartitionLogs.on_metadata_change``) gives the running logs the new
config, on every broker.

Brokers: a broker resource is named by its id, or ``""`` for the cluster-wide dynamic
default. Its settings come from ``server.properties`` unless a dynamic config (set by
AlterConfigs, kept by :class:`~pylog.broker.dynamic_config.DynamicBrokerConfig`) changes
them while the broker runs: the topics' defaults, the connection limits, the cleaner's
threads. Another broker's id answers INVALID_REQUEST (the client sends it to that broker),
as does a setting that needs a restart; an unknown setting or a bad value INVALID_CONFIG,
naming the key.

Groups (resource type 32): a group's overrides of Kafka's group configs
(:mod:`pylog.broker.group_configs`), kept in ``/config/groups/<group>`` (standalone:
``group-configs.json``); any group name but the empty one, existing or not.

Each resource is answered on its own: one bad resource costs only itself.
"""

from __future__ import annotations

import logging
from typing import Callable, Iterable

from pylog.broker.config import broker_settings, dynamic_kind
from pylog.broker.config_entries import (
    DynamicLayers, broker_entries, default_broker_entries, setting_text, topic_entries)
from pylog.broker.dynamic_config import DynamicBrokerConfig
from pylog.broker.dynamic_store import DEFAULT_ENTITY
from pylog.broker.group_configs import GROUP_SETTINGS, check_group_configs, group_entries
from pylog.cluster.metadata import ClusterMetadata
from pylog.errors import (
    ConfigError, InvalidConfigError, InvalidRequestError, KafkaError,
    UnknownTopicOrPartitionError)
from pylog.log import LogConfig
from pylog.log.topic_configs import TOPIC_CONFIGS
from pylog.protocol.configs import AlterConfigOp, ConfigResourceType

log = logging.getLogger(__name__)

Overrides = dict[str, str]
_BROKER_TYPES = {setting.name: setting.type for setting in broker_settings()}
_LIST_EXAMPLE = {False: "cleanup.policy", True: "log.cleanup.policy"}


class ConfigHandlers:
    """The config APIs of one broker.

    Parameters:
        dynamic: this broker's settings, static and dynamic.
        metadata: where topic overrides are kept.
    """

    def __init__(self, dynamic: DynamicBrokerConfig, metadata: ClusterMetadata) -> None:
        self.dynamic = dynamic
        self.metadata = metadata
        self.group_store = dynamic.store.for_groups()

    @property
    def default_log_config(self) -> LogConfig:
        """The LogConfig every topic starts from (the broker's defaults, as now)."""
        return self.dynamic.log_config

    def _layers(self) -> DynamicLayers:
        return self.dynamic.layers[str(self.dynamic.entity)], self.dynamic.layers[DEFAULT_ENTITY]

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
            return topic_entries(self._overrides(name), self.default_log_config,
                                 self.dynamic.static, keys, include_synonyms=synonyms,
                                 include_documentation=documentation, dynamic=self._layers())
        if kind == ConfigResourceType.GROUP:
            if not name:
                raise InvalidRequestError("Group name must not be empty")
            return group_entries(self.group_store.configs(name), keys,
                                 include_synonyms=synonyms, include_documentation=documentation)
        if kind == ConfigResourceType.BROKER:
            if self._broker_resource(name) is None:
                return default_broker_entries(self.dynamic.layers[DEFAULT_ENTITY], keys,
                                              include_synonyms=synonyms,
                                              include_documentation=documentation)
            return broker_entries(self.dynamic.static, keys, include_synonyms=synonyms,
                                  include_documentation=documentation, dynamic=self._layers())
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
            broker = resource["resource_type"] == ConfigResourceType.BROKER
            group = resource["resource_type"] == ConfigResourceType.GROUP
            return lambda current: self._apply_operations(
                current, operations, broker, resource["resource_name"], group)
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
            broker_id = self._broker_resource(name)
            self.dynamic.alter("" if broker_id is None else str(broker_id), change,
                               validate_only)
            return
        if kind == ConfigResourceType.GROUP:
            self._alter_group(_group_name(name), change, validate_only)
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

    def _alter_group(self, group: str, change: Callable[[Overrides], Overrides],
                     validate_only: bool) -> None:
        def checked(current: Overrides) -> Overrides:
            proposed = change(current)
            check_group_configs(proposed)
            return proposed

        if validate_only:
            checked(self.group_store.configs(group))
            return
        configs = self.group_store.alter(group, checked)
        log.info("group %s: config overrides are now %s", group, configs)

    def _apply_operations(self, current: Overrides, operations: list[dict],
                          broker: bool = False, resource: str = "", group: bool = False
                          ) -> Overrides:
        """The configs of a topic (``broker``: of broker resource ``resource``; ``group``:
        of a group, whose configs are no lists) after the operations."""
        configs = dict(current)
        for operation in operations:
            name, value, kind = operation["name"], operation["value"], operation["config_operation"]
            if kind == AlterConfigOp.SET:
                if value is None:
                    raise InvalidRequestError(f"{name}: SET needs a value")
                configs[name] = value
            elif kind == AlterConfigOp.DELETE:
                if group:
                    if name not in GROUP_SETTINGS and name not in configs:
                        raise InvalidConfigError(f"Unknown group config name: {name}")
                elif (dynamic_kind(name) == "unknown" if broker else name not in TOPIC_CONFIGS) \
                        and name not in configs:
                    raise InvalidConfigError(f"{name}: not a {'broker' if broker else 'topic'}"
                                             f" config")
                configs.pop(name, None)
            elif kind in (AlterConfigOp.APPEND, AlterConfigOp.SUBTRACT):
                if group:
                    raise InvalidConfigError(f"Can't {AlterConfigOp(kind).name} to key {name} "
                                             "because its type is not LIST.")
                if not self._is_list(name, broker):
                    raise InvalidConfigError(f"{name}: APPEND and SUBTRACT only apply to "
                                             f"list configs ({_LIST_EXAMPLE[broker]})")
                if value is None:
                    raise InvalidRequestError(f"{name}: {AlterConfigOp(kind).name} needs a value")
                items = _items(configs[name] if name in configs
                               else self._current(name, broker, resource))
                given = _items(value)
                if kind == AlterConfigOp.APPEND:
                    items += [item for item in given if item not in items]
                else:
                    items = [item for item in items if item not in given]
                configs[name] = ",".join(items)
            else:
                raise InvalidRequestError(f"{name}: unknown config operation {kind}")
        return configs

    @staticmethod
    def _is_list(name: str, broker: bool) -> bool:
        if not broker:
            return name in TOPIC_CONFIGS and TOPIC_CONFIGS[name].is_list
        return dynamic_kind(name) == "dynamic" and _BROKER_TYPES.get(name) == "list"

    def _current(self, name: str, broker: bool, resource: str) -> str:
        """The value a list config has under the resource's own, that APPEND and SUBTRACT
        start from: for a topic the broker's default; for a broker the cluster default,
        else ``server.properties``; for the cluster default ``server.properties``."""
        if not broker:
            return self.default_log_config.kafka_value(name)
        default = self.dynamic.layers[DEFAULT_ENTITY]
        if resource.strip() and name in default:
            return default[name]
        return setting_text(self.dynamic.static[name]) or ""

    def _check(self, overrides: Overrides) -> None:
        """InvalidConfigError naming the first key that is unknown or has a bad value."""
        for name in overrides:
            if name not in TOPIC_CONFIGS:
                raise InvalidConfigError(f"Unknown topic config name: {name}")
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
        local = self.dynamic.static["broker.id"]
        if name.strip() != str(local):
            raise InvalidRequestError(f"broker {name!r} is not this broker ({local}); "
                                      f"send the request to broker {name}")
        return local


def _group_name(name: str) -> str:
    if not name:
        raise InvalidRequestError("Default group resources are not allowed.")
    return name


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
                               f"configs of topics (2), brokers (4) and groups (32)")
