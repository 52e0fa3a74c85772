"""``pylog mirror``: copy topics from a source cluster to a target cluster, exactly once.

    pylog mirror --source-bootstrap-server dc1:9092 --target-bootstrap-server agg:9092 \\
        --topics 'orders|payments' --source-alias dc1
    pylog mirror --config conf/mirror.yaml
    pylog mirror translate-offsets --target-bootstrap-server agg:9092 --source-alias dc1 \\
        --group orders-app [--apply]

Target topics are named ``{source_alias}.{topic}`` (the ``target_topic`` setting). Run the
same command several times to share the work; stop it with SIGTERM or Ctrl-C (the open
transactions commit). ``translate-offsets`` prints the target offsets at which a source
consumer group resumes on the target, and ``--apply`` commits them for the group there
(its consumers must be stopped). Flags override the file's settings.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys

from pylog.errors import ConfigError, PylogError


def _add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE",
                        help="YAML settings (see conf/mirror.yaml): both clusters' client "
                             "and security settings, topics, names, intervals")
    parser.add_argument("--source-bootstrap-server", metavar="HOST:PORT[,...]",
                        help="the cluster to copy from")
    parser.add_argument("--target-bootstrap-server", metavar="HOST:PORT[,...]",
                        help="the cluster to copy to")
    parser.add_argument("--source-alias", metavar="NAME",
                        help="the source cluster's name (target topics are NAME.TOPIC)")
    parser.add_argument("--source-command-config", metavar="FILE",
                        help="properties file of the source's security settings "
                             "(as --command-config of the other commands)")
    parser.add_argument("--target-command-config", metavar="FILE",
                        help="properties file of the target's security settings")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "mirror", help="copy topics to another cluster, exactly once",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_cluster_arguments(parser)
    parser.add_argument("--topics", metavar="REGEX",
                        help="source topics to mirror (a full-match regex; checked again "
                             "periodically for new topics)")
    parser.set_defaults(func=run, mirror_command=None)
    actions = parser.add_subparsers(dest="mirror_command", metavar="ACTION")
    translate = actions.add_parser(
        "translate-offsets", help="a source consumer group's offsets on the target",
        description="Print the target offsets at which GROUP resumes after failing over "
                    "from the source (from the checkpoints the mirror writes); --apply "
                    "commits them for GROUP on the target.")
    _add_cluster_arguments(translate)
    translate.add_argument("--group", required=True, help="the consumer group")
    translate.add_argument("--apply", action="store_true",
                           help="commit the offsets for the group on the target")
    translate.set_defaults(func=run_translate)


def _security_properties(path: str | None, flag: str) -> dict[str, str]:
    """librdkafka properties of a --command-config style file (ConfigError naming FLAG)."""
    if not path:
        return {}
    from pylog.cli._security import security_from_args

    try:
        security = security_from_args(argparse.Namespace(command_config=path))
    except ConfigError as exc:
        raise ConfigError(flag, exc.problem) from None
    properties = {"security.protocol": security.security_protocol,
                  "sasl.mechanism": security.sasl_mechanism,
                  "sasl.username": security.sasl_username,
                  "sasl.password": security.sasl_password,
                  "ssl.ca.location": security.ssl_ca_location,
                  "ssl.certificate.location": security.ssl_certificate_location,
                  "ssl.key.location": security.ssl_key_location,
                  "ssl.key.password": security.ssl_key_password}
    if security.uses_tls:
        properties["ssl.endpoint.identification.algorithm"] = \
            security.ssl_endpoint_identification_algorithm
    return {k: v for k, v in properties.items() if v is not None}


def config_from_args(args, need_topics: bool = True):
    from pylog.mirror.config import build_config, load_yaml

    raw = load_yaml(args.config) if args.config else {}
    source = {"bootstrap_servers": args.source_bootstrap_server, "alias": args.source_alias,
              "client": _security_properties(args.source_command_config,
                                             "--source-command-config")}
    target = {"bootstrap_servers": args.target_bootstrap_server,
              "client": _security_properties(args.target_command_config,
                                             "--target-command-config")}
    topics = getattr(args, "topics", None)
    if not need_topics and topics is None and "topics" not in raw:
        topics = ".*"
    return build_config(raw, source=source, target=target, topics=topics,
                        source_required=need_topics)


def _checked_config(args, need_topics: bool = True):
    from pylog.mirror import require_client
    from pylog.mirror.config import LIBRDKAFKA_LOG, check_client_properties

    if logging.getLogger().getEffectiveLevel() > logging.INFO:
        LIBRDKAFKA_LOG.setLevel(logging.CRITICAL)

    config = config_from_args(args, need_topics)
    require_client()
    check_client_properties(config)
    return config


def run(args) -> int:
    try:
        config = _checked_config(args)
    except ConfigError as exc:
        print(f"pylog mirror: error: {exc}", file=sys.stderr)
        return 2
    from pylog.mirror.runner import Mirror
    from pylog.mirror.topics import MirrorSetupError

    mirror = Mirror(config)

    def request_stop(signum, frame):
        if mirror._stop.is_set():
            raise KeyboardInterrupt   # a second Ctrl-C: stop now
        mirror.stop()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        try:
            mirror.start()
        except (MirrorSetupError, mirror.ck.KafkaException) as exc:
            mirror.close()
            raise PylogError(_one_line(exc)) from None
        try:
            mirror.run()
        except mirror.ck.KafkaException as exc:
            # What librdkafka could not retry; a restart resumes after the last commit.
            raise PylogError(_one_line(exc)) from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def _one_line(exc: Exception) -> str:
    error = exc.args[0] if exc.args else exc
    return error.str() if hasattr(error, "str") else str(error)


def run_translate(args) -> int:
    try:
        config = _checked_config(args, need_topics=False)
    except ConfigError as exc:
        print(f"pylog mirror translate-offsets: error: {exc}", file=sys.stderr)
        return 2
    import confluent_kafka as ck

    from pylog.mirror.checkpoints import apply_checkpoints, read_checkpoints

    try:
        checkpoints = read_checkpoints(ck, config, args.group)
    except ck.KafkaException as exc:
        raise PylogError(f"reading {config.checkpoints_topic} from "
                         f"{config.target.bootstrap_servers}: {exc.args[0].str()}") from None
    if not checkpoints:
        raise PylogError(f"no checkpoints for group {args.group} in {config.checkpoints_topic}")
    print(f"{'TOPIC':<30} {'PARTITION':>9} {'SOURCE-OFFSET':>14} {'TARGET-OFFSET':>14}")
    for c in checkpoints:
        print(f"{c.target_topic:<30} {c.partition:>9} {c.source_offset:>14} {c.target_offset:>14}")
    if args.apply:
        apply_checkpoints(ck, config, args.group, checkpoints)
        print(f"committed {len(checkpoints)} offsets for group {args.group} on the target")
    return 0
