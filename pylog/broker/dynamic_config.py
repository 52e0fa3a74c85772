"""Dynamic broker configs: settings changed by AlterConfigs while the broker runs.

A setting's value comes from the first of these that has it, as in Kafka (KIP-226):

1. this broker's dynamic configs (AlterConfigs on broker resource ``"<id>"``);
2. the cluster-wide dynamic default (broker resource ``""``), shared by every broker;
3. ``server.properties`` and ``--override``;
4. Kafka's default.

Only :data:`~pylog.broker.config.DYNAMIC_SETTINGS` can change this way: the topics'
defaults (``log.retention.ms``, ``log.cleanup.policy``, ``message.max.bytes``...), the
connection limits and the cleaner's threads. Kafka settings pylog ignores and Kafka lets
change (``num.io.threads``...) are taken and stay ignored. Any other key is refused,
naming it.

A change is checked whole (the broker's settings with it must make a valid config) before
it is written, then applied at once: ``DynamicBrokerConfig`` hands the old and new
effective :class:`~pylog.broker.config.BrokerConfig` to every registered reconfigure
callback. The store's watch does the same on every other broker. A value that does not
parse on this broker (written by another tool) is left out with a warning.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

from pylog.broker.config import (
    BrokerConfig, dynamic_kind, is_listener_tls_key, unknown_setting)
from pylog.broker.config_entries import is_sensitive
from pylog.broker.dynamic_store import DEFAULT_ENTITY, BrokerConfigStore
from pylog.errors import ConfigError, InvalidConfigError, InvalidRequestError

log = logging.getLogger(__name__)

Configs = dict[str, str]
Reconfigure = Callable[[BrokerConfig, BrokerConfig], None]


class DynamicBrokerConfig:
    """This broker's effective settings, kept current with the dynamic configs.

    >>> dynamic = DynamicBrokerConfig(static, store, broker_id=0)
    >>> dynamic.add_reconfigurable(lambda old, new: ...)
    >>> dynamic.alter("", lambda current: {**current, "log.retention.ms": "3600000"})
    >>> dynamic.current["log.retention.ms"]
    3600000
    """

    def __init__(self, static: BrokerConfig, store: BrokerConfigStore, broker_id: int) -> None:
        self.static = static
        self.store = store
        self.entity = str(broker_id)
        self._lock = threading.RLock()
        self._reconfigurables: list[Reconfigure] = []
        self.layers: dict[str, Configs] = {}
        self.current = static
        self.log_config = static.log_config
        self._load()
        store.watch(self.refresh)

    def add_reconfigurable(self, callback: Reconfigure, since: BrokerConfig | None = None
                           ) -> None:
        """Call ``callback(old, new)`` after each change of the effective settings; and
        at once if they changed after ``since``, the settings its part was built with."""
        with self._lock:
            self._reconfigurables.append(callback)
            if since is not None and since.values != self.current.values:
                callback(since, self.current)

    def refresh(self, force: bool = False) -> None:
        """Read the store's configs again and apply what changed (``force``: call the
        reconfigure callbacks even if nothing did, so that files named again, such as a
        keystore replaced in place, are read again)."""
        with self._lock:
            old = self.current
            self._load()
            if self.current.values == old.values and not force:
                return
            changed = {key: self.current[key] for key in self.current.values
                       if self.current[key] != old.values.get(key)}
            if changed:
                log.info("dynamic broker configs applied: %s", ", ".join(
                    f"{key}={_shown(key, value)}" for key, value in sorted(changed.items())))
            for callback in list(self._reconfigurables):
                try:
                    callback(old, self.current)
                except Exception:  # noqa: BLE001 -- one part failing must not stop the rest
                    log.exception("applying dynamic broker configs failed in %r", callback)

    def _load(self) -> None:
        layers = {DEFAULT_ENTITY: self.store.configs(DEFAULT_ENTITY),
                  self.entity: self.store.configs(self.entity)}
        combined = {**layers[DEFAULT_ENTITY], **layers[self.entity]}
        before = {**self.layers.get(DEFAULT_ENTITY, {}), **self.layers.get(self.entity, {})}
        for key, value in combined.items():
            if dynamic_kind(key) == "ignored" and before.get(key) != value:
                log.warning("%s=%s: a Kafka setting pylog does not use; ignored", key,
                            _shown(key, value))
        try:
            current = self.static.with_dynamic(combined)
        except ConfigError:
            current = self._usable(combined)
        self.layers, self.current = layers, current
        self.log_config = current.log_config

    def _usable(self, combined: Configs) -> BrokerConfig:
        """The settings with as many of ``combined`` as make a valid configuration on this
        broker, taken one at a time; each left out is logged (a value written by another
        tool, or valid where it was written but not with this broker's own settings)."""
        kept: Configs = {}
        current = self.static
        for key, value in combined.items():
            try:
                current = self.static.with_dynamic({**kept, key: value})
            except ConfigError as error:
                log.warning("dynamic broker config %s=%s left out: %s", key,
                            _shown(key, value), error)
                continue
            kept[key] = value
        return current

    # -- AlterConfigs ------------------------------------------------------------------------

    def configs(self, entity: str) -> Configs:
        """The dynamic configs set on ``entity`` (an id, or ``""`` for the default)."""
        return dict(self.store.configs(_entity(entity)))

    def alter(self, entity: str, change: Callable[[Configs], Configs],
              validate_only: bool = False) -> Configs:
        """Replace ``entity``'s dynamic configs with ``change(current)``, checked first.

        Raises InvalidRequestError for a setting that needs a restart, InvalidConfigError
        for an unknown key or a bad value (naming it), and nothing is written then.
        """
        entity = _entity(entity)

        def checked(current: Configs) -> Configs:
            proposed = change(current)
            self.check(entity, proposed)
            return proposed

        if validate_only:
            return checked(self.store.configs(entity))
        configs = self.store.alter(entity, checked)
        log.info("dynamic configs of %s are now %s",
                 "the cluster default" if entity == DEFAULT_ENTITY else f"broker {entity}",
                 {key: _shown(key, value) for key, value in configs.items()})
        self.refresh(force=True)
        return configs

    def check(self, entity: str, proposed: Configs) -> None:
        """Raise InvalidRequestError or InvalidConfigError if ``proposed`` cannot be
        ``entity``'s dynamic configs on this broker."""
        static = [key for key in proposed if dynamic_kind(key) == "static"]
        if static:
            hint = ("; a listener's TLS settings change per broker as "
                    f"listener.name.<listener>.{static[0]}" if static[0].startswith("ssl.")
                    else "; set in server.properties and restart the broker")
            raise InvalidRequestError(
                f"{', '.join(sorted(static))}: cannot be changed while the broker runs{hint}")
        secrets = [key for key in proposed if is_sensitive(key)]
        if secrets and not self.store.keeps_secrets:
            raise InvalidRequestError(
                f"{secrets[0]}: pylog does not keep passwords in ZooKeeper, where anyone who "
                f"can read it could read them; use a keystore whose key has the password in "
                f"server.properties, or none")
        tls = [key for key in proposed if is_listener_tls_key(key)]
        if tls and entity == DEFAULT_ENTITY:
            raise InvalidRequestError(f"{tls[0]}: a listener's TLS settings are set per "
                                      f"broker, not as the cluster default")
        unknown = [key for key in proposed if dynamic_kind(key) == "unknown"]
        if unknown:
            raise InvalidConfigError(f"{unknown[0]}: {unknown_setting(unknown[0])}")
        layers = dict(self.layers)
        layers[entity] = proposed
        try:
            self.static.with_dynamic(proposed)  # valid alone, and with this broker's others
            config = self.static.with_dynamic({**layers[DEFAULT_ENTITY], **layers[self.entity]})
            for listener in config.listeners:
                if listener.uses_tls:  # the files must load: a certificate that does not
                    config.tls_settings(listener.name).server_context()  # is refused now
        except ConfigError as error:
            raise InvalidConfigError(f"{error.key}: {error.problem}") from None

    def close(self) -> None:
        self.store.close()


def _shown(key: str, value: object) -> object:
    """A value as logged: never a password."""
    return "(secret)" if is_sensitive(key) else value


def _entity(name: str) -> str:
    return DEFAULT_ENTITY if name in ("", DEFAULT_ENTITY) else name.strip()
