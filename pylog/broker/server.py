"""``Broker``: storage, cluster state and the network layer, started and stopped together.

Start order: build the listeners' TLS contexts and bind one socket per listener (so the
advertised ports are known even for port 0), load the logs (recovering after a crash), build the ClusterMetadata, then start the
processors and one acceptor per listener. ``stop()`` reverses it: stop accepting, close connections,
then flush, checkpoint and write the clean-shutdown marker (``LogManager.close``).

``build_cluster_metadata(config, endpoint)`` is the one place that picks the cluster
implementation: ZooKeeper when ``zookeeper.connect`` is set, standalone otherwise.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import socket
import threading
import time
from typing import Callable

from pylog.broker.acl_handlers import AclHandlers
from pylog.broker.admin import AdminHandlers
from pylog.broker.authorization import RequestAuthorization
from pylog.broker.budget import RequestBudget
from pylog.broker.config import BrokerConfig, Listener
from pylog.broker.dispatch import Dispatcher
from pylog.broker.dynamic_config import DynamicBrokerConfig
from pylog.broker.dynamic_store import open_broker_config_store
from pylog.broker.fetch_sessions import FetchSessionCache
from pylog.broker.groups import GroupHandlers
from pylog.broker.meta import ensure_meta
from pylog.broker.network import Acceptor, ConnectionQuotas, ListenerSpec, Processor
from pylog.broker.partitions import AppendWaiters, PartitionLogs
from pylog.broker.replica_manager import ReplicaManager
from pylog.broker import (
    delete_records, elections, log_dirs, producers_admin, reassignments, txn_markers)
from pylog.broker.txn_markers import TxnMarkerService
from pylog.broker.txn_verification import TxnVerifier
from pylog.client.security import SecurityConfig, reload_ssl_contexts
from pylog.cluster.metadata import ClusterMetadata
from pylog.cluster.standalone import StandaloneMetadata
from pylog.coordinator.coordinator import GroupCoordinator
from pylog.errors import ConfigError
from pylog.log import LogManager
from pylog.protocol import ApiKey
from pylog.security.credentials import open_broker_store
from pylog.security.sasl import SaslService
from pylog.security.authorizer import AclAuthorizer, build_authorizer
from pylog.transactions.coordinator import TransactionCoordinator
from pylog.transactions.handlers import TransactionHandlers
from pylog.types import BrokerEndpoint, ListenerEndpoint

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
            leader_imbalance_check_s=config["leader.imbalance.check.interval.seconds"],
            listeners=endpoint.listeners)
        ensure_meta(config.log_dirs, endpoint.broker_id, metadata.cluster_id)
        return metadata
    cluster_id = ensure_meta(config.log_dirs, endpoint.broker_id)
    return StandaloneMetadata(config.log_dirs[0], endpoint, cluster_id)


def _tls_stamp(settings) -> tuple:
    """What a listener's TLS context is built from: its settings and its files' stamps."""
    return (settings, _file_stamp(settings.keystore_location),
            _file_stamp(settings.truststore_location))


def _file_stamp(path: str | None) -> tuple | None:
    """(inode, mtime, size) of a file, to see it was replaced; None without one."""
    if not path:
        return None
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_ino, stat.st_mtime_ns, stat.st_size


class Broker:
    """One pylog broker.

    >>> broker = Broker(BrokerConfig.load("conf/server.properties"))
    >>> broker.start()          # binds, loads logs, serves
    >>> broker.address          # ('127.0.0.1', 9092): the first listener
    >>> broker.addresses        # {'PLAINTEXT': ('127.0.0.1', 9092), 'SSL': (...)}
    >>> broker.stop()           # clean shutdown

    ``clock`` (monotonic seconds, for timeouts) and ``wall_ms`` (epoch milliseconds, for
    commit timestamps and offset retention) can be injected.

    ``txn_markers`` (a TxnMarkerService) serves WriteTxnMarkers; register
    ``callback(topic, partition, producer_id, commit, marker_offset)`` with
    ``broker.txn_markers.add_marker_listener`` to hear of each marker once replicated.

    Raises ConfigError (also when a listener's port is taken or its TLS files cannot be
    loaded) or KafkaStorageError (log dir locked by another broker) from ``start``.
    """

    def __init__(self, config: BrokerConfig, clock: Callable[[], float] = time.monotonic,
                 wall_ms: Callable[[], int] | None = None) -> None:
        self.config = config
        self.clock = clock
        self.wall_ms = wall_ms
        self.metadata: ClusterMetadata | None = None
        self.dynamic: DynamicBrokerConfig | None = None  # settings with dynamic configs
        self._initial: BrokerConfig = config  # the effective settings the broker started with
        self.manager: LogManager | None = None
        self.replicas: ReplicaManager | None = None
        self.coordinator: GroupCoordinator | None = None
        self.transactions: TransactionCoordinator | None = None
        self.txn_verifier: TxnVerifier | None = None
        self.sasl: SaslService | None = None
        self.authorizer: AclAuthorizer | None = None
        self.metrics = None  # pylog.broker.metrics.BrokerMetrics when metrics.listener is set
        self._metrics_server = None
        self._budget: RequestBudget | None = None
        self.txn_markers: TxnMarkerService | None = None  # WriteTxnMarkers; marker listeners
        self._servers: list[tuple[ListenerSpec, socket.socket]] = []
        # What each TLS listener's context was built from: settings and file stamps.
        self._tls_stamps: dict[str, tuple] = {}
        self._processors: list[Processor] = []
        self._acceptors: list[Acceptor] = []
        self._stopped = threading.Event()
        self._stop_lock = threading.Lock()

    @property
    def address(self) -> tuple[str, int]:
        """Where the first listener is bound."""
        assert self._servers, "not started"
        return self._servers[0][1].getsockname()[:2]

    @property
    def addresses(self) -> dict[str, tuple[str, int]]:
        """Where each listener is bound, by listener name."""
        return {spec.name: server.getsockname()[:2] for spec, server in self._servers}

    def start(self) -> "Broker":
        config = self.config
        for key, why in config.ignored:
            log.warning("%s: a Kafka setting pylog does not use (%s); ignored", key, why)
        # Dynamic broker configs (AlterConfigs) over server.properties, from the start: a
        # listener's certificate set that way is the one it serves after a restart too.
        self.dynamic = DynamicBrokerConfig(config, open_broker_config_store(
            config.log_dirs, config["broker.id"], config["zookeeper.connect"],
            session_timeout_ms=config["zookeeper.session.timeout.ms"],
            connection_timeout_ms=config["zookeeper.connection.timeout.ms"]),
            config["broker.id"])
        self._initial = self.dynamic.current  # what the parts below start with
        backlog = config["socket.listen.backlog.size"]
        try:
            specs = [self._listener_spec(listener) for listener in config.listeners]
            for spec, listener in zip(specs, config.listeners):
                self._servers.append((spec, self._bind(listener, backlog)))
        except BaseException:
            self._close_servers()
            self._close_storage()
            raise
        try:
            self._start_services()
        except BaseException as exc:
            self._close_servers()
            self._close_storage()
            if isinstance(exc, OSError) and exc.filename is not None:
                # meta.properties, topics.json...: a log dir the broker cannot write.
                raise ConfigError("log.dirs", f"cannot use {exc.filename}: "
                                              f"{exc.strerror or exc}") from None
            raise
        return self

    def _listener_spec(self, listener: Listener) -> ListenerSpec:
        tls = None
        if listener.uses_tls:
            settings = self._initial.tls_settings(listener.name)
            tls = settings.server_context()
            self._tls_stamps[listener.name] = _tls_stamp(settings)
        return ListenerSpec(listener.name, listener.security_protocol, tls)

    @staticmethod
    def _bind(listener: Listener, backlog: int) -> socket.socket:
        family = socket.AF_INET6 if ":" in listener.host else socket.AF_INET
        server = socket.socket(family, socket.SOCK_STREAM)
        try:
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind((listener.host, listener.port))
            server.listen(backlog)
        except OSError as exc:
            server.close()
            raise ConfigError("listeners", f"cannot listen on {listener.host}:{listener.port} "
                                           f"({listener.name}): {exc.strerror or exc}") from None
        return server

    def _close_servers(self) -> None:
        for _, server in self._servers:
            server.close()

    def _endpoint(self) -> BrokerEndpoint:
        """This broker as it registers: every advertised listener (port 0: the port
        bound), and as host/port the inter-broker listener's address (else the first)."""
        bound = self.addresses
        listeners = tuple(
            ListenerEndpoint(ad.name, ad.host, ad.port or bound[ad.name][1],
                             ad.security_protocol)
            for ad in self.config.advertised_listeners)
        main = next((ep for ep in listeners
                     if ep.name == self.config.inter_broker_listener_name), listeners[0])
        return BrokerEndpoint(self.config["broker.id"], main.host, main.port,
                              self.config["broker.rack"], listeners)

    def _start_services(self) -> None:
        config = self.config
        endpoint = self._endpoint()
        dynamic = self.dynamic
        initial = self._initial
        self.manager = LogManager(config.log_dirs, initial.log_config,
                                  cleaner_config=initial.cleaner_config,
                                  producer_id_expiration_ms=config["producer.id.expiration.ms"])
        self.manager.load()
        self.metadata = build_cluster_metadata(initial, endpoint)
        waiters = AppendWaiters()
        logs = PartitionLogs(self.manager, self.metadata, initial.log_config, waiters,
                             clustered=bool(config["zookeeper.connect"]))
        self.metadata.add_listener(logs.on_metadata_change)
        # Retention and the cleaner start only now that the loaded logs have their topics'
        # configs: with the defaults, a compacted topic's old segments would be deleted.
        self.manager.start(flush_check_ms=config["log.flush.scheduler.interval.ms"],
                           retention_check_ms=config["log.retention.check.interval.ms"],
                           checkpoint_ms=config["replica.high.watermark.checkpoint.interval.ms"])
        # How this broker reaches the others (replica fetchers, transaction markers): the
        # inter-broker listener's settings, dynamic ones included.
        inter_broker = SecurityConfig.from_mapping(initial.inter_broker_client_settings())
        if config["zookeeper.connect"]:
            self.replicas = ReplicaManager(
                logs, self.metadata, lag_time_ms=config["replica.lag.time.max.ms"],
                fetch_wait_max_ms=config["replica.fetch.wait.max.ms"],
                fetch_max_bytes=config["replica.fetch.response.max.bytes"],
                fetch_partition_max_bytes=config["replica.fetch.max.bytes"],
                fetch_backoff_ms=config["replica.fetch.backoff.ms"], wake=waiters.notify,
                listener=config.inter_broker_listener_name,
                security=inter_broker,
                leader_throttle_rate=initial["leader.replication.throttled.rate"],
                follower_throttle_rate=initial["follower.replication.throttled.rate"],
                quota_samples=config["replication.quota.window.num"],
                quota_window_s=config["replication.quota.window.size.seconds"])
            logs.replicas = self.replicas
            self.metadata.add_listener(self.replicas.on_metadata_change)
            self.replicas.start()
        self.coordinator = GroupCoordinator(config, self.metadata, logs, waiters,
                                            self.clock, wall_ms=self.wall_ms).start()
        self.transactions = TransactionCoordinator(config, self.metadata, logs, waiters,
                                                   self.clock, wall_ms=self.wall_ms)
        self.transactions.markers.security = inter_broker
        self.transactions.start()
        if config["transaction.partition.verification.enable"]:
            self.txn_verifier = logs.txn_verifier = TxnVerifier(
                self.transactions, self.metadata, config.inter_broker_listener_name,
                inter_broker, config["broker.id"], self.clock)
        self.sasl = SaslService(
            open_broker_store(config.log_dirs, config["zookeeper.connect"],
                              session_timeout_ms=config["zookeeper.session.timeout.ms"],
                              connection_timeout_ms=config["zookeeper.connection.timeout.ms"]),
            config["sasl.enabled.mechanisms"].split(","),
            reauth_ms=config["connections.max.reauth.ms"], clock=self.clock)
        group_handlers = GroupHandlers(self.coordinator, self.clock, self.transactions,
                                       self.txn_verifier)
        dispatcher = Dispatcher(AdminHandlers(dynamic, self.metadata, logs), logs, self.clock,
                                group_handlers, sasl=self.sasl)
        dispatcher.fetch_max_bytes = config["fetch.max.bytes"]
        dispatcher.fetch_sessions = FetchSessionCache(
            config["max.incremental.fetch.session.cache.slots"], waiters)
        dispatcher.serve(ApiKey.TXN_OFFSET_COMMIT, (0, 4), group_handlers.txn_offset_commit)
        for api_key, versions, handler in TransactionHandlers(
                self.transactions, self.coordinator.partition_of, self.clock).services():
            dispatcher.serve(api_key, versions, handler)
        self._start_authorizer(dispatcher)
        self._start_metrics(dispatcher, logs)
        budget = self._budget = RequestBudget(config["queued.max.request.bytes"])
        self.txn_markers = TxnMarkerService(logs, self.clock)
        dispatcher.serve(txn_markers.API_KEY, txn_markers.VERSIONS, self.txn_markers.handle)
        dispatcher.serve(delete_records.API_KEY, delete_records.VERSIONS,
                         delete_records.DeleteRecordsHandler(logs, self.clock).handle)
        dispatcher.serve(elections.API_KEY, elections.VERSIONS,
                         elections.ElectLeadersHandler(self.metadata, self.clock,
                                                       wake=waiters.notify).handle)
        dispatcher.serve(log_dirs.API_KEY, log_dirs.VERSIONS, log_dirs.LogDirsHandler(logs).handle)
        dispatcher.serve(producers_admin.API_KEY, producers_admin.VERSIONS,
                         producers_admin.DescribeProducersHandler(logs).handle)
        moves = reassignments.ReassignmentHandlers(self.metadata)
        dispatcher.serve(reassignments.ALTER_API_KEY, reassignments.VERSIONS, moves.alter)
        dispatcher.serve(reassignments.LIST_API_KEY, reassignments.VERSIONS, moves.list)
        self.txn_markers.add_marker_listener(self.coordinator.on_transaction_completed)
        self.transactions.markers.local = self.txn_markers.write
        self._processors = [
            Processor(i, dispatcher, config["socket.request.max.bytes"], waiters.add,
                      waiters.remove, self.clock, budget, config["connections.max.idle.ms"])
            for i in range(config["num.network.threads"])]
        for processor in self._processors:
            processor.start()
        quotas = ConnectionQuotas(initial["max.connections"], initial["max.connections.per.ip"],
                                  initial.connection_overrides)
        self._acceptors = [Acceptor(server, self._processors, config["socket.send.buffer.bytes"],
                                    config["socket.receive.buffer.bytes"], spec, quotas)
                           for spec, server in self._servers]
        dynamic.add_reconfigurable(self._reconfigure(logs, quotas), since=initial)
        for acceptor in self._acceptors:
            acceptor.start()
        log.info("broker %d serving on %s (cluster %s)", endpoint.broker_id,
                 ", ".join(str(listener) for listener in endpoint.listeners),
                 self.metadata.cluster_id)

    def _reconfigure(self, logs: PartitionLogs, quotas: ConnectionQuotas):
        """What applies a change of the dynamic broker configs."""
        manager, metadata, replicas = self.manager, self.metadata, self.replicas
        throttles = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")

        def apply(old: BrokerConfig, new: BrokerConfig) -> None:
            if replicas is not None and any(new[key] != old[key] for key in throttles):
                replicas.set_throttle_rates(*(new[key] for key in throttles))
            if new.log_config != old.log_config:
                manager.default_config = new.log_config
                logs.set_default_config(new.log_config)
            if new.cleaner_config != old.cleaner_config:
                manager.cleaner.reconfigure(new.cleaner_config)
            if (new["max.connections"], new["max.connections.per.ip"],
                    new.connection_overrides) != (old["max.connections"],
                                                  old["max.connections.per.ip"],
                                                  old.connection_overrides):
                quotas.reconfigure(new["max.connections"], new["max.connections.per.ip"],
                                   new.connection_overrides)
            unclean = new["unclean.leader.election.enable"]
            if unclean != old["unclean.leader.election.enable"] and \
                    hasattr(metadata, "set_unclean_leader_election_default"):
                metadata.set_unclean_leader_election_default(unclean)
            for acceptor in self._acceptors:
                if (self._reload_tls(acceptor, new) and self.replicas is not None
                        and acceptor.listener.name == new.inter_broker_listener_name):
                    self._reload_inter_broker_security(new)
        return apply

    def _reload_inter_broker_security(self, config: BrokerConfig) -> None:
        """The replica fetchers and the transaction markers connect with the inter-broker
        listener's keystore and truststore: once the listener took new ones (a new file,
        or the same one replaced in place), their next connections present and trust them
        too. Files that do not load as a client's leave them with the old ones."""
        name = config.inter_broker_listener_name
        try:
            security = SecurityConfig.from_mapping(config.inter_broker_client_settings())
            if security.uses_tls:
                security.check_files()
        except ConfigError as error:
            log.error("replica fetchers and transaction markers keep their TLS settings: %s",
                      error)
            return
        reload_ssl_contexts()
        self.replicas.set_security(security)
        if self.transactions is not None:
            self.transactions.markers.security = security
        if self.txn_verifier is not None:
            self.txn_verifier.security = security
        log.info("replica fetchers and transaction markers: new connections use the TLS "
                 "settings of listener %s", name)

    def _reload_tls(self, acceptor: Acceptor, config: BrokerConfig) -> bool:
        """A TLS listener whose settings or keystore/truststore files changed takes a new
        context: new connections present the new certificate, open ones keep theirs.
        True if it did."""
        spec = acceptor.listener
        if spec.tls is None:
            return False
        settings = config.tls_settings(spec.name)
        stamp = _tls_stamp(settings)
        if self._tls_stamps.get(spec.name) == stamp:
            return False
        try:
            context = settings.server_context()
        except ConfigError as error:
            log.error("listener %s keeps its TLS certificate: %s", spec.name, error)
            return False
        acceptor.listener = dataclasses.replace(spec, tls=context)
        self._tls_stamps[spec.name] = stamp
        log.info("listener %s: TLS context reloaded from %s", spec.name,
                 settings.keystore_location)
        return True

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
            for acceptor in self._acceptors:
                acceptor.stop()
            for acceptor in self._acceptors:
                acceptor.join()
            for processor in self._processors:
                processor.stop()
            for processor in self._processors:
                processor.join()
            if self._metrics_server is not None:
                self._metrics_server.shutdown()
                self._metrics_server.server_close()
            self._close_storage()
            self._stopped.set()
            log.info("broker stopped cleanly")

    def _start_metrics(self, dispatcher: Dispatcher, logs: PartitionLogs) -> None:
        """``metrics.listener``: Prometheus metrics (pylog.broker.metrics) over HTTP."""
        listener = self.config["metrics.listener"]
        if not listener:
            return
        from prometheus_client import start_http_server

        from pylog.broker.metrics import BrokerMetrics, parse_listener

        def connections() -> dict[str, int]:
            total: dict[str, int] = {}
            for processor in self._processors:
                for name, count in processor.counts()[0].items():
                    total[name] = total.get(name, 0) + count
            return total

        metrics = BrokerMetrics(
            self.metadata, logs, connections,
            parked=lambda: sum(p.counts()[1] for p in self._processors),
            queued_bytes=lambda: self._budget.used)
        host, port = parse_listener(listener)
        try:
            self._metrics_server, _ = start_http_server(port, host, registry=metrics.registry)
        except OSError as error:
            raise ConfigError("metrics.listener", f"cannot listen on {listener}: "
                              f"{error.strerror or error}") from None
        self.metadata.add_listener(metrics.on_metadata_change)
        metrics.on_metadata_change()
        dispatcher.metrics = metrics
        self.metrics = metrics
        log.info("metrics at http://%s:%d/metrics", host,
                 self._metrics_server.server_address[1])

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
        if self.sasl is not None:
            self.sasl.close()
            self.sasl = None
        if self.authorizer is not None:
            self.authorizer.close()
            self.authorizer = None
        if self.txn_verifier is not None:
            self.txn_verifier.stop()
            self.txn_verifier = None
        if self.transactions is not None:
            self.transactions.stop()
            self.transactions = None
        if self.coordinator is not None:
            self.coordinator.stop()
            self.coordinator = None
        if self.replicas is not None:
            self.replicas.stop()
            self.replicas = None
        if self.metadata is not None:
            self.metadata.close()
            self.metadata = None
        if self.dynamic is not None:
            self.dynamic.close()
            self.dynamic = None
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
