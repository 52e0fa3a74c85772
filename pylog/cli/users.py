"""``pylog users``: SCRAM users, offline before a broker starts or online through a broker.

    pylog users add --user admin --password-env ADMIN_PASSWORD --mechanism SCRAM-SHA-256 \\
        --log-dirs /var/lib/pylog                   # standalone broker, before it starts
    pylog users add --user admin --password-file pw.txt --zookeeper zk:2181/pylog
    pylog users add --user alice --password-env ALICE_PASSWORD --mechanism SCRAM-SHA-512 \\
        --bootstrap-server broker:9093 --command-config admin.properties
    pylog users list --bootstrap-server broker:9093 --command-config admin.properties
    pylog users delete --user alice [--mechanism SCRAM-SHA-512] --log-dirs /var/lib/pylog

Where the users live is chosen by one of: ``--log-dirs`` (the standalone broker's
credentials file, in the first log dir: what ``kafka-storage.sh format --add-scram``
does), ``--zookeeper`` (``/config/users`` of a cluster: what ``kafka-configs.sh
--zookeeper`` did) or ``--bootstrap-server`` (AlterUserScramCredentials and
DescribeUserScramCredentials through a running broker, KIP-554).

The password is read from an environment variable or the first line of a file, never from
the command line. Only the salted, iterated credential is stored. PLAIN logins are checked
against the same credential.
"""

from __future__ import annotations

import argparse
import os
import sys

from pylog.cli._security import add_command_config_argument, security_from_args
from pylog.errors import ConfigError

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def register(subparsers) -> None:
    parser = subparsers.add_parser("users", help="add, list or delete SASL/SCRAM users",
                                   description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["add", "delete", "list"], help="what to do: add, delete or list")
    parser.add_argument("--user", metavar="NAME", help="add/delete: the user name")
    secret = parser.add_mutually_exclusive_group()
    secret.add_argument("--password-env", metavar="VAR",
                        help="add: read the password from this environment variable")
    secret.add_argument("--password-file", metavar="FILE",
                        help="add: read the password from the first line of this file")
    parser.add_argument("--mechanism", metavar="SCRAM-SHA-256|SCRAM-SHA-512",
                        help="add: the mechanism (default SCRAM-SHA-256); delete: only this "
                             "one (default: every mechanism of the user)")
    parser.add_argument("--iterations", type=int, default=4096, metavar="N",
                        help="add: PBKDF2 iterations, 4096..16384 (default 4096)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--log-dirs", metavar="DIR[,DIR...]",
                       help="offline: a standalone broker's log.dirs")
    where.add_argument("--zookeeper", metavar="HOST:PORT[,...][/chroot]",
                       help="offline: a cluster's zookeeper.connect")
    where.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]",
                       help="online: a running broker")
    add_command_config_argument(parser)
    parser.add_argument("--request-timeout-ms", type=int, default=30000, metavar="MS",
                        help="online: timeout of every network call (default 30000)")
    parser.set_defaults(func=run)


def run(args) -> int:
    check_arguments(args)
    password = read_password(args) if args.action == "add" else None
    if args.bootstrap_server:
        return _online(args, password)
    return _offline(args, password)


def check_arguments(args) -> None:
    if not (args.log_dirs or args.zookeeper or args.bootstrap_server):
        raise ConfigError("--log-dirs", "say where the users live: --log-dirs, --zookeeper "
                                        "or --bootstrap-server")
    if args.command_config and not args.bootstrap_server:
        raise ConfigError("--command-config", "only used with --bootstrap-server")
    if args.action in ("add", "delete") and not args.user:
        raise ConfigError("--user", f"required to {args.action} a user")
    if args.action == "list" and args.user:
        raise ConfigError("--user", "list shows every user; leave --user out")
    if args.mechanism is not None:
        args.mechanism = args.mechanism.strip().upper()
        if args.mechanism not in MECHANISMS:
            raise ConfigError("--mechanism", f"expected SCRAM-SHA-256 or SCRAM-SHA-512, got "
                                             f"{args.mechanism!r}")
    if args.action == "add":
        args.mechanism = args.mechanism or MECHANISMS[0]
        if not (args.password_env or args.password_file):
            raise ConfigError("--password-env", "add needs --password-env VAR or "
                                                "--password-file FILE (never a password on "
                                                "the command line)")
        if not 4096 <= args.iterations <= 16384:
            raise ConfigError("--iterations", f"must be in 4096..16384, got {args.iterations}")
    elif args.password_env or args.password_file:
        raise ConfigError("--password-env" if args.password_env else "--password-file",
                          f"only used to add a user, not to {args.action}")


def read_password(args) -> str:
    """The password from ``--password-env`` or ``--password-file``; ConfigError naming
    the option (never showing the value) when it is missing or empty."""
    if args.password_env:
        password = os.environ.get(args.password_env)
        if not password:
            raise ConfigError("--password-env", f"environment variable {args.password_env} "
                                                "is not set or empty")
        return password
    try:
        with open(args.password_file, encoding="utf-8") as f:
            password = f.readline().rstrip("\r\n")
    except OSError as exc:
        raise ConfigError("--password-file", f"cannot read {args.password_file}: "
                                             f"{exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError("--password-file", f"{args.password_file} is not UTF-8 text") from None
    if not password:
        raise ConfigError("--password-file", f"the first line of {args.password_file} is empty")
    return password


# -- offline: the store itself ------------------------------------------------------------


def _offline(args, password: str | None) -> int:
    from pathlib import Path

    from pylog.security.credentials import FileCredentialStore, ZkCredentialStore

    if args.log_dirs:
        first = next((d.strip() for d in args.log_dirs.split(",") if d.strip()), "")
        if not first:
            raise ConfigError("--log-dirs", "no directory given")
        return _with_store(args, password, FileCredentialStore(Path(first)))
    from pylog.cli._zookeeper import zookeeper_session

    with zookeeper_session(args.zookeeper) as client:
        return _with_store(args, password, ZkCredentialStore(client, watch=False))


def _with_store(args, password: str | None, store) -> int:
    from pylog.security.scram import MECHANISMS as SCRAM, ScramCredential

    if args.action == "list":
        _print_users({user: {m: c.iterations for m, c in creds.items()}
                      for user, creds in store.users().items()})
        return 0
    if args.action == "add":
        credential = ScramCredential.from_password(SCRAM[args.mechanism], password,
                                                   args.iterations)
        store.alter(args.user, {args.mechanism: credential})
        print(f"set the {args.mechanism} credential of user {args.user!r}")
        return 0
    existing = store.user(args.user)
    mechanisms = [args.mechanism] if args.mechanism else sorted(existing)
    missing = [m for m in mechanisms if m not in existing]
    if not mechanisms or missing:
        what = f"a {missing[0]} credential" if missing else "SCRAM credentials"
        print(f"pylog users: error: user {args.user!r} has no {what}", file=sys.stderr)
        return 1
    store.alter(args.user, {m: None for m in mechanisms})
    print(f"deleted the {', '.join(mechanisms)} credential(s) of user {args.user!r}")
    return 0


# -- online: through a broker -------------------------------------------------------------


def _online(args, password: str | None) -> int:
    from pylog.cli.topics import check_request_timeout
    from pylog.client import Admin

    check_request_timeout(args)
    security = security_from_args(args)
    with Admin(args.bootstrap_server, request_timeout_ms=args.request_timeout_ms,
               security=security) as admin:
        if args.action == "list":
            _print_users(admin.describe_user_scram_credentials())
        elif args.action == "add":
            admin.upsert_user_scram_credential(args.user, args.mechanism, password,
                                               args.iterations)
            print(f"set the {args.mechanism} credential of user {args.user!r}")
        else:
            mechanisms = [args.mechanism] if args.mechanism else sorted(
                admin.describe_user_scram_credentials([args.user])[args.user])
            for mechanism in mechanisms:
                admin.delete_user_scram_credential(args.user, mechanism)
            print(f"deleted the {', '.join(mechanisms)} credential(s) of user {args.user!r}")
    return 0


def _print_users(users: dict[str, dict[str, int]]) -> None:
    rows = [(user, mechanism, str(iterations))
            for user, mechanisms in sorted(users.items())
            for mechanism, iterations in sorted(mechanisms.items())]
    header = ("USER", "MECHANISM", "ITERATIONS")
    widths = [max(len(row[i]) for row in rows + [header]) for i in range(3)]
    for row in [header] + rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
