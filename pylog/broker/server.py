"""``Broker``: storage, cluster state and the network layer, started and stopped together.

Start order: bind the listening socket (so the advertised port is known even for port
0), load the logs (recovering after a crash), build the ClusterMetadata, then start the
processors and the acceptor. ``stop()`` reverses it: stop accepting, close connections,
then flush, checkpoint and write the clean-shutdown marker (``LogManager.close``).

``build_cluster_metadata(config, endpoint)`` is the one place that picks the cluster
implementation: ZooKeeper when ``zookeeper.connect`` is set, standalone otherwise.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
import time
from typing import Callable

from pylog.broker.acl_handlers import AclHandlers
from pylog.broker.admin import AdminHandlers
from pylog.broker.authorization import RequestAuthorization
from pylog.broker.budget import RequestBudget
from pylog.broker.config import BrokerConfig
from pylog.broker.dispatch import Dispatcher
from pylog.broker.groups import GroupHandlers
from pylog.broker.meta import ensure_meta
from pylog.broker.network import Acceptor, Processor
from pylog.broker.partitions import AppendWaiters, PartitionLogs
from pylog.broker.replica_manager import ReplicaManager
from pylog.cluster.metadata import ClusterMetadata
from pylog.cluster.standalone import StandaloneMetadata
from pylog.coordinator.coordinator import GroupCoordinator
from pylog.errors import ConfigError
from pylog.log import LogManager
from pylog.security.authorizer import AclAuthorizer, build_authorizer
from pylog.types import BrokerEndpoint

log = logging.getLogger(__name__)


def build_cluster_metadata(config: BrokerConfig, endpoint: BrokerEndpoint) -> ClusterMetadata:
    """The ClusterMetadata this broker serves from, chosen by ``zookeeper.connect``."""
    if config["zookeeper.connect"]:
        from pylog.cluster.zk import ZkClusterMetadata

        metadata = ZkClusterMetadata(
            config["zookeeper.connect"], endpoint.broker_id, endpoint.host, endpoint.port,
            endpoint.rack, session_timeout_ms=config["zookeeper.session.timeout.ms"],
            connection_timeout_ms=config["zookeeper.connection.timeout.ms"],
            unclean_leader_election=config["unclean.leader.election.enable"],
            auto_leader_rebalance=config["auto.leader.rebalance.enable"],
            leader_imbalance_check_s=config["leader.imbalance.check.interval.seconds"])
        ensure_meta(config.log_dirs, endpoint.broker_id, metadata.cluster_id)
        return metadata
    cluster_id = ensure_meta(config.log_dirs, endpoint.broker_id)
    return StandaloneMetadata(config.log_dirs[0], endpoint, cluster_id)


class Broker:
    """One pylog broker.

    >>> broker = Broker(BrokerConfig.load("conf/server.properties"))
    >>> broker.start()          # binds, loads logs, serves
    >>> broker.address          # ('127.0.0.1', 9092)
    >>> broker.stop()           # clean shutdown

    ``clock`` (monotonic seconds, for timeouts) and ``wall_ms`` (epoch milliseconds, for
    commit timestamps and offset retention) can be injected.

    Raises ConfigError (also when the listener's port is taken) or KafkaStorageError (log
    dir locked by another broker) from ``start``.
    """

    def __init__(self, config: BrokerConfig, clock: Callable[[], float] = time.monotonic,
                 wall_ms: Callable[[], int] | None = None) -> None:
        self.config = config
        self.clock = clock
        self.wall_ms = wall_ms
        self.metadata: ClusterMetadata | None = None
        self.manager: LogManager | None = None
        self.replicas: ReplicaManager | None = None
        self.coordinator: GroupCoordinator | None = None
        self.authorizer: AclAuthorizer | None = None
        self._server: socket.socket | None = None
        self._processors: list[Processor] = []
        self._acceptor: Acceptor | None = None
        self._stopped = threading.Event()
        self._stop_lock = threading.Lock()

    @property
    def address(self) -> tuple[str, int]:
        assert self._server is not None, "not started"
        return self._server.getsockname()[:2]

    def start(self) -> "Broker":
        self._server = self._bind()
        try:
            self._start_services()
        except BaseException as exc:
            self._server.close()
            self._close_storage()
            if isinstance(exc, OSError) and exc.filename is not None:
                # meta.properties, topics.json...: a log dir the broker cannot write.
                raise ConfigError("log.dirs", f"cannot use {exc.filename}: "
                                              f"{exc.strerror or exc}") from None
            raise
        return self

    def _bind(self) -> socket.socket:
        listener = self.config.listener
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind((listener.host, listener.port))
            server.listen(512)
        except OSError as exc:
            server.close()
            raise ConfigError("listeners", f"cannot listen on {listener.host}:{listener.port}: "
                                           f"{exc.strerror or exc}") from None
        return server

    def _start_services(self) -> None:
        config = self.config
        advertised = config.advertised
        port = advertised.port or self.address[1]
        endpoint = BrokerEndpoint(config["broker.id"], advertised.host, port, config["broker.rack"])
        self.manager = LogManager(config.log_dirs, config.log_config,
                                  cleaner_config=config.cleaner_config)
        self.manager.load()
        self.manager.start(flush_check_ms=config["log.flush.scheduler.interval.ms"],
                           retention_check_ms=config["log.retention.check.interval.ms"],
                           checkpoint_ms=config["replica.high.watermark.checkpoint.interval.ms"])
        self.metadata = build_cluster_metadata(config, endpoint)
        waiters = AppendWaiters()
        logs = PartitionLogs(self.manager, self.metadata, config.log_config, waiters)
        self.metadata.add_listener(logs.on_metadata_change)
        if config["zookeeper.connect"]:
            self.replicas = ReplicaManager(
                logs, self.metadata, lag_time_ms=config["replica.lag.time.max.ms"],
                fetch_wait_max_ms=config["replica.fetch.wait.max.ms"],
                fetch_max_bytes=config["replica.fetch.response.max.bytes"],
                fetch_partition_max_bytes=config["replica.fetch.max.bytes"],
                fetch_backoff_ms=config["replica.fetch.backoff.ms"], wake=waiters.notify)
            logs.replicas = self.replicas
            self.metadata.add_listener(self.replicas.on_metadata_change)
            self.replicas.start()
        self.coordinator = GroupCoordinator(config, self.metadata, logs, waiters,
                                            self.clock, wall_ms=self.wall_ms).start()
        dispatcher = Dispatcher(AdminHandlers(config, self.metadata, logs), logs, self.clock,
                                GroupHandlers(self.coordinator, self.clock))
        self._start_authorizer(dispatcher)
        budget = RequestBudget(config["queued.max.request.bytes"])
        self._processors = [
            Processor(i, dispatcher, config["socket.request.max.bytes"], waiters.add,
                      waiters.remove, self.clock, budget)
            for i in range(config["num.network.threads"])]
        for processor in self._processors:
            processor.start()
        self._acceptor = Acceptor(self._server, self._processors,
                                  config["socket.send.buffer.bytes"],
                                  config["socket.receive.buffer.bytes"])
        self._acceptor.start()
        log.info("broker %d serving on %s:%d (cluster %s)", endpoint.broker_id,
                 endpoint.host, endpoint.port, self.metadata.cluster_id)

    def stop(self) -> None:
        """Stop serving, then flush and close every log with a clean-shutdown marker.

        In cluster mode with ``controlled.shutdown.enable``, first hand this broker's
        leaderships to other in-sync replicas (while still serving, so clients are told
        NOT_LEADER_OR_FOLLOWER and move on), waiting up to
        ``controlled.shutdown.timeout.ms``.
        """
        with self._stop_lock:
            if self._stopped.is_set():
                return
            if self.replicas is not None and self.config["controlled.shutdown.enable"]:
                self._controlled_shutdown()
            if self._acceptor is not None:
                self._acceptor.stop()
                self._acceptor.join()
            for processor in self._processors:
                processor.stop()
            for processor in self._processors:
                processor.join()
            self._close_storage()
            self._stopped.set()
            log.info("broker stopped cleanly")

    def _controlled_shutdown(self) -> None:
        deadline = self.clock() + self.config["controlled.shutdown.timeout.ms"] / 1000
        self.replicas.begin_shutdown()
        try:
            self.metadata.begin_controlled_shutdown()
        except Exception as error:  # noqa: BLE001 -- shut down anyway, uncontrolled
            log.warning("controlled shutdown could not start: %s", error)
            return
        while self.clock() < deadline:
            remaining = self.replicas.movable_leaderships()
            if not remaining:
                log.info("controlled shutdown: no leaderships left to move")
                return
            time.sleep(0.05)
        log.warning("controlled shutdown: still leading %d partitions after %d ms; stopping "
                    "anyway", len(self.replicas.movable_leaderships()),
                    self.config["controlled.shutdown.timeout.ms"])

    def _start_authorizer(self, dispatcher: Dispatcher) -> None:
        """With ``authorizer.class.name`` set, check every request against the ACLs."""
        config = self.config
        self.authorizer = build_authorizer(
            config["authorizer.class.name"], config["super.users"],
            config["allow.everyone.if.no.acl.found"], config.log_dirs[0],
            config["zookeeper.connect"], config["zookeeper.session.timeout.ms"],
            config["zookeeper.connection.timeout.ms"])
        if self.authorizer is not None:
            dispatcher.authorization = RequestAuthorization(self.authorizer, self.metadata,
                                                            config)
            dispatcher.acls = AclHandlers(self.authorizer)

    def _close_storage(self) -> None:
        if self.authorizer is not None:
            self.authorizer.close()
            self.authorizer = None
        if self.coordinator is not None:
            self.coordinator.stop()
            self.coordinator = None
        if self.replicas is not None:
            self.replicas.stop()
            self.replicas = None
        if self.metadata is not None:
            self.metadata.close()
            self.metadata = None
        if self.manager is not None:
            self.manager.close()
            self.manager = None

    def serve_until_signal(self) -> None:
        """Block until SIGTERM or SIGINT, then stop cleanly (call from the main thread)."""
        requested = threading.Event()

        def on_signal(signum, _frame) -> None:
            log.info("received %s; shutting down", signal.Signals(signum).name)
            requested.set()

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            while not requested.wait(3600):
                pass
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.stop()
