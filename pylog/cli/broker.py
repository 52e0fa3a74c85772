"""``pylog broker``: run a broker in the foreground until SIGTERM or SIGINT.

    pylog broker --config conf/server.properties --override log.dirs=/tmp/pylog-1 \
                 --override listeners=PLAINTEXT://127.0.0.1:9093

Settings use Kafka's ``server.properties`` names; an unknown key or a bad value stops
the start with one line naming the key.
"""

from __future__ import annotations

import gc
import logging
import resource

log = logging.getLogger(__name__)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "broker", help="run a broker (Kafka wire protocol) in the foreground",
        description="Run a pylog broker until SIGTERM or SIGINT, then shut down cleanly.")
    parser.add_argument("--config", metavar="FILE",
                        help="server.properties file (Kafka property names)")
    parser.add_argument("--override", metavar="KEY=VALUE", action="append", default=[],
                        help="set one property, overriding the file (repeatable)")
    parser.set_defaults(func=run)


def tune_garbage_collector() -> None:
    """Keep the cyclic garbage collector off the request path. Serving allocates many
    short-lived containers per request (decoded requests, responses) that reference
    counting frees at once; with the default thresholds the collector still ran
    thousands of times a minute under load, scanning every long-lived object of the
    broker, for a third of its CPU time. The objects of startup are frozen (never
    scanned again) and young objects are collected after 20,000 net allocations
    instead of 700."""
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)


def raise_open_file_limit() -> int:
    """Raise the soft limit on open files to the hard one, as the JVM does for Kafka
    (``-XX:+MaxFDLimit``): a broker holds three descriptors per partition (its active
    segment's log and the mappings of its two indexes) and one per connection, so the
    usual soft limit of 1,024 ends it at a few hundred partitions. Returns the limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError) as error:
            log.warning("could not raise the open file limit from %d to %d: %s", soft,
                        wanted, error)
    return soft


def run(args) -> int:
    from pylog.broker.config import BrokerConfig
    from pylog.broker.server import Broker

    config = BrokerConfig.load(args.config, args.override)
    # Serving without INFO lines about startup and shutdown leaves operators blind.
    logging.getLogger("pylog").setLevel(min(logging.getLogger().level, logging.INFO))
    open_files = raise_open_file_limit()
    broker = Broker(config).start()
    log.info("open file limit: %d", open_files)
    tune_garbage_collector()
    listening = ", ".join(f"{name}://{host}:{port}"
                          for name, (host, port) in broker.addresses.items())
    print(f"pylog broker {config['broker.id']} listening on {listening}", flush=True)
    broker.serve_until_signal()
    return 0
