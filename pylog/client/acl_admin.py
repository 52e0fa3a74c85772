"""ACL administration: CreateAcls, DescribeAcls and DeleteAcls, as ``Admin`` methods.

    >>> with Admin("127.0.0.1:9092") as admin:
    ...     admin.create_acls([AclBinding(ResourcePattern(ResourceType.TOPIC, "logs.",
    ...                                                   PatternType.PREFIXED),
    ...                                   AccessControlEntry("User:alice", "*",
    ...                                                      AclOperation.READ,
    ...                                                      AclPermission.ALLOW))])
    ...     admin.describe_acls(AclBindingFilter(ResourceType.TOPIC))

The requests go to any broker: every broker serves the cluster's ACLs. Errors:
ClusterAuthorizationFailedError without Cluster Alter (create, delete) or Describe
(describe), SecurityDisabledError when the broker has no authorizer, InvalidRequestError
for an ACL that cannot be stored.
"""

from __future__ import annotations

from pylog.client.network import check_error
from pylog.errors import KafkaError
from pylog.protocol import ApiKey
from pylog.security.acls import (
    AccessControlEntry, AclBinding, AclBindingFilter, AclOperation, AclPermission,
    PatternType, ResourcePattern, ResourceType)


def _check(code: int, message: str | None, what: str) -> None:
    if code and message:
        cls = KafkaError.for_code(code)
        raise cls(f"{what}: {cls.name}: {message}")
    check_error(code, what)


def _filter_body(acl_filter: AclBindingFilter) -> dict:
    return {"resource_type_filter": int(acl_filter.resource_type),
            "resource_name_filter": acl_filter.name,
            "pattern_type_filter": int(acl_filter.pattern_type),
            "principal_filter": acl_filter.principal, "host_filter": acl_filter.host,
            "operation": int(acl_filter.operation),
            "permission_type": int(acl_filter.permission)}


def _binding(resource_type: int, name: str, pattern_type: int, acl: dict) -> AclBinding:
    return AclBinding(
        ResourcePattern(ResourceType(resource_type), name, PatternType(pattern_type)),
        AccessControlEntry(acl["principal"], acl["host"], AclOperation(acl["operation"]),
                           AclPermission(acl["permission_type"])))


class AclAdmin:
    """The ACL methods of ``Admin`` (which provides ``_network``)."""

    def create_acls(self, bindings: list[AclBinding]) -> None:
        """Add ``bindings``; raises the first refusal's error (the others are still added)."""
        body = {"creations": [
            {"resource_type": int(b.pattern.resource_type), "resource_name": b.pattern.name,
             "resource_pattern_type": int(b.pattern.pattern_type),
             "principal": b.entry.principal, "host": b.entry.host,
             "operation": int(b.entry.operation), "permission_type": int(b.entry.permission)}
            for b in bindings]}
        response = self._network.request_any(ApiKey.CREATE_ACLS, body)
        for binding, result in zip(bindings, response["results"]):
            _check(result["error_code"], result["error_message"],
                   f"create ACL {binding.entry} on {binding.pattern}")

    def describe_acls(self, acl_filter: AclBindingFilter = AclBindingFilter()
                      ) -> list[AclBinding]:
        """The ACLs ``acl_filter`` matches (default: all of them)."""
        response = self._network.request_any(ApiKey.DESCRIBE_ACLS, _filter_body(acl_filter))
        _check(response["error_code"], response["error_message"], "describe ACLs")
        return [_binding(r["resource_type"], r["resource_name"], r["pattern_type"], acl)
                for r in response["resources"] for acl in r["acls"]]

    def delete_acls(self, filters: list[AclBindingFilter]) -> list[list[AclBinding]]:
        """Delete what each filter matches; per filter, the ACLs it deleted."""
        response = self._network.request_any(
            ApiKey.DELETE_ACLS, {"filters": [_filter_body(f) for f in filters]})
        deleted = []
        for result in response["filter_results"]:
            _check(result["error_code"], result["error_message"], "delete ACLs")
            deleted.append([_binding(m["resource_type"], m["resource_name"],
                                     m["pattern_type"], m) for m in result["matching_acls"]])
        return deleted
