"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51), KIP-554.

Request and response bodies are the protocol dicts; the store is any
:class:`~pylog.security.credentials.CredentialStore`. The answers follow Kafka's
``ZkAdminManager``: per-user results, and a user whose request has any problem is not
changed at all.

Describe: no users (null or empty) lists every user with a SCRAM credential, by name; an
empty name or a user without credentials gets RESOURCE_NOT_FOUND, a user named twice
DUPLICATE_RESOURCE. Alter: an empty name or iterations outside 4096..16384 get
UNACCEPTABLE_CREDENTIAL, an unknown mechanism UNSUPPORTED_SASL_MECHANISM, the same
(user, mechanism) twice DUPLICATE_RESOURCE, deleting a credential that does not exist
RESOURCE_NOT_FOUND. An empty salt gets UNACCEPTABLE_CREDENTIAL; any other is taken, as Kafka
takes it (pylog.security.scram.accept_kafkas_salts).
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Mapping

from pylog.errors import KafkaError, PylogError
from pylog.security.credentials import CredentialStore
from pylog.security.scram import (
    MAX_ITERATIONS, MECHANISMS_BY_TYPE, MIN_ITERATIONS, MIN_SALT_BYTES, ScramCredential)

log = logging.getLogger(__name__)

NONE = 0
UNSUPPORTED_SASL_MECHANISM = KafkaError.for_code(33).errno
RESOURCE_NOT_FOUND = KafkaError.for_code(91).errno
DUPLICATE_RESOURCE = KafkaError.for_code(92).errno
UNACCEPTABLE_CREDENTIAL = KafkaError.for_code(93).errno
UNKNOWN_SERVER_ERROR = -1
EMPTY_USER = "Username must not be empty"


def describe_user_scram_credentials(store: CredentialStore, body: Mapping) -> dict:
    requested = [user["name"] for user in (body.get("users") or [])]
    results = []
    try:
        if not requested:
            for user, credentials in store.users().items():
                results.append(_described(user, credentials))
        else:
            counts = Counter(requested)
            for user in dict.fromkeys(requested):
                if not user:
                    results.append(_user_error(user, RESOURCE_NOT_FOUND, EMPTY_USER))
                elif counts[user] > 1:
                    results.append(_user_error(
                        user, DUPLICATE_RESOURCE, "Cannot describe SCRAM credentials for the "
                                                  f"same user twice in a single request: {user}"))
                else:
                    credentials = store.user(user)
                    results.append(_described(user, credentials) if credentials else _user_error(
                        user, RESOURCE_NOT_FOUND,
                        f"Attempt to describe a user credential that does not exist: {user}"))
    except PylogError as exc:
        log.warning("DescribeUserScramCredentials failed: %s", exc)
        return {"throttle_time_ms": 0, "error_code": UNKNOWN_SERVER_ERROR,
                "error_message": "cannot read the credential store", "results": []}
    return {"throttle_time_ms": 0, "error_code": NONE, "error_message": None,
            "results": results}


def _described(user: str, credentials: Mapping[str, ScramCredential]) -> dict:
    infos = [{"mechanism": mechanism.type, "iterations": credentials[mechanism.name].iterations}
             for mechanism in MECHANISMS_BY_TYPE.values() if mechanism.name in credentials]
    return {"user": user, "error_code": NONE, "error_message": None, "credential_infos": infos}


def _user_error(user: str, code: int, message: str) -> dict:
    return {"user": user, "error_code": code, "error_message": message, "credential_infos": []}


def _upsertion_problem(upsertion: Mapping) -> tuple[int, str] | None:
    if not upsertion["name"]:
        return UNACCEPTABLE_CREDENTIAL, EMPTY_USER
    if upsertion["mechanism"] not in MECHANISMS_BY_TYPE:
        return UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    if upsertion["iterations"] < MIN_ITERATIONS:
        return UNACCEPTABLE_CREDENTIAL, "Too few iterations"
    if upsertion["iterations"] > MAX_ITERATIONS:
        return UNACCEPTABLE_CREDENTIAL, "Too many iterations"
    if len(upsertion["salt"]) < MIN_SALT_BYTES:
        return UNACCEPTABLE_CREDENTIAL, "Salt must not be empty"
    return None


def _deletion_problem(deletion: Mapping) -> tuple[int, str] | None:
    if not deletion["name"]:
        return UNACCEPTABLE_CREDENTIAL, EMPTY_USER
    if deletion["mechanism"] not in MECHANISMS_BY_TYPE:
        return UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    return None


def alter_user_scram_credentials(store: CredentialStore, body: Mapping) -> dict:
    deletions = list(body.get("deletions") or [])
    upsertions = list(body.get("upsertions") or [])
    errors: dict[str, tuple[int, str]] = {}
    for item, problem in [(d, _deletion_problem(d)) for d in deletions] + \
                         [(u, _upsertion_problem(u)) for u in upsertions]:
        if problem is not None:
            errors.setdefault(item["name"], problem)
    pairs = Counter((item["name"], item["mechanism"]) for item in deletions + upsertions
                    if item["name"] not in errors)
    for (user, _), count in pairs.items():
        if count > 1:
            errors.setdefault(user, (DUPLICATE_RESOURCE,
                                     "A user credential cannot be altered twice in the same "
                                     "request"))
    changes: dict[str, dict[str, ScramCredential | None]] = {}
    for deletion in deletions:
        if deletion["name"] not in errors:
            mechanism = MECHANISMS_BY_TYPE[deletion["mechanism"]]
            changes.setdefault(deletion["name"], {})[mechanism.name] = None
    for upsertion in upsertions:
        if upsertion["name"] not in errors:
            mechanism = MECHANISMS_BY_TYPE[upsertion["mechanism"]]
            changes.setdefault(upsertion["name"], {})[mechanism.name] = \
                ScramCredential.from_salted_password(
                    mechanism, bytes(upsertion["salt"]), bytes(upsertion["salted_password"]),
                    upsertion["iterations"])
    results = [{"user": user, "error_code": code, "error_message": message}
               for user, (code, message) in errors.items()]
    for user, user_changes in changes.items():
        results.append(_alter_one(store, user, user_changes))
    return {"throttle_time_ms": 0, "results": results}


def _alter_one(store: CredentialStore, user: str,
               changes: dict[str, ScramCredential | None]) -> dict:
    try:
        existing = store.user(user)
        missing = [m for m, credential in changes.items() if credential is None and m not in existing]
        if missing:
            return {"user": user, "error_code": RESOURCE_NOT_FOUND,
                    "error_message": "Attempt to delete a user credential that does not exist"}
        store.alter(user, changes)
    except PylogError as exc:
        log.warning("AlterUserScramCredentials for user %r failed: %s", user, exc)
        return {"user": user, "error_code": UNKNOWN_SERVER_ERROR,
                "error_message": "cannot write the credential store"}
    log.info("SCRAM credentials of user %r altered: %s", user, ", ".join(
        f"{'deleted' if credential is None else 'set'} {mechanism}"
        for mechanism, credential in sorted(changes.items())))
    return {"user": user, "error_code": NONE, "error_message": None}
