"""Group configs (KIP-848's ``ConfigResource.Type.GROUP``, 32): DescribeConfigs,
AlterConfigs and IncrementalAlterConfigs of a group, as Kafka 4.4 answers them.

The settings are Kafka's, with its defaults and limits: the session timeouts, heartbeat
intervals and assignment intervals of the consumer, share and streams group protocols,
the share groups' record locks, delivery limit, offset reset and isolation, the streams
groups' assignor and standby replicas, and the dead-letter queue settings. Kafka applies
them to groups of those protocols only; pylog's groups are all classic (JoinGroup and
SyncGroup), which ignore them in Kafka too, so here they are kept and described for the
admin tools (``kafka-configs.sh --entity-type groups``, AdminClient) and change nothing
else. A group needs no existence to have configs; an unknown name or a value out of range
answers INVALID_CONFIG naming it, the empty group name INVALID_REQUEST.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from pylog.errors import InvalidConfigError
from pylog.protocol.configs import ConfigSource, ConfigType

GROUP_CONFIG_SOURCE = int(ConfigSource.GROUP_CONFIG)
DEFAULT_CONFIG_SOURCE = int(ConfigSource.DEFAULT_CONFIG)
_DURATION = re.compile(r"^by_duration:P(?:\d+D)?(?:T(?:\d+H)?(?:\d+M)?(?:\d+(?:\.\d+)?S)?)?$")


@dataclass(frozen=True)
class GroupSetting:
    name: str
    type: ConfigType
    default: str
    synonym: str  # the broker setting its default comes from, as Kafka names it
    check: Callable[[str, str], None]  # raises InvalidConfigError
    doc: str


def _int(low: int, high: int, at_least: int, upper_only: bool = False
         ) -> Callable[[str, str], None]:
    """An int in [low, high]; below ``at_least`` is the type's own error (Kafka's
    ConfigDef), the rest of the range the group coordinator's (``upper_only``: worded as
    an upper bound)."""
    def check(name: str, value: str) -> None:
        try:
            number = int(value.strip())
        except ValueError:
            raise InvalidConfigError(f"Invalid value {value} for configuration {name}: "
                                     "Not a number of type INT") from None
        if number < at_least:
            raise InvalidConfigError(f"Invalid value {value} for configuration {name}: "
                                     f"Value must be at least {at_least}")
        if number > high and upper_only:
            raise InvalidConfigError(f"{name} must be less than or equal to {high}")
        if not low <= number <= high:
            raise InvalidConfigError(f"{name} must be in the range {low} to {high} inclusive.")
    return check


def _one_of(*choices: str) -> Callable[[str, str], None]:
    def check(name: str, value: str) -> None:
        if value not in choices:
            raise InvalidConfigError(f"Invalid value {value} for configuration {name}: "
                                     f"String must be one of: {', '.join(choices)}")
    return check


def _bool(name: str, value: str) -> None:
    if value.strip().lower() not in ("true", "false"):
        raise InvalidConfigError(f"Invalid value {value} for configuration {name}: "
                                 "Expected value to be either true or false")


def _offset_reset(name: str, value: str) -> None:
    if value in ("earliest", "latest") or _DURATION.match(value):
        return
    raise InvalidConfigError(
        f"Invalid value {value} for configuration {name}: Invalid value `{value}` for "
        f"configuration {name}. The value must be either 'earliest', 'latest' or of the "
        "format 'by_duration:<PnDTnHnMn.nS>'.")


def _assignor(name: str, value: str) -> None:
    if value != "sticky":
        raise InvalidConfigError(f"{name} '{value}' is not a registered task assignor. "
                                 "Registered assignors are: [sticky].")


def _any(name: str, value: str) -> None:
    return None


def _setting(name: str, kind: ConfigType, default: str, check, doc: str,
             synonym: str | None = None) -> GroupSetting:
    return GroupSetting(name, kind, default, synonym or f"group.{name}", check, doc)


I, S, B, L = ConfigType.INT, ConfigType.STRING, ConfigType.BOOLEAN, ConfigType.LIST
GROUP_SETTINGS: dict[str, GroupSetting] = {s.name: s for s in (
    _setting("consumer.session.timeout.ms", I, "45000", _int(45000, 60000, 1),
             "consumer group members' session timeout"),
    _setting("consumer.heartbeat.interval.ms", I, "5000", _int(5000, 15000, 1),
             "consumer group members' heartbeat interval"),
    _setting("consumer.assignment.interval.ms", I, "1000", _int(0, 15000, 0),
             "how often a consumer group's assignment may change"),
    _setting("share.session.timeout.ms", I, "45000", _int(45000, 60000, 1),
             "share group members' session timeout"),
    _setting("share.heartbeat.interval.ms", I, "5000", _int(5000, 15000, 1),
             "share group members' heartbeat interval"),
    _setting("share.assignment.interval.ms", I, "1000", _int(0, 15000, 0),
             "how often a share group's assignment may change"),
    _setting("share.record.lock.duration.ms", I, "30000", _int(15000, 60000, 1000),
             "how long a share group member holds a record"),
    _setting("share.delivery.count.limit", I, "5", _int(2, 10, 2),
             "deliveries of a record to a share group before it is archived"),
    _setting("share.partition.max.record.locks", I, "2000", _int(100, 4000, 100),
             "records of a partition a share group may hold at once"),
    _setting("share.auto.offset.reset", S, "latest", _offset_reset,
             "where a share group starts: earliest, latest or by_duration:<ISO-8601>",
             synonym="share.auto.offset.reset"),
    _setting("share.isolation.level", S, "read_uncommitted",
             _one_of("read_committed", "read_uncommitted"),
             "what a share group reads of transactions", synonym="share.isolation.level"),
    _setting("share.renew.acknowledge.enable", B, "true", _bool,
             "whether share group members may renew a record's lock",
             synonym="share.renew.acknowledge.enable"),
    _setting("streams.session.timeout.ms", I, "45000", _int(45000, 60000, 1),
             "streams group members' session timeout"),
    _setting("streams.heartbeat.interval.ms", I, "5000", _int(5000, 15000, 1),
             "streams group members' heartbeat interval"),
    _setting("streams.assignment.interval.ms", I, "1000", _int(0, 15000, 0),
             "how often a streams group's assignment may change"),
    _setting("streams.initial.rebalance.delay.ms", I, "3000", _int(0, 2**31 - 1, 0),
             "how long a new streams group waits for members"),
    _setting("streams.num.standby.replicas", I, "0", _int(0, 2, 0, upper_only=True),
             "standby replicas of a streams group's tasks"),
    _setting("streams.assignor.name", S, "sticky", _assignor,
             "a streams group's task assignor", synonym="group.streams.assignors"),
    _setting("streams.rack.aware.assignment.tags", L, "", _any,
             "client tags a streams group spreads standbys over"),
    _setting("errors.deadletterqueue.topic.name", S, "", _any,
             "where a share group sends records it gives up on",
             synonym="errors.deadletterqueue.topic.name"),
    _setting("errors.deadletterqueue.copy.record.enable", B, "false", _bool,
             "whether the dead-letter queue gets the records' contents",
             synonym="errors.deadletterqueue.copy.record.enable"),
)}


def check_group_configs(configs: dict[str, str]) -> None:
    """InvalidConfigError naming the first unknown or bad config, as Kafka words it."""
    for name, value in configs.items():
        setting = GROUP_SETTINGS.get(name)
        if setting is None:
            raise InvalidConfigError(f"Unknown group config name: {name}")
        setting.check(name, value)
    for protocol in ("consumer", "share", "streams"):
        session = int(configs.get(f"{protocol}.session.timeout.ms",
                                  GROUP_SETTINGS[f"{protocol}.session.timeout.ms"].default))
        heartbeat = int(configs.get(f"{protocol}.heartbeat.interval.ms",
                                    GROUP_SETTINGS[f"{protocol}.heartbeat.interval.ms"].default))
        if session <= heartbeat:
            raise InvalidConfigError(f"{protocol}.session.timeout.ms must be greater than "
                                     f"{protocol}.heartbeat.interval.ms")


def group_entries(overrides: dict[str, str], keys: list[str] | None, *,
                  include_synonyms: bool, include_documentation: bool) -> list[dict]:
    """DescribeConfigs entries of a group with ``overrides`` (``keys``: only those)."""
    entries = []
    for name, setting in GROUP_SETTINGS.items():
        if keys is not None and name not in keys:
            continue
        default = {"name": setting.synonym, "value": setting.default,
                   "source": DEFAULT_CONFIG_SOURCE}
        if name in overrides:
            value, source = overrides[name], GROUP_CONFIG_SOURCE
            synonyms = [{"name": name, "value": value, "source": source}, default]
        else:
            value, source, synonyms = setting.default, DEFAULT_CONFIG_SOURCE, [default]
        entries.append({
            "name": name, "value": value, "read_only": False, "config_source": source,
            "is_default": False, "is_sensitive": False,
            "synonyms": synonyms if include_synonyms else [],
            "config_type": int(setting.type),
            "documentation": setting.doc if include_documentation else None})
    return entries
