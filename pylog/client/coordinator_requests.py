"""Requests to the coordinator of a transactional id or a consumer group: found with
FindCoordinator (key type 1 or 0), kept until it moves, each request retried until a
deadline.

A request is ``body(version) -> dict`` plus ``handle(response)``, which returns the
result or raises :class:`CoordinatorRetry` (the coordinator is busy, loading, or not the
coordinator any more); dropped connections and timeouts are retried the same way, with
the coordinator found again. Anything else ``handle`` raises ends the request.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

from pylog.client.connection import BrokerConnection
from pylog.client.network import NetworkClient, backoff_delay
from pylog.errors import NetworkExceptionError, RequestTimedOutError, RetriableError, UnsupportedVersionError
from pylog.protocol import ApiKey
from pylog.types import BrokerEndpoint

log = logging.getLogger(__name__)

GROUP_KEY, TRANSACTION_KEY = 0, 1
# The versions of the transaction APIs this client fills in: below the ones that need
# the KIP-890 (transaction version 2) protocol and below AddPartitionsToTxn's
# broker-to-broker batch form.
TXN_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
    ApiKey.END_TXN: (0, 4),
    ApiKey.TXN_OFFSET_COMMIT: (0, 4),
    ApiKey.INIT_PRODUCER_ID: (0, 1),
}


class CoordinatorRetry(Exception):
    """Try the request again after a back-off (``recoordinate``: find the coordinator
    again first; ``backoff_s``: instead of the usual exponential back-off)."""

    def __init__(self, reason: str, recoordinate: bool = False, backoff_s: float | None = None) -> None:
        super().__init__(reason)
        self.recoordinate = recoordinate
        self.backoff_s = backoff_s


class CoordinatorRequests:
    """Coordinators found so far, and the retry loop of requests sent to them.

    ``check(operation, error_code)`` judges FindCoordinator's error code (raising
    CoordinatorRetry or the error)."""

    def __init__(self, network: NetworkClient, check: Callable[[str, int], None], *,
                 retry_backoff_s: float, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.network = network
        self.check = check
        self.retry_backoff_s = retry_backoff_s
        self.clock = clock
        self.sleep = sleep
        self._found: dict[tuple[int, str], BrokerEndpoint] = {}

    def request(self, operation: str, api_key: int, key_type: int, key: str,
                body: Callable[[int], dict], handle: Callable[[dict], Any],
                deadline: float | None, attempts: int | None = None) -> Any:
        """``handle(response)`` of ``body(version)`` sent to the coordinator of ``key``,
        retried until ``deadline`` (then RequestTimedOutError), or ``attempts`` times
        (then the last CoordinatorRetry is raised). UnsupportedVersionError when the
        coordinator does not speak a version of ``api_key`` this client knows."""
        failures = 0
        while True:
            try:
                endpoint = self.coordinator(key_type, key)
                conn = self.network.connection(endpoint.host, endpoint.port)
                with conn.lock:
                    version = negotiated_version(conn, api_key)
                    response = conn.request(api_key, body(version), version)
                return handle(response)
            except CoordinatorRetry as exc:
                retry = exc
            except UnsupportedVersionError:
                raise
            except (RetriableError, NetworkExceptionError) as exc:
                retry = CoordinatorRetry(f"{operation}: {exc}", recoordinate=True)
            if retry.recoordinate:
                self._found.pop((key_type, key), None)
            failures += 1
            if attempts is not None and failures >= attempts:
                raise retry
            delay = retry.backoff_s if retry.backoff_s is not None else \
                backoff_delay(self.retry_backoff_s, failures)
            if deadline is not None and self.clock() + delay > deadline:
                raise RequestTimedOutError(f"{operation} did not complete in time ({retry}); "
                                           f"call it again to go on waiting")
            log.debug("%s: retrying (%s)", operation, retry)
            self.sleep(delay)

    def coordinator(self, key_type: int, key: str) -> BrokerEndpoint:
        """The coordinator of ``key`` (FindCoordinator unless already known)."""
        found = self._found.get((key_type, key))
        if found is not None:
            return found

        def body(version: int) -> dict:
            if version >= 4:
                return {"key_type": key_type, "coordinator_keys": [key]}
            return {"key": key, "key_type": key_type}

        response = self.network.request_any(ApiKey.FIND_COORDINATOR, body)
        answer = response["coordinators"][0] if response.get("coordinators") else response
        what = "transaction" if key_type == TRANSACTION_KEY else "group"
        self.check(f"find the {what} coordinator of {key!r}", answer["error_code"])
        found = self._found[(key_type, key)] = BrokerEndpoint(answer["node_id"], answer["host"], answer["port"])
        return found


def negotiated_version(conn: BrokerConnection, api_key: int) -> int:
    """The highest version of a transaction API both sides support (connects first)."""
    conn.connect()
    ours = TXN_VERSIONS[api_key]
    theirs = conn.versions.get(api_key)
    if theirs is None or min(ours[1], theirs[1]) < max(ours[0], theirs[0]):
        raise UnsupportedVersionError(f"broker {conn.address} does not support "
                                      f"{ApiKey(api_key).name} v{ours[0]}-{ours[1]}")
    return min(ours[1], theirs[1])
