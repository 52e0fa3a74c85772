"""GroupMember: one consumer's membership of a seeds'-style consumer group in ZooKeeper.

The member registers under ``/consumers/<group>/ids`` and watches the group's members,
the brokers and the topics. Any change triggers a rebalance on its worker thread:

1. compute the range assignment (``consumer_group.range_assign``);
2. have the consumer stop reading the partitions that move away, commit their processed
   offsets and delete their ``owners`` nodes first (partitions that stay are untouched);
3. claim the rest of the share ephemerally under ``owners``; if a previous owner has not
   released a partition yet, release what was claimed, back off and start again;
4. hand the claimed partitions to the consumer with their committed offsets.

Session handling: while the connection is suspended the consumer is paused; when the
session is lost the consumer owns nothing (its ephemeral nodes are gone and others may
claim its share); under a new session the member registers again and rebalances. The
session lease (``lease``) tells the consumer when it may no longer trust that it owns
anything, e.g. right after a long pause.

The consumer side is the ``Ownership`` protocol below; its methods run on the member's
threads and must not block for long.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Mapping, Protocol

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException
from kazoo.recipe.watchers import ChildrenWatch

from pylog.cluster import layout
from pylog.cluster.consumer_group import GroupStore, Subscription, range_assign
from pylog.cluster.lease import SessionLease
from pylog.cluster.worker import CoalescingWorker
from pylog.errors import KafkaError, RetriableError
from pylog.types import TopicPartition

log = logging.getLogger(__name__)

CoordinatorNotAvailableError = KafkaError.for_code(15)  # COORDINATOR_NOT_AVAILABLE


class RebalanceFailedError(RetriableError):
    """Partitions stayed owned by other consumers through every rebalance attempt."""


class Ownership(Protocol):
    """What a consumer does when its share of the group changes."""

    def release(self, partitions: frozenset[TopicPartition]) -> Mapping[TopicPartition, int]:
        """Stop reading ``partitions``; return their processed offsets not yet committed."""

    def claimed(self, starts: Mapping[TopicPartition, int | None]) -> None:
        """Start reading these partitions at their committed offset (None: none yet)."""

    def lost(self) -> None:
        """The session is gone: stop reading everything at once."""

    def paused(self, paused: bool) -> None:
        """The connection is suspended (True) or back (False)."""


class GroupMember:
    def __init__(self, client: KazooClient, group_id: str, consumer_id: str,
                 subscription: Subscription, consumer: Ownership, *, session_timeout: float,
                 commit_on_release: bool = True, rebalance_max_retries: int = 20,
                 rebalance_backoff: float = 0.25, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._client = client
        self.group_id = group_id
        self.consumer_id = consumer_id
        self.subscription = subscription
        self._consumer = consumer
        self._commit_on_release = commit_on_release
        self._retries = rebalance_max_retries
        self._backoff = rebalance_backoff
        self._sleep = sleep
        self._closed = False
        self.owned: frozenset[TopicPartition] = frozenset()
        self.store = GroupStore(client, group_id)
        self.lease = SessionLease(client, session_timeout, f"zk-consumer-lease-{group_id}",
                                  clock)
        self._clock = clock
        self._worker = CoalescingWorker(f"zk-consumer-{group_id}", [
            ("rejoin", self._rejoin), ("rebalance", self._rebalance)], retry_delay=rebalance_backoff)

    def join(self) -> None:
        """Register, start watching (which triggers the first rebalance) and the lease."""
        self.store.ensure_paths()
        started_at = self._clock()
        self.store.register(self.consumer_id, self.subscription, int(time.time() * 1000))
        self.lease.renewed(started_at)
        self.lease.start()
        self._session_id = self._client.client_id[0]
        self._worker.start()
        for path in (self.store.ids_path, layout.BROKER_IDS, layout.BROKER_TOPICS):
            self._client.ensure_path(path)
            ChildrenWatch(self._client, path, self._on_children)
        self._client.add_listener(self._on_session_state)

    def wait_idle(self, timeout: float) -> bool:
        """Block until no rebalance is pending or running."""
        return self._worker.wait_idle(timeout)

    def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Write offsets of partitions this member still owns.

        Raises CoordinatorNotAvailableError (retriable) while ZooKeeper is not reachable
        (at once when disconnected, rather than holding the caller until it is back).
        """
        if not self._client.connected:
            raise CoordinatorNotAvailableError(f"group {self.group_id}: not connected to "
                                               "ZooKeeper; offsets not committed")
        try:
            self.store.commit(offsets, self.consumer_id, lambda tp: tp in self.owned)
        except KazooException as exc:
            raise CoordinatorNotAvailableError(f"group {self.group_id}: committing offsets "
                                               f"failed ({type(exc).__name__})") from exc

    def leave(self) -> None:
        """Stop rebalancing; the nodes go when the caller closes the ZooKeeper client."""
        self._closed = True
        self._client.remove_listener(self._on_session_state)
        self._worker.stop()
        self.lease.stop()

    # -- watches and session events (kazoo's threads) ------------------------------------

    def _on_children(self, children) -> bool | None:
        if self._closed:
            return False
        self._worker.request("rebalance")
        return None

    def _on_session_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            self._consumer.paused(False)
            self._worker.request("rejoin")
        elif state == KazooState.SUSPENDED:
            self._consumer.paused(True)
        else:  # LOST: our ids and owners nodes are gone; others may own our share now
            self.owned = frozenset()
            self._consumer.lost()

    # -- rebalancing (worker thread) -----------------------------------------------------

    def _rejoin(self) -> None:
        session_id = self._client.client_id[0]
        if session_id != self._session_id:
            self.store.register(self.consumer_id, self.subscription, int(time.time() * 1000))
            self._session_id = session_id
            self._rebalance()

    def _rebalance(self) -> None:
        if self._closed:
            return
        for _attempt in range(self._retries):
            if self._try_rebalance():
                return
            self._sleep(self._backoff)
        raise RebalanceFailedError(f"group {self.group_id}: consumer {self.consumer_id} could "
                                   f"not claim its partitions after {self._retries} attempts")

    def _target_share(self) -> frozenset[TopicPartition]:
        members = self.store.members()
        members.setdefault(self.consumer_id, self.subscription)
        topics = [t for t in self.store.all_topics() if self.subscription.matches(t)]
        partitions = self.store.topic_partitions(topics)
        subscribers = {topic: [m for m, sub in members.items() if sub.matches(topic)]
                       for topic in partitions}
        return frozenset(range_assign(partitions, subscribers).get(self.consumer_id, []))

    def _try_rebalance(self) -> bool:
        share = self._target_share()
        # Ownership that did not survive (a session lost mid-rebalance) is given up too.
        self._release(frozenset(tp for tp in self.owned
                                if self.store.owner(tp) != self.consumer_id))
        owned = self.owned
        if share == owned:
            return True
        # Give up what moves away first, so the consumers it moves to can claim it.
        self._release(owned - share)
        claimed = []
        for tp in sorted(share - owned):
            if not self.store.claim(tp, self.consumer_id):
                log.info("%s: %s still owned by another consumer; retrying", self.consumer_id, tp)
                for done in claimed:
                    self.store.release(done, self.consumer_id)
                return False
            claimed.append(tp)
        self._consumer.claimed({tp: self.store.committed(tp) for tp in claimed})
        self.owned = self.owned | frozenset(claimed)
        log.info("%s owns %s", self.consumer_id, sorted(self.owned))
        return True

    def _release(self, partitions: frozenset[TopicPartition]) -> None:
        if not partitions:
            return
        self.owned = self.owned - partitions
        offsets = self._consumer.release(partitions)
        if self._commit_on_release:
            self.store.commit(offsets, self.consumer_id, lambda tp: True)
        for tp in partitions:
            self.store.release(tp, self.consumer_id)
