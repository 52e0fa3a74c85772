"""The mirror's settings: command-line flags for the common case, a YAML file for the rest.

The file (``conf/mirror.yaml`` is an example)::

    source:
      alias: dc1                      # names the target topics and the mirror's own groups
      bootstrap_servers: dc1-kafka:9092
      client:                         # librdkafka properties for the source's clients
        security.protocol: SASL_SSL
    target:
      bootstrap_servers: aggregate-kafka:9092
      client: {}
    topics: "orders|payments\\..*"    # a regex (full match), or a list of names
    target_topic: "{source_alias}.{topic}"   # or "{topic}": the same name
    groups: ".*"                      # source consumer groups whose offsets are checkpointed

Flags override the file. Every key is checked at start: a mistake raises ConfigError with
the key's path (``source.client.fetch.wait.max``), never the value (it may be a password).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from pylog.errors import ConfigError

# librdkafka properties the mirror sets itself; a client section may not change them.
OWNED_PROPERTIES = frozenset({
    "bootstrap.servers", "group.id", "transactional.id", "enable.idempotence",
    "isolation.level", "enable.auto.commit", "enable.auto.offset.store",
    "enable.partition.eof"})

INTERNAL_SUFFIX = ".internal"

# librdkafka's own log lines (connection attempts it retries by itself) go to this logger,
# which the CLI shows only with --log-level INFO or DEBUG.
LIBRDKAFKA_LOG = logging.getLogger("pylog.mirror.librdkafka")


@dataclass(frozen=True)
class ClusterSettings:
    """One side of the mirror."""

    bootstrap_servers: str
    """``host:port,...`` of any of the cluster's brokers."""
    client: Mapping[str, str] = field(default_factory=dict)
    """librdkafka properties passed to each of this side's clients (security and tuning)."""

    def client_config(self, **owned: Any) -> dict[str, Any]:
        """librdkafka configuration: the pass-through properties, then the mirror's own."""
        return {**self.client, "bootstrap.servers": self.bootstrap_servers,
                "logger": LIBRDKAFKA_LOG, **owned}


@dataclass(frozen=True)
class MirrorConfig:
    source_alias: str
    """The source cluster's name: in target topic names, headers and the mirror's groups."""
    source: ClusterSettings
    target: ClusterSettings
    topics: re.Pattern
    """Source topics to mirror: a full-match regex (a list of names becomes one)."""
    target_topic: str = "{source_alias}.{topic}"
    """Target topic name pattern: ``{source_alias}`` and ``{topic}`` are replaced."""
    groups: re.Pattern = re.compile(".*")
    """Source consumer groups whose committed offsets are translated into checkpoints."""
    mirror_group: str = "pylog-mirror.{source_alias}"
    """The mirror's consumer group on the source (members share the partitions) and on the
    target (the source positions, committed in each transaction)."""
    transaction_interval_ms: int = 100
    """How long a transaction collects records before its commit."""
    transaction_timeout_ms: int = 30000
    """After this long the target aborts a transaction whose mirror died."""
    checkpoint_interval_ms: int = 5000
    topic_refresh_interval_ms: int = 30000
    """How often the source is listed for new topics and new partitions."""
    progress_interval_ms: int = 5000
    replication_factor: int = -1
    """Of created target topics; -1 takes the target's default.replication.factor."""
    startup_timeout_ms: int = 15000
    """How long the first requests to each cluster may take before the mirror gives up."""
    offset_reset: str = "earliest"
    """Where a source partition without a committed position starts: earliest or latest."""

    @property
    def group_id(self) -> str:
        return self.mirror_group.format(source_alias=self.source_alias)

    @property
    def checkpoints_topic(self) -> str:
        return f"{self.source_alias}.checkpoints{INTERNAL_SUFFIX}"

    @property
    def offset_syncs_topic(self) -> str:
        return f"{self.source_alias}.offset-syncs{INTERNAL_SUFFIX}"

    def target_topic_name(self, topic: str) -> str:
        return self.target_topic.format(source_alias=self.source_alias, topic=topic)

    def transactional_id(self, topic: str, partition: int) -> str:
        """One transactional id per source partition: whoever owns the partition next (a
        restarted mirror, or another member after a rebalance) fences the previous owner."""
        return f"{self.group_id}.{topic}.{partition}"


_INT_KEYS = {f.name: f for f in fields(MirrorConfig) if f.type == "int"}
_TOP_KEYS = {"source", "target", "topics", "target_topic", "groups", "mirror_group",
             "offset_reset", *_INT_KEYS}
_SIDE_KEYS = {"alias", "bootstrap_servers", "client"}


def topics_pattern(value: Any, key: str = "topics") -> re.Pattern:
    """A list of names or a regex, as one full-match pattern."""
    if isinstance(value, (list, tuple)):
        if not value or not all(isinstance(name, str) and name for name in value):
            raise ConfigError(key, "a list of topic names, or a regex")
        return re.compile("|".join(re.escape(name) for name in value))
    if not isinstance(value, str) or not value:
        raise ConfigError(key, "a list of topic names, or a regex")
    try:
        return re.compile(value)
    except re.error as exc:
        raise ConfigError(key, f"not a valid regex: {exc}") from None


def _side(raw: Any, name: str, overrides: Mapping[str, Any],
          required: bool = True) -> tuple[ClusterSettings, str | None]:
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise ConfigError(name, "a mapping (alias, bootstrap_servers, client)")
    for key in raw:
        if key not in _SIDE_KEYS:
            raise ConfigError(f"{name}.{key}", f"unknown key (known: {', '.join(sorted(_SIDE_KEYS))})")
    client = raw.get("client") or {}
    if not isinstance(client, dict):
        raise ConfigError(f"{name}.client", "a mapping of librdkafka properties")
    client = {str(k): _property_value(v) for k, v in client.items()}
    client.update(overrides.get("client") or {})
    for key in client:
        if key in OWNED_PROPERTIES:
            raise ConfigError(f"{name}.client.{key}", "set by the mirror itself")
    servers = overrides.get("bootstrap_servers") or raw.get("bootstrap_servers")
    if not required and not servers:
        servers = ""
    elif not servers or not isinstance(servers, str):
        flag = f"--{name}-bootstrap-server"
        raise ConfigError(f"{name}.bootstrap_servers", f"missing (or give {flag} HOST:PORT)")
    alias = overrides.get("alias") or raw.get("alias")
    return ClusterSettings(servers, client), alias


def _property_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def build_config(raw: Mapping[str, Any] | None, *, source: Mapping[str, Any] | None = None,
                 target: Mapping[str, Any] | None = None,
                 topics: str | None = None, source_required: bool = True) -> MirrorConfig:
    """The config from the parsed YAML (or None) and flag overrides per side
    (``bootstrap_servers``, ``alias``, ``client``) and ``topics``. ``source_required``
    False: the source's servers may be missing (``translate-offsets`` reads the target only).

    Raises ConfigError naming the key of the first mistake.
    """
    raw = dict(raw or {})
    for key in raw:
        if key not in _TOP_KEYS:
            raise ConfigError(key, f"unknown key (known: {', '.join(sorted(_TOP_KEYS))})")
    source_settings, alias = _side(raw.get("source"), "source", source or {}, source_required)
    target_settings, target_alias = _side(raw.get("target"), "target", target or {})
    if target_alias is not None:
        raise ConfigError("target.alias", "only the source has an alias")
    if not alias:
        raise ConfigError("source.alias", "missing (or give --source-alias NAME)")
    if not re.fullmatch(r"[A-Za-z0-9._-]+", alias):
        raise ConfigError("source.alias", "letters, digits, '.', '_' and '-' only")
    if topics is None and "topics" not in raw:
        raise ConfigError("topics", "missing (or give --topics REGEX)")
    pattern = topics_pattern(topics if topics is not None else raw["topics"])
    options: dict[str, Any] = {}
    for key, spec in _INT_KEYS.items():
        if key in raw:
            value = raw[key]
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(key, "an integer")
            if value <= 0 and key != "replication_factor":
                raise ConfigError(key, "must be positive")
            options[key] = value
    for key in ("target_topic", "mirror_group"):
        if key in raw:
            if not isinstance(raw[key], str) or not raw[key]:
                raise ConfigError(key, "a non-empty string")
            options[key] = raw[key]
    if "groups" in raw:
        options["groups"] = topics_pattern(raw["groups"], "groups")
    if "offset_reset" in raw:
        if raw["offset_reset"] not in ("earliest", "latest"):
            raise ConfigError("offset_reset", "earliest or latest")
        options["offset_reset"] = raw["offset_reset"]
    config = MirrorConfig(alias, source_settings, target_settings, pattern, **options)
    try:
        name = config.target_topic_name("t")
        config.group_id  # noqa: B018 -- checks the pattern's fields
    except (KeyError, IndexError, ValueError) as exc:
        raise ConfigError("target_topic", f"unknown field {exc} (use {{source_alias}} and "
                                          "{topic})") from None
    if "{topic}" not in config.target_topic or not name:
        raise ConfigError("target_topic", "must contain {topic}")
    return config


def load_yaml(path: str) -> dict[str, Any]:
    """The mapping in a YAML file; ConfigError naming the file when unreadable."""
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            loaded = yaml.safe_load(f)
    except OSError as exc:
        raise ConfigError("--config", f"cannot read {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError("--config", f"{path}{where}: not valid YAML") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ConfigError("--config", f"{path}: a mapping of settings at the top")
    return loaded


def check_client_properties(config: MirrorConfig) -> None:
    """Let librdkafka check each side's pass-through properties without connecting.

    Raises ConfigError naming ``source.client.KEY`` (or target) for an unknown property or
    an invalid value.
    """
    from pylog.mirror import require_client

    ck = require_client()
    for name, side in (("source", config.source), ("target", config.target)):
        try:
            ck.Producer({**side.client, "log_level": 0})
            continue
        except ck.KafkaException as exc:
            together = exc.args[0].str() if exc.args else str(exc)
        for key, value in side.client.items():   # one at a time: errors name aliases
            try:
                ck.Producer({key: value, "log_level": 0})
            except ck.KafkaException as exc:
                message = exc.args[0].str() if exc.args else str(exc)
                problem = ("no such librdkafka property" if "No such configuration" in message
                           else "invalid value")
                raise ConfigError(f"{name}.client.{key}", problem) from None
        # Each is fine alone, not together (sasl.* without a SASL security.protocol, ...).
        raise ConfigError(f"{name}.client", together)
