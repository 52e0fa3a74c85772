"""Broker configuration: Kafka's ``server.properties`` names, typed, with defaults.

``BrokerConfig.load(path, overrides)`` reads a Java-style properties file (``key=value``
or ``key: value``, ``#``/``!`` comments), applies ``--override key=value`` pairs on top,
and checks every key and value. An unknown key or an invalid value raises
``ConfigError`` naming the key, before anything starts.

Time settings come in Kafka's families (``log.retention.ms`` / ``.minutes`` / ``.hours``,
``log.roll.ms`` / ``.hours``): the finest unit given wins, as in Kafka.
"""

from __future__ import annotations

import difflib
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from pylog.errors import ConfigError
from pylog.client.security import parse_jaas_credentials
from pylog.security.sasl import DEFAULT_MECHANISMS as DEFAULT_SASL_MECHANISMS
from pylog.security.sasl import SUPPORTED_MECHANISMS as SUPPORTED_SASL_MECHANISMS
from pylog.security.sasl import parse_mechanisms
from pylog.security.tls import TlsSettings
from pylog.types import SECURITY_PROTOCOLS
from pylog.log import LogConfig
from pylog.security.authorizer import check_class_name, parse_super_users
from pylog.log.cleaner_manager import CleanerConfig
from pylog.log.config import MAX_LONG, parse_cleanup_policy

HOUR_MS = 3600 * 1000


def _int(key: str, raw: str) -> int:
    try:
        return int(raw.strip())
    except ValueError:
        raise ConfigError(key, f"expected an integer, got {raw!r}") from None


def _bool(key: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(key, f"expected true or false, got {raw!r}")
    return value == "true"


def _float(key: str, raw: str) -> float:
    try:
        return float(raw.strip())
    except ValueError:
        raise ConfigError(key, f"expected a number, got {raw!r}") from None


def _str(key: str, raw: str) -> str:
    return raw.strip()


def _host_port(key: str, raw: str) -> str:
    value = raw.strip()
    if value:
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or int(port) > 65535:
            raise ConfigError(key, f"expected HOST:PORT, got {raw!r}")
    return value


def _connection_overrides(key: str, raw: str) -> str:
    parse_connection_overrides(key, raw)
    return raw.strip()


def parse_connection_overrides(key: str, raw: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``host:count,...`` as an address -> limit map
    (a host name is resolved once, at start)."""
    found: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        host, sep, count = item.rpartition(":")
        if not sep or not host or not count.strip().isdigit():
            raise ConfigError(key, f"expected host:count, got {item!r}")
        try:
            address = socket.gethostbyname(host.strip().strip("[]"))
        except OSError:
            raise ConfigError(key, f"cannot resolve {host!r}") from None
        found[address] = int(count)
    return found


def _sasl_mechanisms(key: str, raw: str) -> str:
    return ",".join(parse_mechanisms(key, raw))


def _jaas(key: str, raw: str) -> str:
    parse_jaas_credentials(key, raw)  # checks it names a username and a password
    return raw.strip()


# key: (parser, default, one-line description). Defaults follow Kafka's.
_SETTINGS: dict[str, tuple[Callable[[str, str], object], object, str]] = {
    "broker.id": (_int, 0, "this broker's id, unique in a cluster"),
    "broker.rack": (_str, None, "rack reported in Metadata (optional)"),
    "metrics.listener": (_host_port, "",
                         "HOST:PORT serving Prometheus metrics at /metrics (empty: off)"),
    "listeners": (_str, "PLAINTEXT://127.0.0.1:9092",
                  "NAME://host:port,... to listen on, one socket each"),
    "advertised.listeners": (_str, None,
                             "NAME://host:port,... given to clients, if not the listeners'"),
    "listener.security.protocol.map": (
        _str, "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        "NAME:PROTOCOL,... for every listener name"),
    "inter.broker.listener.name": (_str, None, "the listener brokers use between them"),
    "security.inter.broker.protocol": (_str, "PLAINTEXT",
                                       "the inter-broker listener by protocol name, if "
                                       "inter.broker.listener.name is not set"),
    "ssl.keystore.type": (_str, "PEM", "PEM (the only format served)"),
    "ssl.keystore.location": (_str, None, "PEM file: private key and certificate chain"),
    "ssl.key.password": (_str, None, "password of the keystore's private key, if encrypted"),
    "ssl.truststore.type": (_str, "PEM", "PEM (the only format served)"),
    "ssl.truststore.location": (_str, None, "PEM file of trusted CA certificates"),
    "ssl.client.auth": (_str, "none", "none, requested or required: client certificates"),
    "ssl.enabled.protocols": (_str, "TLSv1.2,TLSv1.3", "TLS versions accepted"),
    "ssl.endpoint.identification.algorithm": (
        _str, "https", "https: check the host name of brokers this one connects to; "
                       "empty: do not"),
    "log.dirs": (_str, None, "comma-separated data directories (overrides log.dir)"),
    "log.dir": (_str, "/tmp/pylog-logs", "data directory when log.dirs is not set"),
    "num.partitions": (_int, 1, "partitions of auto-created topics"),
    "default.replication.factor": (_int, 1, "replication factor of auto-created topics"),
    "max.partitions.per.topic": (_int, 10000, "most partitions a topic may be created with"),
    "max.request.partition.size.limit": (
        _int, 2000, "most partitions one DescribeTopicPartitions answer holds"),
    "auto.create.topics.enable": (_bool, True, "create unknown topics on Metadata requests"),
    "delete.topic.enable": (_bool, True, "allow DeleteTopics"),
    "log.segment.bytes": (_int, 1 << 30, "roll a segment at this size"),
    "log.roll.ms": (_int, None, "roll a segment after this long"),
    "log.roll.hours": (_int, 168, "roll a segment after this many hours"),
    "log.roll.jitter.ms": (_int, None, "roll each segment up to this much before log.roll.ms "
                                       "(drawn at random per segment)"),
    "log.roll.jitter.hours": (_int, 0, "as log.roll.jitter.ms, in hours"),
    "log.retention.ms": (_int, None, "delete segments older than this (-1: keep)"),
    "log.retention.minutes": (_int, None, "as log.retention.ms, in minutes"),
    "log.retention.hours": (_int, 168, "as log.retention.ms, in hours"),
    "log.retention.bytes": (_int, -1, "delete old segments beyond this size (-1: no limit)"),
    "log.retention.check.interval.ms": (_int, 300000, "how often retention runs"),
    "log.index.interval.bytes": (_int, 4096, "bytes between offset index entries"),
    "log.index.size.max.bytes": (_int, 10 * 1024 * 1024, "largest index file"),
    "log.flush.interval.messages": (_int, None, "fsync after this many messages"),
    "log.flush.interval.ms": (_int, None, "fsync after this long"),
    "log.flush.scheduler.interval.ms": (_int, 1000, "how often time-based flushes are checked"),
    "log.flush.expose.unflushed": (_bool, True, "false: consumers see only fsynced messages"),
    "message.max.bytes": (_int, 1048588, "largest record batch accepted"),
    "log.cleanup.policy": (parse_cleanup_policy, "delete",
                           "delete, compact or compact,delete (topics' cleanup.policy)"),
    "log.cleaner.enable": (_bool, True, "run the cleaner threads that compact logs"),
    "log.cleaner.threads": (_int, 1, "threads compacting logs"),
    "log.cleaner.dedupe.buffer.size": (_int, 128 * 1024 * 1024,
                                       "memory for the cleaners' key maps, all threads"),
    "log.cleaner.backoff.ms": (_int, 15000, "cleaner's sleep when no log needs cleaning"),
    "log.cleaner.min.cleanable.ratio": (_float, 0.5, "min.cleanable.dirty.ratio of topics"),
    "log.cleaner.min.compaction.lag.ms": (_int, 0, "min.compaction.lag.ms of topics"),
    "log.cleaner.delete.retention.ms": (_int, 24 * HOUR_MS, "delete.retention.ms of topics"),
    "log.cleaner.max.compaction.lag.ms": (_int, MAX_LONG, "max.compaction.lag.ms of topics"),
    "compression.type": (_str, "producer",
                         "compression.type of topics: producer, uncompressed, gzip, snappy, "
                         "lz4 or zstd"),
    "compression.gzip.level": (_int, -1, "compression.gzip.level of topics: 1-9, -1 for "
                                         "the default"),
    "compression.lz4.level": (_int, 9, "compression.lz4.level of topics: 1-17"),
    "compression.zstd.level": (_int, 3, "compression.zstd.level of topics: -131072-22"),
    "log.preallocate": (_bool, False, "preallocate of topics (taken, no effect: segment "
                                      "files grow as they are written)"),
    "log.segment.delete.delay.ms": (_int, 60000, "file.delete.delay.ms of topics (taken; "
                                                 "deleted segments are removed at once, "
                                                 "readers keep their open files)"),
    "log.message.format.version": (_str, "3.0-IV1", "message.format.version of topics "
                                                    "(ignored, as by Kafka 3.x)"),
    "log.message.timestamp.type": (_str, "CreateTime",
                                   "message.timestamp.type of topics: CreateTime or "
                                   "LogAppendTime"),
    "log.message.timestamp.before.max.ms": (_int, MAX_LONG,
                                            "message.timestamp.before.max.ms of topics"),
    "log.message.timestamp.after.max.ms": (_int, MAX_LONG,
                                           "message.timestamp.after.max.ms of topics"),
    "log.message.timestamp.difference.max.ms": (
        _int, MAX_LONG, "message.timestamp.difference.max.ms of topics (deprecated in Kafka)"),
    "producer.id.expiration.ms": (_int, 24 * HOUR_MS,
                                  "forget an idempotent producer idle for this long"),
    "socket.request.max.bytes": (_int, 104857600, "largest request; bigger closes the connection"),
    "socket.send.buffer.bytes": (_int, 102400, "SO_SNDBUF (-1: the kernel sizes and "
                                               "grows it)"),
    "socket.receive.buffer.bytes": (_int, 102400, "SO_RCVBUF (-1: the kernel sizes and "
                                                  "grows it)"),
    "socket.listen.backlog.size": (_int, 512, "connections the kernel queues for a listener "
                                              "before they are accepted (Kafka's default is "
                                              "50; a burst of clients connecting at once "
                                              "waits less with more)"),
    "max.connections": (_int, 2147483647, "most connections open at once, all listeners: "
                                          "beyond it new ones wait to be accepted"),
    "max.connections.per.ip": (_int, 2147483647, "most connections from one address: beyond "
                                                 "it a new one is closed at once"),
    "max.connections.per.ip.overrides": (_connection_overrides, "",
                                         "host:count,...: max.connections.per.ip by address"),
    "fetch.max.bytes": (_int, 57671680, "most bytes a consumer's Fetch response holds (at "
                                        "least one batch), whatever the request asks"),
    "queued.max.request.bytes": (_int, 512 * 1024 * 1024,
                                 "request bytes buffered broker-wide before reads pause"),
    "connections.max.idle.ms": (_int, 600000,
                                "close connections idle this long (-1: never)"),
    "num.network.threads": (_int, 3, "processor threads that read, handle and write requests"),
    "min.insync.replicas": (_int, 1, "acks=all needs at least this many in-sync replicas"),
    "unclean.leader.election.enable": (_bool, False,
                                       "let an out-of-sync replica lead when no ISR member lives"),
    "replica.lag.time.max.ms": (_int, 30000,
                                "a follower not caught up for this long leaves the ISR"),
    "replica.fetch.wait.max.ms": (_int, 500, "longest a follower's fetch waits at the leader"),
    "replica.fetch.max.bytes": (_int, 1048576, "bytes per partition in a follower's fetch"),
    "replica.fetch.response.max.bytes": (_int, 10485760, "bytes per follower fetch response"),
    "replica.fetch.backoff.ms": (_int, 200, "wait after a follower fetch fails"),
    "max.incremental.fetch.session.cache.slots": (
        _int, 1000, "consumers' fetch sessions kept (KIP-227; 0: none, every Fetch is full)"),
    "leader.replication.throttled.rate": (
        _int, MAX_LONG, "bytes per second a leader sends of the partitions its topic's "
                        "leader.replication.throttled.replicas names to followers out of the ISR"),
    "follower.replication.throttled.rate": (
        _int, MAX_LONG, "bytes per second a follower out of the ISR fetches of the partitions "
                        "its topic's follower.replication.throttled.replicas names"),
    "replication.quota.window.num": (_int, 11, "windows the replication throttle measures over"),
    "replication.quota.window.size.seconds": (_int, 1, "length of one of those windows"),
    "replica.high.watermark.checkpoint.interval.ms": (
        _int, 5000, "how often high watermarks (and the other checkpoints) are written"),
    "controlled.shutdown.enable": (_bool, True,
                                   "on SIGTERM, hand leaderships to other replicas first"),
    "controlled.shutdown.timeout.ms": (_int, 30000,
                                       "longest a controlled shutdown waits for leaders to move"),
    "auto.leader.rebalance.enable": (_bool, True,
                                     "move leadership back to preferred replicas in the ISR"),
    "leader.imbalance.check.interval.seconds": (_int, 300,
                                                "how often preferred leaders are restored"),
    "offsets.topic.num.partitions": (_int, 50, "partitions of __consumer_offsets"),
    "offsets.topic.replication.factor": (
        _int, 3, "replication factor of __consumer_offsets (capped at the live brokers)"),
    "offsets.topic.segment.bytes": (_int, 100 * 1024 * 1024,
                                    "segment size of __consumer_offsets"),
    "offsets.retention.minutes": (_int, 7 * 24 * 60,
                                  "committed offsets of an empty group expire after this"),
    "offsets.retention.check.interval.ms": (_int, 600000, "how often offsets expiry runs"),
    "offsets.commit.timeout.ms": (_int, 5000,
                                  "longest an offset commit waits for the in-sync replicas"),
    "offset.metadata.max.bytes": (_int, 4096, "largest metadata string of a committed offset"),
    "offsets.load.buffer.size": (_int, 5 * 1024 * 1024,
                                 "bytes read at a time when loading groups"),
    "group.min.session.timeout.ms": (_int, 6000, "shortest session.timeout.ms of a member"),
    "group.max.session.timeout.ms": (_int, 1800000, "longest session.timeout.ms of a member"),
    "group.initial.rebalance.delay.ms": (
        _int, 3000, "wait this long (up to the rebalance timeout) for more members to join "
                    "an empty group"),
    "group.max.size": (_int, 2147483647, "most members a group may have"),
    "transaction.state.log.num.partitions": (_int, 50, "partitions of __transaction_state"),
    "transaction.state.log.replication.factor": (
        _int, 3, "replication factor of __transaction_state (capped at the live brokers)"),
    "transaction.state.log.min.isr": (_int, 2, "min.insync.replicas of __transaction_state"),
    "transaction.state.log.segment.bytes": (_int, 100 * 1024 * 1024,
                                            "segment size of __transaction_state"),
    "transaction.state.log.load.buffer.size": (
        _int, 5 * 1024 * 1024, "bytes read at a time when loading transactional ids"),
    "transaction.max.timeout.ms": (_int, 900000,
                                   "longest transaction.timeout.ms a producer may ask for"),
    "transaction.partition.verification.enable": (
        _bool, True, "partition leaders ask the transaction coordinator whether a "
                     "transactional batch's partition is in its producer's transaction "
                     "before it opens one there (KIP-890)"),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (
        _int, 10000, "how often transactions past their timeout are aborted"),
    "transactional.id.expiration.ms": (
        _int, 7 * 24 * HOUR_MS, "forget a transactional id with no transaction for this long"),
    "transaction.remove.expired.transaction.cleanup.interval.ms": (
        _int, HOUR_MS, "how often expired transactional ids are removed"),
    "zookeeper.connect": (_str, None, "host:port[,host:port][/chroot]; set for cluster mode"),
    "zookeeper.session.timeout.ms": (_int, 18000, "ZooKeeper session timeout"),
    "zookeeper.connection.timeout.ms": (_int, 18000, "wait this long for the first connection"),
    "sasl.enabled.mechanisms": (_sasl_mechanisms, ",".join(DEFAULT_SASL_MECHANISMS),
                                "SASL mechanisms of SASL listeners: PLAIN, SCRAM-SHA-256, "
                                "SCRAM-SHA-512"),
    "sasl.mechanism.inter.broker.protocol": (
        _str, "SCRAM-SHA-512", "mechanism this broker logs in with on a SASL inter-broker "
                               "listener"),
    "sasl.jaas.config": (_jaas, None, "this broker's own SASL login, JAAS style (username=\"...\" "
                                      "password=\"...\"); usually given per listener and "
                                      "mechanism as listener.name.<l>.<mech>.sasl.jaas.config"),
    "connections.max.reauth.ms": (_int, 0, "SASL clients must re-authenticate within this "
                                           "(0: never)"),
    "authorizer.class.name": (_str, "", "set (e.g. kafka.security.authorizer.AclAuthorizer) "
                                        "to check every request against ACLs"),
    "super.users": (_str, None, "User:a;User:b: principals the authorizer lets do anything"),
    "allow.everyone.if.no.acl.found": (_bool, False,
                                       "allow requests on resources that have no ACL"),
}


# Kafka broker settings pylog has no use for: a Kafka server.properties that sets them
# starts, and the broker logs each one it ignores with the reason. The value must parse
# as Kafka's type would; None accepts any text.
_SHUTDOWN_WAITS = "controlled shutdown waits up to controlled.shutdown.timeout.ms instead"
_IDS_GIVEN = "broker ids are given, never generated"
_NO_PURGATORY = "waiting requests leave as they end"
_PROMETHEUS = "metrics are served at metrics.listener (Prometheus)"
_CHECKPOINTS = "checkpoints are written every replica.high.watermark.checkpoint.interval.ms"
_UNUSED: dict[str, tuple[Callable[[str, str], object] | None, str]] = {
    "num.io.threads": (_int, "requests are handled on the num.network.threads processors"),
    "background.threads": (_int, "background work has threads of its own"),
    "num.recovery.threads.per.data.dir": (_int, "logs are loaded by one thread per broker"),
    "num.replica.fetchers": (_int, "a follower fetches from each leader broker on one "
                                   "connection"),
    "replica.alter.log.dirs.io.max.bytes.per.second": (
        _int, "replicas do not move between one broker's log directories"),
    "queued.max.requests": (_int, "queued.max.request.bytes bounds the queued requests"),
    "request.timeout.ms": (_int, "the broker sends no requests that need it"),
    "controller.socket.timeout.ms": (_int, "no controller-to-broker requests: brokers "
                                           "follow ZooKeeper"),
    "replica.fetch.min.bytes": (_int, "a follower's fetch is answered once it has any "
                                      "record, up to replica.fetch.wait.max.ms"),
    "replica.socket.timeout.ms": (_int, "followers time out by replica.fetch.wait.max.ms"),
    "replica.socket.receive.buffer.bytes": (_int, "followers use the system's buffer size"),
    "controlled.shutdown.max.retries": (_int, _SHUTDOWN_WAITS),
    "controlled.shutdown.retry.backoff.ms": (_int, _SHUTDOWN_WAITS),
    "leader.imbalance.per.broker.percentage": (_int, "every preferred leader in the ISR is "
                                                     "restored at each check"),
    "reserved.broker.max.id": (_int, _IDS_GIVEN),
    "broker.id.generation.enable": (_bool, _IDS_GIVEN),
    "zookeeper.max.in.flight.requests": (_int, "the ZooKeeper client pipelines as it needs"),
    "fetch.purgatory.purge.interval.requests": (_int, _NO_PURGATORY),
    "producer.purgatory.purge.interval.requests": (_int, _NO_PURGATORY),
    "delete.records.purgatory.purge.interval.requests": (_int, _NO_PURGATORY),
    "metric.reporters": (None, _PROMETHEUS),
    "metrics.num.samples": (_int, _PROMETHEUS),
    "metrics.sample.window.ms": (_int, _PROMETHEUS),
    "metrics.recording.level": (None, _PROMETHEUS),
    "auto.include.jmx.reporter": (_bool, "there is no JMX"),
    "log.flush.offset.checkpoint.interval.ms": (_int, _CHECKPOINTS),
    "log.flush.start.offset.checkpoint.interval.ms": (_int, _CHECKPOINTS),
    "log.cleaner.io.buffer.size": (_int, "the cleaner reads a segment at a time"),
    "log.cleaner.io.buffer.load.factor": (_float, "the cleaner's key map is sized by "
                                                  "log.cleaner.dedupe.buffer.size"),
    "log.cleaner.io.max.bytes.per.second": (_float, "the cleaner is not throttled"),
    "log.message.downconversion.enable": (_bool, "records are served in the v2 format only"),
    "inter.broker.protocol.version": (None, "brokers speak the versions they negotiate"),
    "offsets.topic.compression.codec": (_int, "offset commits are written uncompressed"),
    "zookeeper.set.acl": (_bool, "ZooKeeper znodes are written without ACLs"),
    **{key: (parse, "SASL/GSSAPI (Kerberos) is not served") for key, parse in (
        ("sasl.kerberos.service.name", None), ("sasl.kerberos.kinit.cmd", None),
        ("sasl.kerberos.ticket.renew.window.factor", _float),
        ("sasl.kerberos.ticket.renew.jitter", _float),
        ("sasl.kerberos.min.time.before.relogin", _int),
        ("sasl.kerberos.principal.to.local.rules", None))},
}
# Of those, the ones whose non-default value asks for something pylog cannot do and should
# not pretend to: the broker refuses to start rather than ignore them.
_UNUSED_ONLY_DEFAULT = {"zookeeper.set.acl": False}


# Settings AlterConfigs may change while the broker runs (Kafka's dynamic broker configs,
# KIP-226), per broker or as the cluster-wide default: the topics' defaults, the connection
# limits and the cleaner's threads. Every other setting needs a restart.
_LOG_DEFAULTS = frozenset({
    "log.segment.bytes", "log.roll.ms", "log.roll.hours", "log.roll.jitter.ms",
    "log.roll.jitter.hours", "log.retention.ms", "log.retention.minutes",
    "log.retention.hours", "log.retention.bytes", "log.index.interval.bytes",
    "log.index.size.max.bytes", "log.flush.interval.messages", "log.flush.interval.ms",
    "log.flush.expose.unflushed", "message.max.bytes", "min.insync.replicas",
    "unclean.leader.election.enable", "log.cleanup.policy", "log.cleaner.min.cleanable.ratio",
    "log.cleaner.min.compaction.lag.ms", "log.cleaner.delete.retention.ms",
    "log.cleaner.max.compaction.lag.ms", "compression.type", "compression.gzip.level",
    "compression.lz4.level", "compression.zstd.level", "log.preallocate",
    "log.segment.delete.delay.ms", "log.message.format.version", "log.message.timestamp.type",
    "log.message.timestamp.before.max.ms", "log.message.timestamp.after.max.ms",
    "log.message.timestamp.difference.max.ms"})
DYNAMIC_SETTINGS = _LOG_DEFAULTS | {
    "max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides",
    "log.cleaner.threads", "log.cleaner.dedupe.buffer.size", "log.cleaner.backoff.ms",
    "leader.replication.throttled.rate", "follower.replication.throttled.rate"}
# Kafka settings pylog ignores (above) that Kafka lets change at run time: AlterConfigs
# takes them too, and they stay ignored.
DYNAMIC_IGNORED = frozenset({
    "num.io.threads", "background.threads", "num.replica.fetchers",
    "num.recovery.threads.per.data.dir", "log.cleaner.io.buffer.size",
    "replica.alter.log.dirs.io.max.bytes.per.second",
    "log.cleaner.io.buffer.load.factor", "log.cleaner.io.max.bytes.per.second",
    "metric.reporters", "log.message.downconversion.enable",
    "sasl.kerberos.service.name", "sasl.kerberos.kinit.cmd",
    "sasl.kerberos.ticket.renew.window.factor", "sasl.kerberos.ticket.renew.jitter",
    "sasl.kerberos.min.time.before.relogin", "sasl.kerberos.principal.to.local.rules"})


# A listener's TLS settings, changed per broker with the listener's prefix
# (``listener.name.ssl.ssl.keystore.location``): new connections get the new certificate.
DYNAMIC_LISTENER_SETTINGS = frozenset({
    "ssl.keystore.location", "ssl.key.password", "ssl.keystore.type",
    "ssl.truststore.location", "ssl.truststore.type", "ssl.client.auth",
    "ssl.enabled.protocols"})


def is_listener_tls_key(key: str) -> bool:
    """``listener.name.<listener>.ssl.*`` that may change while the broker runs."""
    match = _LISTENER_KEY.match(key)
    return bool(match) and match["setting"] in DYNAMIC_LISTENER_SETTINGS


def dynamic_kind(key: str) -> str:
    """How AlterConfigs treats broker setting ``key``: ``"dynamic"`` (applied at once),
    ``"ignored"`` (a Kafka setting pylog does not use, taken), ``"static"`` (needs a
    restart) or ``"unknown"``."""
    if key in DYNAMIC_SETTINGS or is_listener_tls_key(key):
        return "dynamic"
    if key in DYNAMIC_IGNORED:
        return "ignored"
    if key in _SETTINGS or key in _UNUSED or _listener_setting(key) != key:
        return "static"
    return "unknown"


def unknown_setting(key: str) -> str:
    """The message for a key that is no broker setting, with the one it resembles."""
    return "unknown broker setting" + _did_you_mean(key)


# Settings a listener may override as ``listener.name.<lower-case name>.<setting>``.
LISTENER_SETTINGS = {key for key in _SETTINGS if key.startswith("ssl.")}
_LISTENER_KEY = re.compile(r"^listener\.name\.(?P<name>[a-z0-9_-]+)\.(?P<setting>.+)$")
_LISTENER = re.compile(r"^(?P<name>[A-Za-z0-9_-]+)://(?P<host>\[[^\]]*\]|[^:/\[\]]*):"
                       r"(?P<port>-?\d+)$")


@dataclass(frozen=True)
class Listener:
    """One listener: where it binds (or is advertised), its name and security protocol."""

    host: str
    port: int
    name: str = "PLAINTEXT"
    security_protocol: str = "PLAINTEXT"

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")


@dataclass(frozen=True)
class BrokerConfig:
    """A checked broker configuration. ``values`` holds every key with its typed value;
    ``explicit`` the keys the file or an override set (the others hold their defaults)."""

    values: Mapping[str, object]
    explicit: frozenset[str] = frozenset()
    ignored: tuple[tuple[str, str], ...] = ()
    """Kafka settings given that pylog does not use: (key, why), for the broker's log."""

    @classmethod
    def load(cls, path: Path | str | None, overrides: list[str] | Mapping[str, str] = ()
             ) -> "BrokerConfig":
        """Read ``path`` (optional), then apply overrides (``"k=v"`` strings or a mapping).

        Raises ConfigError naming the key for unknown keys or invalid values, and
        ConfigError("config", ...) if the file cannot be read.
        """
        raw: dict[str, str] = {}
        if path is not None:
            try:
                raw.update(parse_properties(Path(path).read_text()))
            except OSError as exc:
                raise ConfigError("config", f"cannot read {path}: {exc.strerror}") from None
        if isinstance(overrides, Mapping):
            raw.update({k: str(v) for k, v in overrides.items()})
        else:
            for item in overrides:
                key, sep, value = item.partition("=")
                if not sep:
                    raise ConfigError(key.strip() or item, "override must be key=value")
                raw[key.strip()] = value
        return cls.from_mapping(raw)

    @classmethod
    def from_mapping(cls, raw: Mapping[str, str]) -> "BrokerConfig":
        values = {key: default for key, (_, default, _) in _SETTINGS.items()}
        ignored = []
        for key, text in raw.items():
            setting = _listener_setting(key)
            if setting in _UNUSED:
                ignored.append((key, _unused(key, text)))
                continue
            if setting not in _SETTINGS:
                raise ConfigError(key, unknown_setting(key))
            values[key] = _SETTINGS[setting][0](key, text)
        config = cls(values, frozenset(raw) - {key for key, _ in ignored}, tuple(ignored))
        config._check()
        return config

    def __getitem__(self, key: str):
        return self.values[key]

    def with_dynamic(self, dynamic: Mapping[str, str]) -> "BrokerConfig":
        """This configuration with dynamic settings (``key: text``, from AlterConfigs)
        over it, checked as a whole. ``explicit`` stays the file's keys.

        Raises ConfigError naming the key for a key that cannot change at run time or a
        bad value.
        """
        values = dict(self.values)
        for key, text in dynamic.items():
            kind = dynamic_kind(key)
            if kind == "ignored":
                _unused(key, text)
            elif kind == "dynamic":
                values[key] = _SETTINGS[_listener_setting(key)][0](key, text)
            else:
                raise ConfigError(key, "cannot change while the broker runs"
                                  if kind == "static" else unknown_setting(key))
        config = BrokerConfig(values, self.explicit, self.ignored)
        config._check()
        return config

    def _check(self) -> None:
        for key in ("num.partitions", "num.network.threads", "message.max.bytes",
                    "socket.request.max.bytes", "default.replication.factor",
                    "max.partitions.per.topic", "max.request.partition.size.limit",
                    "queued.max.request.bytes",
                    "min.insync.replicas", "replica.lag.time.max.ms",
                    "replica.fetch.wait.max.ms", "replica.fetch.max.bytes",
                    "replica.fetch.response.max.bytes", "replica.fetch.backoff.ms",
                    "socket.listen.backlog.size",
                    "fetch.max.bytes",
                    "leader.imbalance.check.interval.seconds",
                    "replica.high.watermark.checkpoint.interval.ms",
                    "transaction.state.log.num.partitions", "transaction.max.timeout.ms",
                    "transaction.abort.timed.out.transaction.cleanup.interval.ms",
                    "transactional.id.expiration.ms", "leader.replication.throttled.rate",
                    "follower.replication.throttled.rate",
                    "replication.quota.window.size.seconds"):
            if self[key] < 1:
                raise ConfigError(key, f"must be at least 1, got {self[key]}")
        for key in ("max.connections", "max.connections.per.ip",
                    "max.incremental.fetch.session.cache.slots"):
            if self[key] < 0:
                raise ConfigError(key, f"must not be negative, got {self[key]}")
        if self["replication.quota.window.num"] < 2:
            raise ConfigError("replication.quota.window.num",
                              f"must be at least 2, got {self['replication.quota.window.num']}")
        if self["max.connections.per.ip"] == 0 and not self.connection_overrides:
            raise ConfigError("max.connections.per.ip", "0 needs "
                              "max.connections.per.ip.overrides (or no address could connect)")
        if self["num.partitions"] > self["max.partitions.per.topic"]:
            raise ConfigError("num.partitions", f"{self['num.partitions']} is more than "
                              f"max.partitions.per.topic={self['max.partitions.per.topic']}")
        if self["broker.id"] < 0:
            raise ConfigError("broker.id", "must not be negative")
        check_class_name(self["authorizer.class.name"])
        parse_super_users(self["super.users"])
        self._check_listeners()
        if not self.log_dirs:
            raise ConfigError("log.dirs", "no directory given")
        self.log_config  # checks log settings
        self.cleaner_config

    @property
    def connection_overrides(self) -> dict[str, int]:
        """``max.connections.per.ip.overrides`` by address."""
        return parse_connection_overrides("max.connections.per.ip.overrides",
                                          self["max.connections.per.ip.overrides"])

    # -- listeners ----------------------------------------------------------------------

    @property
    def security_protocol_map(self) -> dict[str, str]:
        """``listener.security.protocol.map``: listener name to security protocol."""
        key = "listener.security.protocol.map"
        found = {}
        for item in self[key].split(","):
            name, sep, protocol = item.strip().partition(":")
            name, protocol = name.strip().upper(), protocol.strip().upper()
            if not sep or not name or protocol not in SECURITY_PROTOCOLS:
                raise ConfigError(key, f"expected NAME:PROTOCOL with PROTOCOL one of "
                                       f"{', '.join(SECURITY_PROTOCOLS)}, got {item.strip()!r}")
            if name in found:
                raise ConfigError(key, f"listener {name} is mapped twice")
            found[name] = protocol
        return found

    def _parse_listeners(self, key: str) -> list[Listener]:
        protocols = self.security_protocol_map
        found: list[Listener] = []
        for item in (part.strip() for part in self[key].split(",")):
            match = _LISTENER.match(item)
            port = int(match["port"]) if match else -1
            # A listener may leave the host empty (every interface); clients need one.
            if match is None or not 0 <= port <= 65535 or (key != "listeners"
                                                          and not match["host"]):
                raise ConfigError(key, f"expected NAME://host:port with a port in 0..65535, "
                                       f"got {item!r}")
            name = match["name"].upper()
            if name not in protocols:
                raise ConfigError(key, f"listener {name} has no security protocol: add "
                                       f"{name}:<protocol> to listener.security.protocol.map")
            if any(other.name == name for other in found):
                raise ConfigError(key, f"listener {name} is given twice")
            found.append(Listener(match["host"].strip("[]"), port, name, protocols[name]))
        if not found:
            raise ConfigError(key, "no listener given")
        return found

    def _check_listeners(self) -> None:
        bound = self.listeners
        ports = [listener.port for listener in bound if listener.port]
        if len(ports) != len(set(ports)):
            raise ConfigError("listeners", "each listener needs a port of its own")
        names = {listener.name for listener in bound}
        for listener in self.advertised_listeners:
            if listener.name not in names:
                raise ConfigError("advertised.listeners", f"{listener.name} is not one of "
                                  f"the listeners ({', '.join(sorted(names))})")
        if {"inter.broker.listener.name", "security.inter.broker.protocol"} <= self.explicit:
            raise ConfigError("inter.broker.listener.name", "set either it or "
                              "security.inter.broker.protocol, not both")
        protocol = self["security.inter.broker.protocol"].upper()
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigError("security.inter.broker.protocol", f"expected one of "
                              f"{', '.join(SECURITY_PROTOCOLS)}, got {protocol!r}")
        inter = self.inter_broker_listener_name
        advertised = {listener.name for listener in self.advertised_listeners}
        if self["zookeeper.connect"] and inter not in advertised:
            key = ("inter.broker.listener.name" if self["inter.broker.listener.name"]
                   else "security.inter.broker.protocol")
            raise ConfigError(key, f"the inter-broker listener {inter} is not one of the "
                                   f"advertised listeners ({', '.join(sorted(advertised))})")
        for listener in bound:
            if listener.uses_tls:
                self.tls_settings(listener.name).check_server()

    @property
    def listeners(self) -> list[Listener]:
        """Every listener, in the order given, where it binds."""
        return self._parse_listeners("listeners")

    @property
    def advertised_listeners(self) -> list[Listener]:
        """What clients are told (``advertised.listeners``, else the listeners themselves,
        with a wildcard host given as 127.0.0.1; port 0 means the port bound)."""
        if self["advertised.listeners"]:
            return self._parse_listeners("advertised.listeners")
        return [Listener("127.0.0.1" if listener.host in ("0.0.0.0", "", "::")
                         else listener.host, listener.port, listener.name,
                         listener.security_protocol) for listener in self.listeners]

    @property
    def listener(self) -> Listener:
        """Where the first listener binds."""
        return self.listeners[0]

    @property
    def advertised(self) -> Listener:
        """Where clients of the first listener are told to connect."""
        first = self.listener.name
        advertised = self.advertised_listeners
        return next((listener for listener in advertised if listener.name == first),
                    advertised[0])

    @property
    def inter_broker_listener_name(self) -> str:
        """``inter.broker.listener.name``, else the name ``security.inter.broker.protocol``
        gives (Kafka's rule)."""
        name = self["inter.broker.listener.name"]
        return (name or self["security.inter.broker.protocol"]).strip().upper()

    def inter_broker_client_settings(self) -> dict[str, str]:
        """How this broker connects to others (replica fetchers): client settings with
        librdkafka's names for the inter-broker listener. Over TLS it trusts that
        listener's truststore and presents its own keystore as client certificate; over
        SASL it logs in with ``sasl.mechanism.inter.broker.protocol`` and the JAAS
        ``username``/``password`` of ``listener.name.<l>.<mech>.sasl.jaas.config``."""
        name = self.inter_broker_listener_name
        protocol = self.security_protocol_map.get(name, name)
        settings = {"security.protocol": protocol}
        if protocol in ("SSL", "SASL_SSL"):
            tls = self.tls_settings(name)
            settings["ssl.endpoint.identification.algorithm"] = (
                tls.endpoint_identification_algorithm or "none")
            if tls.truststore_location:
                settings["ssl.ca.location"] = tls.truststore_location
            if tls.keystore_location:
                settings["ssl.certificate.location"] = tls.keystore_location
                settings["ssl.key.location"] = tls.keystore_location
            if tls.key_password:
                settings["ssl.key.password"] = tls.key_password
        if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
            mechanism = self["sasl.mechanism.inter.broker.protocol"].upper()
            login = self.sasl_login(name)
            if login is None:
                raise ConfigError(f"listener.name.{name.lower()}.{mechanism.lower()}"
                                  f".sasl.jaas.config", f"required: the login this broker uses "
                                  f"on its SASL inter-broker listener {name}")
            settings.update({"sasl.mechanism": mechanism, "sasl.username": login[0],
                             "sasl.password": login[1]})
        return settings

    def listener_setting(self, listener_name: str, key: str) -> tuple[str, object]:
        """``(key used, value)`` of ``key`` for a listener: its
        ``listener.name.<name>.<key>`` override if set, else the broker-wide value."""
        prefixed = f"listener.name.{listener_name.lower()}.{key}"
        if prefixed in self.values:
            return prefixed, self.values[prefixed]
        return key, self[key]

    def sasl_login(self, listener_name: str) -> tuple[str, str] | None:
        """(username, password) this broker logs in with on ``listener_name``, from
        ``listener.name.<l>.<mechanism>.sasl.jaas.config`` (mechanism:
        ``sasl.mechanism.inter.broker.protocol``) or ``sasl.jaas.config``; None if unset."""
        mechanism = self["sasl.mechanism.inter.broker.protocol"].lower()
        key, text = self.listener_setting(listener_name, f"{mechanism}.sasl.jaas.config") \
            if f"listener.name.{listener_name.lower()}.{mechanism}.sasl.jaas.config" \
            in self.values else ("sasl.jaas.config", self["sasl.jaas.config"])
        return None if text is None else parse_jaas_credentials(key, text)

    def tls_settings(self, listener_name: str) -> TlsSettings:
        """The TLS settings of one listener (per-listener overrides applied)."""
        return TlsSettings.from_lookup(lambda key: self.listener_setting(listener_name, key))

    @property
    def log_dirs(self) -> list[Path]:
        text = self["log.dirs"] or self["log.dir"]
        return [Path(part.strip()) for part in text.split(",") if part.strip()]

    @property
    def retention_ms(self) -> int | None:
        if self["log.retention.ms"] is not None:
            value = self["log.retention.ms"]
        elif self["log.retention.minutes"] is not None:
            value = self["log.retention.minutes"] * 60000
        else:
            value = self["log.retention.hours"] * HOUR_MS
        return None if value < 0 else value

    @property
    def roll_ms(self) -> int:
        if self["log.roll.ms"] is not None:
            return self["log.roll.ms"]
        return self["log.roll.hours"] * HOUR_MS

    @property
    def roll_jitter_ms(self) -> int:
        if self["log.roll.jitter.ms"] is not None:
            return self["log.roll.jitter.ms"]
        return self["log.roll.jitter.hours"] * HOUR_MS

    @property
    def log_config(self) -> LogConfig:
        """The default LogConfig of every partition (topic configs override it)."""
        retention_bytes = self["log.retention.bytes"]
        flush_messages = self["log.flush.interval.messages"]
        flush_ms = self["log.flush.interval.ms"]
        settings = {
            "log.segment.bytes": ("segment_bytes", self["log.segment.bytes"]),
            "log.roll.ms": ("segment_ms", self.roll_ms),
            "log.roll.jitter.ms": ("segment_jitter_ms", self.roll_jitter_ms),
            "log.index.interval.bytes": ("index_interval_bytes", self["log.index.interval.bytes"]),
            "log.index.size.max.bytes": ("segment_index_bytes", self["log.index.size.max.bytes"]),
            "log.flush.interval.messages": ("flush_messages", flush_messages),
            "log.flush.interval.ms": ("flush_ms", flush_ms),
            "log.retention.ms": ("retention_ms", self.retention_ms),
            "log.retention.bytes": ("retention_bytes",
                                    None if retention_bytes < 0 else retention_bytes),
            "log.flush.expose.unflushed": ("expose_unflushed",
                                           self["log.flush.expose.unflushed"]),
            "message.max.bytes": ("max_batch_size", self["message.max.bytes"]),
            "min.insync.replicas": ("min_insync_replicas", self["min.insync.replicas"]),
            "unclean.leader.election.enable": ("unclean_leader_election",
                                               self["unclean.leader.election.enable"]),
            "log.cleanup.policy": ("cleanup_policy", self["log.cleanup.policy"]),
            "log.cleaner.min.cleanable.ratio": ("min_cleanable_dirty_ratio",
                                                self["log.cleaner.min.cleanable.ratio"]),
            "log.cleaner.min.compaction.lag.ms": ("min_compaction_lag_ms",
                                                  self["log.cleaner.min.compaction.lag.ms"]),
            "log.cleaner.delete.retention.ms": ("delete_retention_ms",
                                                self["log.cleaner.delete.retention.ms"]),
            "log.cleaner.max.compaction.lag.ms": ("max_compaction_lag_ms",
                                                  self["log.cleaner.max.compaction.lag.ms"]),
            "compression.type": ("compression_type", self["compression.type"]),
            "compression.gzip.level": ("compression_gzip_level",
                                       self["compression.gzip.level"]),
            "compression.lz4.level": ("compression_lz4_level", self["compression.lz4.level"]),
            "compression.zstd.level": ("compression_zstd_level",
                                       self["compression.zstd.level"]),
            "log.preallocate": ("preallocate", self["log.preallocate"]),
            "log.segment.delete.delay.ms": ("file_delete_delay_ms",
                                            self["log.segment.delete.delay.ms"]),
            "log.message.format.version": ("message_format_version",
                                           self["log.message.format.version"]),
            "log.message.timestamp.type": ("timestamp_type",
                                           self["log.message.timestamp.type"]),
            "log.message.timestamp.before.max.ms": (
                "timestamp_before_max_ms", self["log.message.timestamp.before.max.ms"]),
            "log.message.timestamp.after.max.ms": (
                "timestamp_after_max_ms", self["log.message.timestamp.after.max.ms"]),
            "log.message.timestamp.difference.max.ms": (
                "timestamp_difference_max_ms", self["log.message.timestamp.difference.max.ms"]),
        }
        try:
            return LogConfig(**{field: value for field, value in settings.values()})
        except ConfigError as exc:
            # Report the broker key, not the LogConfig field.
            key = next((k for k, (f, _) in settings.items() if f == exc.key), exc.key)
            raise ConfigError(key, exc.problem) from None

    @property
    def cleaner_config(self) -> CleanerConfig:
        """The log cleaner's threads, memory and backoff (``log.cleaner.*``)."""
        try:
            return CleanerConfig(**{field: self[key] for field, key in _CLEANER_KEYS.items()})
        except ConfigError as exc:
            raise ConfigError(_CLEANER_KEYS.get(exc.key, exc.key), exc.problem) from None


@dataclass(frozen=True, slots=True)
class BrokerSetting:
    """One ``server.properties`` key as DescribeConfigs lists it."""

    name: str
    type: str  # "long", "boolean", "double", "string" or "list"
    default: object
    description: str


_TYPE_NAMES = {_int: "long", _bool: "boolean", _float: "double", _str: "string",
               _host_port: "string", parse_cleanup_policy: "list", _sasl_mechanisms: "list",
               _jaas: "password", _connection_overrides: "string"}


def broker_settings() -> list[BrokerSetting]:
    """Every broker setting with its type, default and one-line description, by name."""
    return [BrokerSetting(name, _TYPE_NAMES[parser], default, description)
            for name, (parser, default, description) in sorted(_SETTINGS.items())]


_CLEANER_KEYS = {"enabled": "log.cleaner.enable", "threads": "log.cleaner.threads",
                 "dedupe_buffer_size": "log.cleaner.dedupe.buffer.size",
                 "backoff_ms": "log.cleaner.backoff.ms"}


def _unused(key: str, text: str) -> str:
    """Check a Kafka setting pylog does not use; returns why it is ignored."""
    parse, why = _UNUSED[key]
    value = parse(key, text) if parse is not None else text
    if key in _UNUSED_ONLY_DEFAULT and value != _UNUSED_ONLY_DEFAULT[key]:
        raise ConfigError(key, f"{text.strip()} is not supported: {why}")
    return why


def _did_you_mean(key: str) -> str:
    close = difflib.get_close_matches(key, [*_SETTINGS, *_UNUSED], n=1, cutoff=0.8)
    return f" (did you mean {close[0]}?)" if close else ""


def _listener_setting(key: str) -> str:
    """The setting a key sets: ``listener.name.<name>.<setting>`` sets ``<setting>`` (for
    the settings a listener may override; ``<mechanism>.sasl.jaas.config`` is one), any
    other key itself."""
    match = _LISTENER_KEY.match(key)
    if match and match["setting"] in LISTENER_SETTINGS:
        return match["setting"]
    if match:
        mechanism, _, setting = match["setting"].partition(".")
        if setting == "sasl.jaas.config" and mechanism.upper() in SUPPORTED_SASL_MECHANISMS:
            return setting
    return key


def parse_properties(text: str) -> dict[str, str]:
    """``key=value`` / ``key: value`` lines; ``#`` and ``!`` start comments."""
    result: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        for sep_index, char in enumerate(stripped):
            if char in "=:":
                break
        else:
            raise ConfigError(stripped, f"line {number} is not key=value")
        result[stripped[:sep_index].strip()] = stripped[sep_index + 1:].strip()
    return result

