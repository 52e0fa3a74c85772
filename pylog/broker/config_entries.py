"""The entries DescribeConfigs answers with: every config of a topic or of this broker,
with its value, where the value comes from, and its synonyms.

A topic config's value is its override (source DYNAMIC_TOPIC_CONFIG) or else the
broker's default, which comes from a ``server.properties`` key (STATIC_BROKER_CONFIG when
that key was set, DEFAULT_CONFIG when it holds Kafka's default). Its synonyms list those
sources in Kafka's order: the override first, then the broker keys, finest unit first::

    retention.ms=3600000 synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=3600000,
                                   DEFAULT_CONFIG:log.retention.hours=168}

A broker's settings are all read-only: pylog reads ``server.properties`` at start only.
Entries are plain dicts in the shape of the DescribeConfigs response's ``configs``.
"""

from __future__ import annotations

from typing import Collection, Mapping

from pylog.broker.config import BrokerConfig, BrokerSetting, broker_settings
from pylog.log import LogConfig
from pylog.log.topic_configs import TOPIC_CONFIGS, TopicConfigKey
from pylog.protocol.configs import ConfigSource, ConfigType

# Words that mark a setting holding a secret; its value is never described. (pylog has no
# such setting yet; SASL and TLS settings will.)
_SENSITIVE_WORDS = ("password", "secret", "jaas")


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
                  include_documentation: bool = False) -> list[dict]:
    """Entries for every topic config (only ``keys`` when given), sorted by name.

    ``defaults`` is the broker's default LogConfig; ``overrides`` the topic's own configs.
    An override pylog does not know (written by another tool) is listed as it is, so it
    can be seen and deleted.
    """
    entries = []
    for name in _wanted(sorted(set(TOPIC_CONFIGS) | set(overrides)), keys):
        key = TOPIC_CONFIGS.get(name) or TopicConfigKey(name, "string", "not a pylog config", ())
        synonyms = []
        if name in overrides:
            synonyms.append(_synonym(name, overrides[name], ConfigSource.DYNAMIC_TOPIC_CONFIG))
        synonyms += _broker_synonyms(key, broker)
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


def _broker_synonyms(key: TopicConfigKey, broker: BrokerConfig) -> list[dict]:
    synonyms = []
    for broker_key in key.broker_synonyms:
        value = broker[broker_key]
        if broker_key in broker.explicit:
            synonyms.append(_synonym(broker_key, setting_text(value),
                                     ConfigSource.STATIC_BROKER_CONFIG))
        elif value is not None:  # a key without a default (log.retention.ms) is no source
            synonyms.append(_synonym(broker_key, setting_text(value),
                                     ConfigSource.DEFAULT_CONFIG))
    return synonyms


def broker_entries(broker: BrokerConfig, keys: Collection[str] | None = None, *,
                   include_synonyms: bool = False,
                   include_documentation: bool = False) -> list[dict]:
    """Entries for every ``server.properties`` setting (only ``keys`` when given), all
    read-only, sorted by name."""
    settings: dict[str, BrokerSetting] = {s.name: s for s in broker_settings()}
    entries = []
    for name in _wanted(settings, keys):
        setting = settings[name]
        value = setting_text(broker[name])
        source = (ConfigSource.STATIC_BROKER_CONFIG if name in broker.explicit
                  else ConfigSource.DEFAULT_CONFIG)
        entries.append(_entry(name, value, source, read_only=True, config_type=setting.type,
                              documentation=setting.description,
                              synonyms=[_synonym(name, value, source)],
                              include_synonyms=include_synonyms,
                              include_documentation=include_documentation))
    return entries
