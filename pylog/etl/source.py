"""The loader's source cluster on a secured deployment: client settings in ``loader.yaml``,
secrets only by reference, resolved where a client is made.

The ``source:`` section takes the client's security settings by their librdkafka names
(see :mod:`pylog.client.security`). A secret is never written there: ``sasl.password``
and ``ssl.key.password`` are given as ``<key>_env: VARIABLE`` or ``<key>_file: PATH``::

    source:
      bootstrap_servers: broker-1:9093,broker-2:9093
      security.protocol: SASL_SSL
      sasl.mechanism: SCRAM-SHA-256
      sasl.username: loader
      sasl.password_env: PYLOG_SOURCE_PASSWORD     # or sasl.password_file: /run/secrets/pylog
      ssl.ca.location: /etc/pylog/ca.pem

Or every client setting comes from an Airflow connection (conn type ``kafka``, the Apache
Kafka provider's convention: its extra JSON holds ``bootstrap.servers`` and the client
settings; ``login``/``password`` stand in for ``sasl.username``/``sasl.password``)::

    source:
      airflow_conn_id: pylog_source

The loader reads that connection from ``AIRFLOW_CONN_<ID>`` in its environment (JSON or
URI form, as Airflow writes them); the DAGs' tasks put it there from Airflow's own store
(:mod:`pylog.orchestration.connections`), so the loader itself never imports Airflow.

The configuration (and so the plan, the task specs Spark pickles to its executors, and
anything logged) holds only the references. :func:`resolve_source` reads them when a
client is made: on the driver for planning, publishing and ``pylog status``, and on each
executor for its own consumer.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping
from urllib.parse import parse_qsl, unquote, urlsplit

from pylog.client.security import SASL_MECHANISMS, SECURITY_PROTOCOLS, SecurityConfig
from pylog.errors import ConfigError

if TYPE_CHECKING:
    from pylog.etl.config import SourceConfig

SECRET_KEYS = ("sasl.password", "ssl.key.password")
"""Settings that hold a secret: only ``<key>_env`` or ``<key>_file`` in loader.yaml."""
SETTING_KEYS = ("security.protocol", "sasl.mechanism", "sasl.username", "ssl.ca.location",
                "ssl.certificate.location", "ssl.key.location",
                "ssl.endpoint.identification.algorithm", "ssl.truststore.location",
                "ssl.truststore.type")
"""Security settings written as they are (no secret in them)."""
REFERENCE_KEYS = tuple(f"{key}_{kind}" for key in SECRET_KEYS for kind in ("env", "file"))
LITERAL_SECRET_KEYS = SECRET_KEYS + ("sasl.jaas.config",)
SOURCE_SECURITY_KEYS = SETTING_KEYS + REFERENCE_KEYS + LITERAL_SECRET_KEYS + ("airflow_conn_id",)
"""Every key of ``source:`` this module reads (the literal secrets only to refuse them)."""


@dataclass(frozen=True, slots=True)
class SecretReference:
    """Where a secret setting is read from: an environment variable or a file."""

    key: str
    """The setting, e.g. ``sasl.password``."""
    env: str | None = None
    """Name of the environment variable holding it."""
    file: str | None = None
    """Path of a file holding it (one trailing newline is dropped)."""

    def read(self, environ: Mapping[str, str]) -> str:
        """The secret; ConfigError naming the reference (never the value) when missing."""
        if self.env is not None:
            value = environ.get(self.env)
            if not value:
                raise ConfigError(f"source.{self.key}_env",
                                  f"environment variable {self.env} is not set or is empty")
            return value
        try:
            value = Path(self.file).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"source.{self.key}_file",
                              f"cannot read {self.file}: {exc.strerror or exc}") from None
        value = value[:-1] if value.endswith("\n") else value
        if not value:
            raise ConfigError(f"source.{self.key}_file", f"{self.file} is empty")
        return value

    def __str__(self) -> str:
        return f"{self.key} from ${self.env}" if self.env else f"{self.key} from {self.file}"


@dataclass(frozen=True, slots=True)
class SourceSecurity:
    """The ``source:`` section's security: settings, secret references, or a connection."""

    settings: tuple[tuple[str, str], ...] = ()
    """Security settings without secrets, by librdkafka name."""
    secrets: tuple[SecretReference, ...] = ()
    """Where each secret setting is read from."""
    airflow_conn_id: str | None = None
    """An Airflow connection holding every client setting instead (see the module doc)."""

    @property
    def environment_variables(self) -> tuple[str, ...]:
        """Names of the environment variables the secrets are read from (for executors)."""
        names = [s.env for s in self.secrets if s.env]
        if self.airflow_conn_id:
            names.append(connection_variable(self.airflow_conn_id))
        return tuple(names)


@dataclass(frozen=True, slots=True)
class ResolvedSource:
    """What a client of the source needs, secrets read (never pickled, logged or stored)."""

    bootstrap_servers: tuple[str, ...]
    security: SecurityConfig

    def client_arguments(self, source: "SourceConfig") -> tuple[list[str], dict[str, Any]]:
        """``(bootstrap servers, keyword arguments)`` for SimpleConsumer and friends."""
        return list(self.bootstrap_servers), {"client_id": source.client_id,
                                              "request_timeout_ms": source.request_timeout_ms,
                                              "security": self.security}


def parse_source_security(raw: Mapping[str, Any], has_bootstrap: bool) -> SourceSecurity:
    """The security keys of a parsed ``source:`` mapping; ConfigError names the key."""
    for key in LITERAL_SECRET_KEYS:
        if key in raw:
            refs = " or ".join(f"{key}_{kind}" for kind in ("env", "file")
                               if f"{key}_{kind}" in REFERENCE_KEYS) or "sasl.password_env"
            raise ConfigError(f"source.{key}", "a secret is never written in the loader's "
                              f"configuration: give {refs} (a variable or file holding it), "
                              "or source.airflow_conn_id")
    conn_id = raw.get("airflow_conn_id")
    given = [k for k in SETTING_KEYS + REFERENCE_KEYS if k in raw]
    if conn_id is not None:
        if not isinstance(conn_id, str) or not conn_id.strip():
            raise ConfigError("source.airflow_conn_id", f"{conn_id!r} is not a connection id")
        for key in given + (["bootstrap_servers"] if has_bootstrap else []):
            raise ConfigError(f"source.{key}", "the Airflow connection source.airflow_conn_id "
                              "holds the client settings; give one or the other")
        return SourceSecurity(airflow_conn_id=conn_id.strip())
    settings = tuple((key, str(raw[key]).strip()) for key in SETTING_KEYS if key in raw)
    secrets = []
    for key in SECRET_KEYS:
        env, file = raw.get(f"{key}_env"), raw.get(f"{key}_file")
        if env is not None and file is not None:
            raise ConfigError(f"source.{key}_file", f"give {key}_env or {key}_file, not both")
        if env is not None:
            if not isinstance(env, str) or not env.strip() or "=" in env:
                raise ConfigError(f"source.{key}_env", f"{env!r} is not an environment variable name")
            secrets.append(SecretReference(key, env=env.strip()))
        elif file is not None:
            if not isinstance(file, str) or not file.strip():
                raise ConfigError(f"source.{key}_file", f"{file!r} is not a path")
            secrets.append(SecretReference(key, file=file.strip()))
    security = SourceSecurity(settings, tuple(secrets))
    _check_settings(dict(settings), {s.key for s in secrets})
    return security


def _check_settings(settings: Mapping[str, str], secrets: set[str]) -> None:
    # What can be checked without the secrets and files (the DAGs parse this config where
    # neither may be present); the rest is checked by SecurityConfig when resolved.
    protocol = settings.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ConfigError("source.security.protocol",
                          f"expected one of {', '.join(SECURITY_PROTOCOLS)}, got {protocol!r}")
    if protocol.startswith("SASL_"):
        mechanism = settings.get("sasl.mechanism", "").upper()
        if mechanism not in SASL_MECHANISMS:
            raise ConfigError("source.sasl.mechanism", f"required with security.protocol="
                              f"{protocol}: one of {', '.join(SASL_MECHANISMS)}")
        if not settings.get("sasl.username"):
            raise ConfigError("source.sasl.username", f"required with security.protocol={protocol}")
        if "sasl.password" not in secrets:
            raise ConfigError("source.sasl.password_env", f"required with security.protocol="
                              f"{protocol} (or sasl.password_file)")


def resolve_source(source: "SourceConfig", environ: Mapping[str, str] | None = None) -> ResolvedSource:
    """Read the source's secrets (or its Airflow connection) from ``environ`` (default
    ``os.environ``) and the files named; ConfigError names the key of what is missing or
    wrong, never a secret."""
    env = os.environ if environ is None else environ
    security = source.security
    if security.airflow_conn_id:
        settings = connection_settings(security.airflow_conn_id, env)
        servers = settings.pop("bootstrap.servers", "")
        bootstrap = tuple(s.strip() for s in servers.split(",") if s.strip())
        if not bootstrap:
            raise ConfigError("source.airflow_conn_id", f"connection {security.airflow_conn_id} "
                              "gives no bootstrap.servers (in its extra, or as host and port)")
        key = "source.airflow_conn_id"
    else:
        settings = dict(security.settings)
        settings.update({s.key: s.read(env) for s in security.secrets})
        bootstrap, key = source.bootstrap_servers, "source"
    try:
        config = SecurityConfig.from_mapping(settings)
    except ConfigError as exc:
        raise ConfigError(f"{key}.{exc.key}" if key == "source" else key,
                          exc.problem if key == "source" else f"{exc.key}: {exc.problem}") from None
    return ResolvedSource(bootstrap, config)


SPARK_DEFAULT_REDACTION = r"(?i)secret|password|token|access[.]?key"


def executor_spark_conf(source: "SourceConfig", master: str, redaction_regex: str | None,
                        environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Spark settings that give executors the source's secret variables from the driver's
    environment, on a cluster master (local executors share the driver's environment).

    Set on the session, never on the spark-submit command line; ``spark.redaction.regex``
    is widened to these variables so the UI and the event log show them redacted.
    """
    env = os.environ if environ is None else environ
    names = [n for n in source.security.environment_variables if env.get(n)]
    if master.startswith("local") or not names:
        return {}
    settings = {f"spark.executorEnv.{name}": env[name] for name in names}
    regex = redaction_regex or SPARK_DEFAULT_REDACTION
    settings["spark.redaction.regex"] = "|".join([regex, *(re.escape(n) for n in names)])
    return settings


def connection_variable(conn_id: str) -> str:
    """The environment variable Airflow reads a connection from: ``AIRFLOW_CONN_<ID>``."""
    return f"AIRFLOW_CONN_{conn_id.upper()}"


# Keys of a Kafka connection's extra that are not client security settings: ignored.
_NOT_SECURITY = ("bootstrap.servers",)


def connection_settings(conn_id: str, environ: Mapping[str, str]) -> dict[str, str]:
    """``bootstrap.servers`` and the security settings of a ``kafka`` Airflow connection,
    from ``AIRFLOW_CONN_<ID>`` (JSON or URI form). Other client settings in its extra
    (``group.id`` ...) are ignored. ConfigError never shows a value."""
    name = connection_variable(conn_id)
    text = environ.get(name)
    if not text:
        raise ConfigError("source.airflow_conn_id", f"connection {conn_id} not found: {name} "
                          "is not set (the DAGs' tasks set it from Airflow's connection)")
    fields = _connection_fields(conn_id, name, text.strip())
    conn_type = fields.get("conn_type")
    if conn_type and conn_type != "kafka":
        raise ConfigError("source.airflow_conn_id",
                          f"connection {conn_id} has conn_type {conn_type!r}, expected kafka")
    extra = fields.get("extra") or {}
    if isinstance(extra, str):
        try:
            extra = json.loads(extra) if extra.strip() else {}
        except ValueError:
            raise ConfigError("source.airflow_conn_id",
                              f"connection {conn_id}: its extra is not JSON") from None
    if not isinstance(extra, dict):
        raise ConfigError("source.airflow_conn_id", f"connection {conn_id}: its extra is not a JSON object")
    settings = {str(k): str(v) for k, v in extra.items()
                if v is not None and (str(k) in _NOT_SECURITY
                                      or str(k).startswith(("security.", "sasl.", "ssl.")))}
    if "bootstrap.servers" not in settings and fields.get("host"):
        port = fields.get("port")
        settings["bootstrap.servers"] = f"{fields['host']}:{port}" if port else str(fields["host"])
    if fields.get("login"):
        settings.setdefault("sasl.username", str(fields["login"]))
    if fields.get("password"):
        settings.setdefault("sasl.password", str(fields["password"]))
    return settings


def _connection_fields(conn_id: str, name: str, text: str) -> dict[str, Any]:
    if text.startswith("{"):
        try:
            fields = json.loads(text)
        except ValueError:
            raise ConfigError("source.airflow_conn_id", f"{name} is neither JSON nor a URI") from None
        if not isinstance(fields, dict):
            raise ConfigError("source.airflow_conn_id", f"{name} is not a JSON object")
        return fields
    parts = urlsplit(text)
    if not parts.scheme:
        raise ConfigError("source.airflow_conn_id", f"{name} is neither JSON nor a URI")
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    extra: Any = query
    if "__extra__" in query:
        extra = query["__extra__"]
    try:
        port = parts.port
    except ValueError:
        raise ConfigError("source.airflow_conn_id", f"{name}: the port is not a number") from None
    return {"conn_type": parts.scheme.replace("-", "_"),
            "host": unquote(parts.hostname or "") or None, "port": port,
            "login": unquote(parts.username) if parts.username else None,
            "password": unquote(parts.password) if parts.password else None,
            "extra": extra}
