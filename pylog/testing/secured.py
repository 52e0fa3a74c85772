"""A standalone broker secured as production clusters are, for tests of secured clients.

Its only listener is SASL_SSL (SCRAM, certificates from :mod:`pylog.testing.certs`), the
authorizer is on with ``allow.everyone.if.no.acl.found=false``, ``User:admin`` is a
super user, and the users and ACLs are written offline before it starts, the way an
operator sets up the first ones (``pylog users add --log-dirs``, the ACL file)::

    with SecuredBroker(tmp_path, {"admin": "a-Secret", "loader": "l-Secret"},
                       acls=[read_topic("loader", "events")]) as broker:
        Producer(broker.bootstrap, security=broker.security("admin"))
        broker.client_settings("loader")   # librdkafka names, with the password
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Iterable, Mapping

from pylog.client.security import SecurityConfig
from pylog.security.acl_store import FileAclStore
from pylog.security.acls import (
    AccessControlEntry, AclBinding, AclOperation, AclPermission, PatternType, ResourcePattern,
    ResourceType)
from pylog.testing.broker import HOST, BrokerProcess
from pylog.testing.certs import TestCertificates

_PASSWORD_VARIABLE = "PYLOG_TEST_USER_PASSWORD"


def allow(user: str, resource_type: ResourceType, name: str, *operations: AclOperation,
          prefixed: bool = False) -> list[AclBinding]:
    """ALLOW bindings of ``operations`` on one resource for ``User:<user>`` from any host."""
    pattern = ResourcePattern(resource_type, name,
                              PatternType.PREFIXED if prefixed else PatternType.LITERAL)
    return [AclBinding(pattern, AccessControlEntry(f"User:{user}", "*", operation,
                                                   AclPermission.ALLOW))
            for operation in operations]


class SecuredBroker:
    """One broker process with a single SASL_SSL listener (see the module docstring).

    Parameters:
        base_dir: holds ``certs/`` and the broker's directory.
        users: user name -> password, added offline with ``pylog users add``.
        acls: bindings written to the broker's ACL file before it starts.
        mechanism: the SCRAM mechanism the users get and clients use.
        overrides: more ``server.properties`` settings.
    """

    def __init__(self, base_dir: Path, users: Mapping[str, str], acls: Iterable[AclBinding] = (),
                 mechanism: str = "SCRAM-SHA-256", overrides: Mapping[str, object] | None = None) -> None:
        base = Path(base_dir)
        self.users = dict(users)
        self.mechanism = mechanism
        self.certs = TestCertificates.create(base / "certs")
        self.process = BrokerProcess(base / "broker", {
            "sasl.enabled.mechanisms": mechanism,
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "allow.everyone.if.no.acl.found": "false", "super.users": "User:admin",
            "num.partitions": "1", "offsets.topic.num.partitions": "1",
            "offsets.topic.replication.factor": "1", "group.initial.rebalance.delay.ms": "0",
            **self.certs.broker_settings(), **(overrides or {})})
        # Only the SASL_SSL listener, on the port BrokerProcess picked (and waits for).
        self.process.overrides["listeners"] = f"SASL_SSL://{HOST}:{self.process.port}"
        self.process.log_dir.mkdir(parents=True, exist_ok=True)
        for user, password in self.users.items():
            self._add_user(user, password)
        acls = list(acls)
        if acls:
            FileAclStore(self.process.log_dir).create(acls)

    def _add_user(self, user: str, password: str) -> None:
        done = subprocess.run(
            [sys.executable, "-m", "pylog.cli.main", "users", "add", "--user", user,
             "--password-env", _PASSWORD_VARIABLE, "--mechanism", self.mechanism,
             "--log-dirs", str(self.process.log_dir)],
            env={**os.environ, _PASSWORD_VARIABLE: password}, capture_output=True, text=True,
            timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"pylog users add {user} failed: {done.stderr.strip()}")

    @property
    def bootstrap(self) -> str:
        return self.process.bootstrap

    @property
    def ca_location(self) -> str:
        return str(self.certs.truststore)

    def client_settings(self, user: str, with_password: bool = True) -> dict[str, str]:
        """librdkafka settings of ``user`` (without ``sasl.password`` if not ``with_password``)."""
        settings = {"security.protocol": "SASL_SSL", "sasl.mechanism": self.mechanism,
                    "sasl.username": user, "ssl.ca.location": self.ca_location}
        if with_password:
            settings["sasl.password"] = self.users[user]
        return settings

    def security(self, user: str) -> SecurityConfig:
        """The client SecurityConfig of ``user``."""
        return SecurityConfig.from_mapping(self.client_settings(user))

    def start(self) -> "SecuredBroker":
        self.process.start()
        return self

    def stop(self) -> None:
        self.process.stop()

    def __enter__(self) -> "SecuredBroker":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
