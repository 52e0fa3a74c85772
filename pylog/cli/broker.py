"""``pylog broker``: run a broker in the foreground until SIGTERM or SIGINT.

    pylog broker --config conf/server.properties --override log.dirs=/tmp/pylog-1 \
                 --override listeners=PLAINTEXT://127.0.0.1:9093

Settings use Kafka's ``server.properties`` names; an unknown key or a bad value stops
the start with one line naming the key.
"""

from __future__ import annotations

import logging


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "broker", help="run a broker (Kafka wire protocol) in the foreground",
        description="Run a pylog broker until SIGTERM or SIGINT, then shut down cleanly.")
    parser.add_argument("--config", metavar="FILE",
                        help="server.properties file (Kafka property names)")
    parser.add_argument("--override", metavar="KEY=VALUE", action="append", default=[],
                        help="set one property, overriding the file (repeatable)")
    parser.set_defaults(func=run)


def run(args) -> int:
    from pylog.broker.config import BrokerConfig
    from pylog.broker.server import Broker

    config = BrokerConfig.load(args.config, args.override)
    # Serving without INFO lines about startup and shutdown leaves operators blind.
    logging.getLogger("pylog").setLevel(min(logging.getLogger().level, logging.INFO))
    broker = Broker(config).start()
    listening = ", ".join(f"{name}://{host}:{port}"
                          for name, (host, port) in broker.addresses.items())
    print(f"pylog broker {config['broker.id']} listening on {listening}", flush=True)
    broker.serve_until_signal()
    return 0
