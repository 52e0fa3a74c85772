"""The authorizer: may this session do this operation on this resource?

On when ``authorizer.class.name`` names it. Kafka's class names are accepted, so an
existing ``server.properties`` works unchanged::

    authorizer.class.name=kafka.security.authorizer.AclAuthorizer
    super.users=User:admin;User:bob
    allow.everyone.if.no.acl.found=false

Decision order, as Kafka's: a super user may do anything; otherwise the ACLs on the
resource decide (``pylog.security.acls.decide``: DENY wins, implied operations); a
resource without any ACL is allowed only with ``allow.everyone.if.no.acl.found=true``.
Denials are logged at DEBUG, one line each.

The ACLs live in ZooKeeper in cluster mode (``ZkAclStore``) and in the log dir standalone
(``FileAclStore``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Protocol

from pylog.errors import ConfigError
from pylog.security.acl_store import AclStore, FileAclStore
from pylog.security.acls import AclBindingFilter, AclOperation, ResourceType, decide

log = logging.getLogger(__name__)

CLASS_NAME_KEY = "authorizer.class.name"
# Every name that turns the ACL authorizer on.
AUTHORIZER_CLASS_NAMES = frozenset({
    "kafka.security.authorizer.AclAuthorizer",
    "kafka.security.auth.SimpleAclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "pylog.security.authorizer.AclAuthorizer",
})


class Principal(Protocol):
    """What the authorizer reads from a connection's ``Session``."""

    principal: str
    client_host: str


def check_class_name(value: str | None) -> None:
    """Raise ConfigError naming ``authorizer.class.name`` unless it is empty or known."""
    if value and value not in AUTHORIZER_CLASS_NAMES:
        raise ConfigError(CLASS_NAME_KEY, f"unknown authorizer {value!r}; use one of "
                                          f"{', '.join(sorted(AUTHORIZER_CLASS_NAMES))}")


def parse_super_users(text: str | None) -> frozenset[str]:
    """``"User:admin;User:bob"`` -> {"User:admin", "User:bob"}.

    Raises ConfigError naming ``super.users`` for an entry that is not Type:name."""
    users = set()
    for part in (text or "").split(";"):
        part = part.strip()
        if not part:
            continue
        kind, sep, name = part.partition(":")
        if not sep or not kind or not name:
            raise ConfigError("super.users", f"expected User:name;User:name..., got {part!r}")
        users.add(part)
    return frozenset(users)


class AclAuthorizer:
    """Decides requests from ``store``'s ACLs.

    Parameters:
        store: where the ACLs are (its cache answers every decision).
        super_users: principals that may do anything (``super.users``).
        allow_if_no_acl: ``allow.everyone.if.no.acl.found``.

    >>> authorizer = AclAuthorizer(FileAclStore(log_dir), {"User:admin"})
    >>> authorizer.authorize(session, AclOperation.READ, ResourceType.TOPIC, "events")
    False
    """

    def __init__(self, store: AclStore, super_users: frozenset[str] | set[str] = frozenset(),
                 allow_if_no_acl: bool = False) -> None:
        self.store = store
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl

    def authorize(self, session: Principal, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        principal, host = session.principal, session.client_host
        if principal in self.super_users:
            return True
        verdict = decide(self.store.applying_to(resource_type, name), principal, host,
                         operation)
        allowed = self.allow_if_no_acl if verdict is None else verdict
        if not allowed:
            log.debug("denied %s from %s: %s on %s:%s", principal, host, operation.label,
                      resource_type.label, name)
        return allowed

    def authorize_any(self, session: Principal, operation: AclOperation,
                      resource_type: ResourceType) -> bool:
        """Whether some resource of the type allows ``operation`` to the session (KIP-679:
        InitProducerId with Write on any topic): some pattern whose ACLs, with the
        wildcard and prefix ACLs that cover it, allow it; with no ACL of the type at all,
        ``allow.everyone.if.no.acl.found``."""
        principal, host = session.principal, session.client_host
        if principal in self.super_users:
            return True
        patterns = {b.pattern for b in self.store.describe(AclBindingFilter(resource_type))}
        if not patterns:
            return self.allow_if_no_acl
        return any(decide(self.store.applying_to(resource_type, p.name), principal, host,
                          operation) for p in patterns)

    def close(self) -> None:
        self.store.close()


def build_authorizer(class_name: str | None, super_users: str | None, allow_if_no_acl: bool,
                     log_dir: Path, zookeeper_connect: str | None = None,
                     session_timeout_ms: int = 18000,
                     connection_timeout_ms: int = 18000) -> AclAuthorizer | None:
    """The broker's authorizer, or None when ``authorizer.class.name`` is empty.

    Raises ConfigError (unknown class name, bad ``super.users``, an unreadable ACL file)
    and ZooKeeperUnavailableError.
    """
    if not class_name:
        return None
    check_class_name(class_name)
    users = parse_super_users(super_users)
    if zookeeper_connect:
        from pylog.security.acl_store_zk import ZkAclStore

        store: AclStore = ZkAclStore(zookeeper_connect, session_timeout_ms,
                                     connection_timeout_ms)
    else:
        try:
            store = FileAclStore(log_dir)
        except ValueError as error:
            raise ConfigError(CLASS_NAME_KEY, str(error)) from None
    log.info("authorizer on: %d super users, allow.everyone.if.no.acl.found=%s",
             len(users), str(allow_if_no_acl).lower())
    return AclAuthorizer(store, users, allow_if_no_acl)
