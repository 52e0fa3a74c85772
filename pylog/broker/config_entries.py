"""The entries DescribeConfigs answers with: every config of a topic or of this broker,
with its value, where the value comes from, and its synonyms.

A topic config's value is its override (source DYNAMIC_TOPIC_CONFIG) or else the
broker's default, which comes from a ``server.properties`` key (STATIC_BROKER_CONFIG when
that key was set, DEFAULT_CONFIG when it holds Kafka's default). Its synonyms list those
sources in Kafka's order: the override first, then the broker keys, finest unit first::

    retention.ms=3600000 synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=3600000,
                                   DEFAULT_CONFIG:log.retention.hours=168}

A broker setting's value is this broker's dynamic config (DYNAMIC_BROKER_CONFIG), else the
cluster-wide dynamic default (DYNAMIC_DEFAULT_BROKER_CONFIG), else ``server.properties``;
only the settings that may change at run time are not read-only. A topic config's broker
synonyms list the same sources, in that order.
Entries are plain dicts in the shape of the DescribeConfigs response's ``configs``.
"""

from __future__ import annotations

from typing import Collection, Mapping

from pylog.broker.config import (
    BrokerConfig, BrokerSetting, broker_settings, dynamic_kind, is_listener_tls_key)
from pylog.log import LogConfig
from pylog.log.topic_configs import TOPIC_CONFIGS, TopicConfigKey
from pylog.protocol.configs import ConfigSource, ConfigType

# Words that mark a setting holding a secret; its value is never described. (pylog has no
# such setting yet; SASL and TLS settings will.)
_SENSITIVE_WORDS = ("password", "secret", "jaas")


# A broker's dynamic configs: (its own, the cluster-wide default).
DynamicLayers = tuple[Mapping[str, str], Mapping[str, str]]
NO_DYNAMIC: DynamicLayers = ({}, {})


def is_sensitive(name: str) -> bool:
    """Whether setting ``name`` holds a secret (its value is described as null)."""
    return any(word in name for word in _SENSITIVE_WORDS)


def setting_text(value: object) -> str | None:
    """A typed setting as Kafka writes it: ``true``/``false``, numbers, None as null."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _entry(name: str, value: str | None, source: ConfigSource, *, read_only: bool,
           config_type: str, documentation: str, synonyms: list[dict],
           include_synonyms: bool, include_documentation: bool) -> dict:
    sensitive = is_sensitive(name)
    return {
        "name": name, "value": None if sensitive else value, "read_only": read_only,
        "is_default": source == ConfigSource.DEFAULT_CONFIG, "config_source": int(source),
        "is_sensitive": sensitive,
        "synonyms": synonyms if include_synonyms else [],
        "config_type": int(ConfigType[config_type.upper()]),
        "documentation": documentation if include_documentation else None,
    }


def _synonym(name: str, value: str | None, source: ConfigSource) -> dict:
    return {"name": name, "value": None if is_sensitive(name) else value,
            "source": int(source)}


def _wanted(names, keys: Collection[str] | None):
    return [name for name in names if not keys or name in keys]


def topic_entries(overrides: Mapping[str, str], defaults: LogConfig, broker: BrokerConfig,
                  keys: Collection[str] | None = None, *, include_synonyms: bool = False,
                  include_documentation: bool = False,
                  dynamic: DynamicLayers = NO_DYNAMIC) -> list[dict]:
    """Entries for every topic config (only ``keys`` when given), sorted by name.

    ``defaults`` is the broker's default LogConfig (dynamic configs applied);
    ``overrides`` the topic's own configs; ``broker`` the broker's static settings and
    ``dynamic`` its dynamic ones (this broker's, the cluster default). An override pylog
    does not know (written by another tool) is listed as it is, so it can be seen and
    deleted.
    """
    entries = []
    for name in _wanted(sorted(set(TOPIC_CONFIGS) | set(overrides)), keys):
        key = TOPIC_CONFIGS.get(name) or TopicConfigKey(name, "string", "not a pylog config", ())
        synonyms = []
        if name in overrides:
            synonyms.append(_synonym(name, overrides[name], ConfigSource.DYNAMIC_TOPIC_CONFIG))
        synonyms += _broker_synonyms(key, broker, dynamic)
        if name in overrides:
            value = overrides[name]
        else:
            value = defaults.kafka_value(name) if name in TOPIC_CONFIGS else None
        source = ConfigSource(synonyms[0]["source"]) if synonyms else ConfigSource.DEFAULT_CONFIG
        entries.append(_entry(name, value, source, read_only=False, config_type=key.type,
                              documentation=key.documentation, synonyms=synonyms,
                              include_synonyms=include_synonyms,
                              include_documentation=include_documentation))
    return entries


def _broker_synonyms(key: TopicConfigKey, broker: BrokerConfig,
                     dynamic: DynamicLayers) -> list[dict]:
    synonyms = []
    for broker_key in key.broker_synonyms:
        synonyms += _dynamic_synonyms(broker_key, dynamic)
        value = broker[broker_key]
        if broker_key in broker.explicit:
            synonyms.append(_synonym(broker_key, setting_text(value),
                                     ConfigSource.STATIC_BROKER_CONFIG))
        elif value is not None:  # a key without a default (log.retention.ms) is no source
            synonyms.append(_synonym(broker_key, setting_text(value),
                                     ConfigSource.DEFAULT_CONFIG))
    return synonyms


def _dynamic_synonyms(name: str, dynamic: DynamicLayers) -> list[dict]:
    local, default = dynamic
    return [_synonym(name, layer[name], source) for layer, source in (
        (local, ConfigSource.DYNAMIC_BROKER_CONFIG),
        (default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)) if name in layer]


def broker_entries(broker: BrokerConfig, keys: Collection[str] | None = None, *,
                   include_synonyms: bool = False, include_documentation: bool = False,
                   dynamic: DynamicLayers = NO_DYNAMIC) -> list[dict]:
    """Entries for every broker setting (only ``keys`` when given), sorted by name.

    ``broker`` holds the static settings (``server.properties``), ``dynamic`` this
    broker's dynamic configs and the cluster default's: a dynamic value comes first, and
    the settings that may change at run time are not read-only. A Kafka setting pylog
    ignores is listed when a dynamic config sets it."""
    settings: dict[str, BrokerSetting] = {s.name: s for s in broker_settings()}
    ignored = {name for layer in dynamic for name in layer if name not in settings}
    entries = []
    for name in _wanted(sorted(set(settings) | ignored), keys):
        setting = settings.get(name) or _listener_entry(name, settings) or BrokerSetting(
            name, "string", None, "a Kafka setting pylog does not use")
        synonyms = _dynamic_synonyms(name, dynamic)
        static = setting_text(broker[name]) if name in settings else None
        if name in settings and (static is not None or name in broker.explicit or not synonyms):
            synonyms.append(_synonym(name, static, ConfigSource.STATIC_BROKER_CONFIG
                                     if name in broker.explicit else ConfigSource.DEFAULT_CONFIG))
        source = ConfigSource(synonyms[0]["source"])
        entries.append(_entry(name, synonyms[0]["value"], source,
                              read_only=dynamic_kind(name) not in ("dynamic", "ignored"),
                              config_type=setting.type, documentation=setting.description,
                              synonyms=synonyms, include_synonyms=include_synonyms,
                              include_documentation=include_documentation))
    return entries


def _listener_entry(name: str, settings: dict[str, BrokerSetting]) -> BrokerSetting | None:
    """``listener.name.<l>.ssl.*`` set dynamically, described as the setting it overrides."""
    if not is_listener_tls_key(name):
        return None
    base = settings[name.split(".", 3)[3]]
    return BrokerSetting(name, base.type, None, f"{base.description} (this listener)")


def default_broker_entries(default: Mapping[str, str], keys: Collection[str] | None = None,
                           *, include_synonyms: bool = False,
                           include_documentation: bool = False) -> list[dict]:
    """Entries of the cluster-wide dynamic default (broker resource ``""``): only the
    configs set there, as Kafka describes it."""
    settings: dict[str, BrokerSetting] = {s.name: s for s in broker_settings()}
    entries = []
    for name in _wanted(sorted(default), keys):
        setting = settings.get(name)
        source = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        entries.append(_entry(name, default[name], source, read_only=False,
                              config_type=setting.type if setting else "string",
                              documentation=setting.description if setting else "",
                              synonyms=[_synonym(name, default[name], source)],
                              include_synonyms=include_synonyms,
                              include_documentation=include_documentation))
    return entries
