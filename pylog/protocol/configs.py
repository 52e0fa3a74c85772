"""The numbers inside DescribeConfigs, AlterConfigs and IncrementalAlterConfigs.

They follow Kafka's ``ConfigResource.Type``, ``DescribeConfigsResponse.ConfigSource``,
``ConfigDef.Type`` and ``AlterConfigOp.OpType`` wire values.
"""

from __future__ import annotations

import enum


class ConfigResourceType(enum.IntEnum):
    """What a config belongs to (``resource_type``)."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    GROUP = 32


class ConfigSource(enum.IntEnum):
    """Where a described value comes from (``config_source``, v1+)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


class ConfigType(enum.IntEnum):
    """A config's data type (``config_type``, DescribeConfigs v3+)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class AlterConfigOp(enum.IntEnum):
    """One change of IncrementalAlterConfigs (``config_operation``).

    APPEND and SUBTRACT add items to or remove them from a list config
    (``cleanup.policy``).
    """

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3
