"""``--command-config FILE`` for the commands that talk to brokers, as the kafka-*.sh tools
take it: a properties file of client security settings (librdkafka names, or the Java
client's ``sasl.jaas.config``; see :mod:`pylog.client.security`). The file may hold a
password, so mistakes name the key and line, never the value.
"""

from __future__ import annotations

import argparse

from pylog.errors import ConfigError


def add_command_config_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--command-config", metavar="FILE",
                        help="properties file of client security settings (security.protocol, "
                             "sasl.mechanism, sasl.username, sasl.password, ssl.ca.location, ...)")


def security_from_args(args):
    """The SecurityConfig of ``--command-config`` (PLAINTEXT without one).

    Raises ConfigError naming --command-config when the file cannot be read, and naming
    the key for a bad setting.
    """
    from pylog.broker.config import parse_properties
    from pylog.client.security import PLAINTEXT, SecurityConfig

    path = getattr(args, "command_config", None)
    if not path:
        return PLAINTEXT
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ConfigError("--command-config", f"cannot read {path}: "
                                              f"{exc.strerror or exc}") from None
    try:
        settings = parse_properties(text)
    except ConfigError as exc:  # its key is the whole line, which may hold a secret
        raise ConfigError("--command-config", f"{path}: {exc.problem}") from None
    # Java clients' files often carry other client settings; only security ones matter here.
    ignored = {key for key in settings if not key.startswith(("security.", "sasl.", "ssl."))}
    try:
        return SecurityConfig.from_mapping({k: v for k, v in settings.items() if k not in ignored})
    except ConfigError as exc:  # name the file too: the key alone may not say where it came from
        raise ConfigError("--command-config", f"{path}: {exc}") from None
