"""ACLs as Kafka defines them: resource patterns, entries, bindings, filters and matching.

Pure: no I/O. The wire codes are Kafka's (``ResourceType``, ``PatternType``,
``AclOperation``, ``AclPermissionType``); the names are the ones Kafka writes into
ZooKeeper and ``kafka-acls.sh`` prints.

A binding is a pattern plus an entry::

    AclBinding(ResourcePattern(ResourceType.TOPIC, "logs.", PatternType.PREFIXED),
               AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermission.ALLOW))

How a request is decided (:func:`decide`, as Kafka's AclAuthorizer does it):

* the ACLs that apply to a resource are the literal ones on its name, the literal ones
  on the wildcard name ``*``, and the prefixed ones whose name starts the resource's;
* an entry applies to a request when its principal is the request's or ``User:*``, its
  host is the client's or ``*``, and its operation is the requested one or ``All``;
* a DENY that applies wins; otherwise an ALLOW that applies grants, where an ALLOW of
  Read, Write, Delete or Alter also grants Describe and an ALLOW of AlterConfigs also
  grants DescribeConfigs;
* a resource with no ACLs at all is left to ``allow.everyone.if.no.acl.found``.

ZooKeeper node JSON (``/kafka-acl/<ResourceType>/<name>``)::

    {"version": 1, "acls": [{"principal": "User:alice", "permissionType": "Allow",
                             "operation": "Read", "host": "*"}]}
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Iterable

WILDCARD_RESOURCE = "*"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"
CLUSTER_NAME = "kafka-cluster"


class _Named(enum.IntEnum):
    """An enum whose members also have Kafka's spelling (``label``)."""

    label: str

    def __new__(cls, code: int, label: str):
        member = int.__new__(cls, code)
        member._value_ = code
        member.label = label
        return member

    @classmethod
    def parse(cls, text: str):
        """The member spelled ``text`` (any case; ``_`` and spaces ignored).

        Raises ValueError naming the choices."""
        wanted = text.replace("_", "").replace(" ", "").lower()
        for member in cls:
            if member.label.lower() == wanted or member.name.replace("_", "").lower() == wanted:
                return member
        choices = ", ".join(m.label for m in cls if m.code_is_concrete())
        raise ValueError(f"unknown {cls.__name__} {text!r} (one of {choices})")

    def code_is_concrete(self) -> bool:
        return self.name not in ("UNKNOWN", "ANY", "MATCH")


class ResourceType(_Named):
    UNKNOWN = 0, "Unknown"
    ANY = 1, "Any"
    TOPIC = 2, "Topic"
    GROUP = 3, "Group"
    CLUSTER = 4, "Cluster"
    TRANSACTIONAL_ID = 5, "TransactionalId"
    DELEGATION_TOKEN = 6, "DelegationToken"
    USER = 7, "User"


class PatternType(_Named):
    UNKNOWN = 0, "Unknown"
    ANY = 1, "Any"  # filters only: any pattern type, exact name
    MATCH = 2, "Match"  # filters only: every pattern that applies to the named resource
    LITERAL = 3, "Literal"
    PREFIXED = 4, "Prefixed"


class AclOperation(_Named):
    UNKNOWN = 0, "Unknown"
    ANY = 1, "Any"
    ALL = 2, "All"
    READ = 3, "Read"
    WRITE = 4, "Write"
    CREATE = 5, "Create"
    DELETE = 6, "Delete"
    ALTER = 7, "Alter"
    DESCRIBE = 8, "Describe"
    CLUSTER_ACTION = 9, "ClusterAction"
    DESCRIBE_CONFIGS = 10, "DescribeConfigs"
    ALTER_CONFIGS = 11, "AlterConfigs"
    IDEMPOTENT_WRITE = 12, "IdempotentWrite"
    CREATE_TOKENS = 13, "CreateTokens"
    DESCRIBE_TOKENS = 14, "DescribeTokens"


class AclPermission(_Named):
    UNKNOWN = 0, "Unknown"
    ANY = 1, "Any"
    DENY = 2, "Deny"
    ALLOW = 3, "Allow"


# An ALLOW of any of these grants the key operation too.
IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset({AclOperation.DESCRIBE, AclOperation.READ,
                                      AclOperation.WRITE, AclOperation.DELETE,
                                      AclOperation.ALTER}),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.DESCRIBE_CONFIGS,
                                              AclOperation.ALTER_CONFIGS}),
}


def allowing_operations(operation: AclOperation) -> frozenset[AclOperation]:
    """The operations whose ALLOW grants ``operation`` (``All`` always does too)."""
    return IMPLIED_BY.get(operation, frozenset({operation})) | {AclOperation.ALL}


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    """What an ACL is on: a resource type and a name, literal or a prefix."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def applies_to(self, resource_type: ResourceType, name: str) -> bool:
        """Whether this pattern covers the resource ``(resource_type, name)``."""
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == PatternType.LITERAL:
            return self.name == name or self.name == WILDCARD_RESOURCE
        return self.pattern_type == PatternType.PREFIXED and name.startswith(self.name)

    def __str__(self) -> str:
        return (f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, "
                f"patternType={self.pattern_type.name})")


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    """Who may (or may not) do what from where."""

    principal: str  # "User:alice", "User:*"
    host: str  # an address or "*"
    operation: AclOperation
    permission: AclPermission

    def applies_to(self, principal: str, host: str) -> bool:
        return (self.principal in (principal, WILDCARD_PRINCIPAL)
                and self.host in (host, WILDCARD_HOST))

    def __str__(self) -> str:
        return (f"(principal={self.principal}, host={self.host}, "
                f"operation={self.operation.name}, permissionType={self.permission.name})")


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry


class InvalidAclError(ValueError):
    """A binding that cannot be stored (CreateAcls answers INVALID_REQUEST with this)."""


def validate_binding(binding: AclBinding) -> None:
    """Raise InvalidAclError unless every part of ``binding`` is concrete and sound."""
    pattern, entry = binding.pattern, binding.entry
    if not pattern.resource_type.code_is_concrete():
        raise InvalidAclError(f"invalid resource type {pattern.resource_type.name}")
    if pattern.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidAclError(f"invalid pattern type {pattern.pattern_type.name}: "
                              "ACLs are LITERAL or PREFIXED")
    if not pattern.name:
        raise InvalidAclError("the resource name is empty")
    if pattern.resource_type == ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
        raise InvalidAclError(f"the only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not entry.operation.code_is_concrete():
        raise InvalidAclError(f"invalid operation {entry.operation.name}")
    if not entry.permission.code_is_concrete():
        raise InvalidAclError(f"invalid permission type {entry.permission.name}")
    kind, sep, name = entry.principal.partition(":")
    if not sep or not kind or not name:
        raise InvalidAclError(f"invalid principal {entry.principal!r}: expected Type:name")
    if not entry.host:
        raise InvalidAclError("the host is empty")


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Selects bindings for DescribeAcls and DeleteAcls; None fields match anything.

    ``pattern_type`` ANY matches every pattern type with exactly ``name``; MATCH matches
    every pattern that applies to the resource ``name`` (literal, ``*``, prefixes).
    """

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermission = AclPermission.ANY

    def validate(self) -> None:
        """Raise InvalidAclError for UNKNOWN parts, which match nothing sensible."""
        for part in (self.resource_type, self.pattern_type, self.operation, self.permission):
            if part.name == "UNKNOWN":
                raise InvalidAclError(f"the filter has an unknown {type(part).__name__}")

    def matches(self, binding: AclBinding) -> bool:
        return self.matches_pattern(binding.pattern) and self.matches_entry(binding.entry)

    def matches_pattern(self, pattern: ResourcePattern) -> bool:
        if self.resource_type not in (ResourceType.ANY, pattern.resource_type):
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, pattern.pattern_type):
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        return pattern.applies_to(pattern.resource_type, self.name)  # MATCH

    def matches_entry(self, entry: AccessControlEntry) -> bool:
        return ((self.principal is None or self.principal == entry.principal)
                and (self.host is None or self.host == entry.host)
                and self.operation in (AclOperation.ANY, entry.operation)
                and self.permission in (AclPermission.ANY, entry.permission))


def decide(bindings: Iterable[AclBinding], principal: str, host: str,
           operation: AclOperation) -> bool | None:
    """Kafka's decision over the bindings that apply to one resource.

    True: allowed; False: denied; None: there are no bindings at all (the caller applies
    ``allow.everyone.if.no.acl.found``).
    """
    allowing = allowing_operations(operation)
    allowed = False
    empty = True
    for binding in bindings:
        empty = False
        entry = binding.entry
        if not entry.applies_to(principal, host):
            continue
        if entry.permission == AclPermission.DENY:
            if entry.operation in (operation, AclOperation.ALL):
                return False
        elif entry.operation in allowing:
            allowed = True
    return None if empty else allowed


# -- ZooKeeper / file JSON ---------------------------------------------------------------------

def entries_to_json(entries: Iterable[AccessControlEntry]) -> list[dict]:
    """Kafka's ``acls`` list (sorted, so equal sets encode equally)."""
    return [{"principal": e.principal, "permissionType": e.permission.label,
             "operation": e.operation.label, "host": e.host}
            for e in sorted(entries, key=_entry_key)]


def entries_from_json(acls: list) -> frozenset[AccessControlEntry]:
    """The entries of Kafka's ``acls`` list. Raises ValueError if it is not one."""
    try:
        return frozenset(
            AccessControlEntry(acl["principal"], acl["host"],
                               AclOperation.parse(acl["operation"]),
                               AclPermission.parse(acl["permissionType"]))
            for acl in acls)
    except (KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"not an ACL list: {error!r}") from None


def encode_entries(entries: Iterable[AccessControlEntry]) -> bytes:
    """The JSON of one resource's ZooKeeper node."""
    return json.dumps({"version": 1, "acls": entries_to_json(entries)},
                      separators=(",", ":")).encode()


def decode_entries(raw: bytes) -> frozenset[AccessControlEntry]:
    """The entries of one resource's node. Raises ValueError if it is not Kafka's JSON."""
    if not raw:
        return frozenset()
    try:
        document = json.loads(raw)
        return entries_from_json(document["acls"])
    except (KeyError, TypeError) as error:
        raise ValueError(f"not an ACL node: {error!r}") from None


def _entry_key(entry: AccessControlEntry) -> tuple:
    return (entry.principal, entry.host, int(entry.operation), int(entry.permission))


def binding_sort_key(binding: AclBinding) -> tuple:
    pattern = binding.pattern
    return (int(pattern.resource_type), pattern.name, int(pattern.pattern_type),
            *_entry_key(binding.entry))
