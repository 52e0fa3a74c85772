"""DescribeAcls, CreateAcls and DeleteAcls over the authorizer's ACL store.

Without an authorizer (``authorizer.class.name`` unset) each answers SECURITY_DISABLED,
as Kafka does. A creation that is not a concrete, sound binding (``validate_binding``)
and a filter with UNKNOWN parts get INVALID_REQUEST with the reason; the others go on.
Who may call them is checked before (``pylog.broker.authorization``).
"""

from __future__ import annotations

import logging
from itertools import groupby

from pylog.errors import InvalidRequestError, KafkaError, SecurityDisabledError
from pylog.security.acls import (
    AccessControlEntry, AclBinding, AclBindingFilter, AclOperation, AclPermission,
    InvalidAclError, PatternType, ResourcePattern, ResourceType, validate_binding)
from pylog.security.authorizer import AclAuthorizer

log = logging.getLogger(__name__)

SECURITY_DISABLED = SecurityDisabledError.errno
INVALID_REQUEST = InvalidRequestError.errno
NO_AUTHORIZER = "No authorizer is configured on the broker (authorizer.class.name)"


def _enum(kind, code: int):
    try:
        return kind(code)
    except ValueError:
        return kind.UNKNOWN


def binding_from_creation(creation: dict) -> AclBinding:
    return AclBinding(
        ResourcePattern(_enum(ResourceType, creation["resource_type"]),
                        creation["resource_name"],
                        _enum(PatternType, creation["resource_pattern_type"])),
        AccessControlEntry(creation["principal"], creation["host"],
                           _enum(AclOperation, creation["operation"]),
                           _enum(AclPermission, creation["permission_type"])))


def filter_from_request(request: dict) -> AclBindingFilter:
    return AclBindingFilter(
        _enum(ResourceType, request["resource_type_filter"]), request["resource_name_filter"],
        _enum(PatternType, request["pattern_type_filter"]), request["principal_filter"],
        request["host_filter"], _enum(AclOperation, request["operation"]),
        _enum(AclPermission, request["permission_type"]))


def _entry_fields(entry: AccessControlEntry) -> dict:
    return {"principal": entry.principal, "host": entry.host,
            "operation": int(entry.operation), "permission_type": int(entry.permission)}


class AclHandlers:
    """The ACL APIs of one broker; ``authorizer`` None means security is off."""

    def __init__(self, authorizer: AclAuthorizer | None) -> None:
        self.authorizer = authorizer

    def describe_acls(self, body: dict, version: int) -> dict:
        response = {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                    "resources": []}
        if self.authorizer is None:
            return dict(response, error_code=SECURITY_DISABLED, error_message=NO_AUTHORIZER)
        acl_filter = filter_from_request(body)
        try:
            acl_filter.validate()
        except InvalidAclError as error:
            return dict(response, error_code=INVALID_REQUEST, error_message=str(error))
        found = self.authorizer.store.describe(acl_filter)
        for pattern, bindings in groupby(found, key=lambda b: b.pattern):
            response["resources"].append({
                "resource_type": int(pattern.resource_type), "resource_name": pattern.name,
                "pattern_type": int(pattern.pattern_type),
                "acls": [_entry_fields(b.entry) for b in bindings]})
        return response

    def create_acls(self, body: dict, version: int) -> dict:
        creations = body["creations"]
        if self.authorizer is None:
            return {"throttle_time_ms": 0, "results": [
                {"error_code": SECURITY_DISABLED, "error_message": NO_AUTHORIZER}
                for _ in creations]}
        results: list[dict | None] = [None] * len(creations)
        valid: list[tuple[int, AclBinding]] = []
        for index, creation in enumerate(creations):
            binding = binding_from_creation(creation)
            try:
                validate_binding(binding)
            except InvalidAclError as error:
                results[index] = {"error_code": INVALID_REQUEST, "error_message": str(error)}
            else:
                valid.append((index, binding))
        outcomes = self.authorizer.store.create([b for _, b in valid])
        for (index, binding), error in zip(valid, outcomes):
            if error is None:
                log.info("added ACL %s on %s", binding.entry, binding.pattern)
            results[index] = _outcome(error)
        return {"throttle_time_ms": 0, "results": results}

    def delete_acls(self, body: dict, version: int) -> dict:
        requested = body["filters"]
        if self.authorizer is None:
            return {"throttle_time_ms": 0, "filter_results": [
                {"error_code": SECURITY_DISABLED, "error_message": NO_AUTHORIZER,
                 "matching_acls": []} for _ in requested]}
        results: list[dict | None] = [None] * len(requested)
        valid: list[tuple[int, AclBindingFilter]] = []
        for index, request in enumerate(requested):
            acl_filter = filter_from_request(request)
            try:
                acl_filter.validate()
            except InvalidAclError as error:
                results[index] = {"error_code": INVALID_REQUEST, "error_message": str(error),
                                  "matching_acls": []}
            else:
                valid.append((index, acl_filter))
        outcomes = self.authorizer.store.delete([f for _, f in valid])
        for (index, _), (removed, error) in zip(valid, outcomes):
            for binding in removed:
                log.info("removed ACL %s on %s", binding.entry, binding.pattern)
            results[index] = dict(_outcome(error), matching_acls=[
                {"error_code": 0, "error_message": None,
                 "resource_type": int(b.pattern.resource_type),
                 "resource_name": b.pattern.name, "pattern_type": int(b.pattern.pattern_type),
                 **_entry_fields(b.entry)} for b in removed])
        return {"throttle_time_ms": 0, "filter_results": results}


def _outcome(error: Exception | None) -> dict:
    if error is None:
        return {"error_code": 0, "error_message": None}
    code = error.errno if isinstance(error, KafkaError) else KafkaError.errno  # -1: unknown
    return {"error_code": code, "error_message": f"{type(error).__name__}: {error}"}
