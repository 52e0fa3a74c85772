"""``pylog produce``: send lines from stdin to a topic (like kafka-console-producer.sh).

    printf 'hello\\nworld\\n' | pylog produce --topic events
    printf 'user-1:clicked\\n' | pylog produce --topic events --key-separator : --compression zstd
    pylog produce --topic orders --transactional-id orders-import < orders.txt

Each line (without its newline) is one record. With ``--key-separator`` the text before
the first separator is the key. Exits non-zero with one line on stderr if any record
could not be delivered. No record waits longer than ``--request-timeout-ms`` for a broker
to answer (finding the topic, then delivering); while it waits, a line on stderr says so.
With ``--transactional-id`` the whole input is written in one transaction: read_committed
consumers see every line or, if any line fails, none (the transaction is aborted).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import threading
import time

from pylog.cli._security import add_command_config_argument, security_from_args
from pylog.cli.topics import INT32_MAX, add_bootstrap_argument, check_range, check_request_timeout
from pylog.errors import ConfigError, PylogError

_CHECK_EVERY = 50_000


def register(subparsers) -> None:
    parser = subparsers.add_parser("produce", help="send lines from stdin to a topic",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topic", required=True, help="the topic to send to")
    parser.add_argument("--key-separator", metavar="SEP",
                        help="split each line into KEY SEP VALUE at the first SEP")
    parser.add_argument("--partition", type=int, help="send every record to this partition")
    parser.add_argument("--compression", default="none", help="none, gzip, snappy, lz4 or zstd")
    parser.add_argument("--acks", help="0, 1 or all (default 1; all with --transactional-id)")
    parser.add_argument("--linger-ms", type=int, default=5, metavar="MS",
                        help="wait up to this long to fill a batch before sending it (default 5)")
    parser.add_argument("--batch-size", type=int, default=16384, metavar="BYTES",
                        help="largest batch per partition, in bytes (default 16384)")
    parser.add_argument("--transactional-id", metavar="ID",
                        help="write the whole input in one transaction of this transactional id")
    add_bootstrap_argument(parser)
    add_command_config_argument(parser)
    parser.set_defaults(func=run)


def run(args, stdin=None) -> int:
    from pylog.client.producer import Producer, TransactionAbortableError

    lines = stdin if stdin is not None else sys.stdin.buffer
    separator = args.key_separator.encode() if args.key_separator else None
    if args.key_separator == "":
        raise ConfigError("--key-separator", "must not be empty")
    check_range("--partition", args.partition, 0, INT32_MAX)
    check_range("--linger-ms", args.linger_ms, 0, INT32_MAX)
    check_range("--batch-size", args.batch_size, 1, INT32_MAX)
    check_request_timeout(args)
    transactional = args.transactional_id is not None
    if transactional and not args.transactional_id:
        raise ConfigError("--transactional-id", "must not be empty")
    acks = args.acks if args.acks is not None else ("all" if transactional else "1")
    if transactional and str(acks).strip().lower() not in ("all", "-1"):
        raise ConfigError("--acks", f"must be all with --transactional-id, got {acks!r}")
    futures: list = []
    # Finding the topic waits up to max_block_ms, delivering up to delivery_timeout_ms:
    # both follow --request-timeout-ms, so an unreachable broker fails within it.
    with Producer(args.bootstrap_server, acks=acks, linger_ms=args.linger_ms,
                  batch_size=args.batch_size, compression=args.compression,
                  request_timeout_ms=args.request_timeout_ms, max_block_ms=args.request_timeout_ms,
                  delivery_timeout_ms=args.request_timeout_ms + args.linger_ms,
                  security=security_from_args(args), transactional_id=args.transactional_id) as producer, \
            WaitNotice(args.bootstrap_server, args.request_timeout_ms) as notice:
        try:  # after an error, closing the producer aborts its transaction
            if transactional:
                with notice.waiting():
                    producer.init_transactions()
                producer.begin_transaction()
            _send_lines(producer, notice, lines, args, separator, futures)
            with notice.waiting():
                if transactional:
                    producer.commit_transaction()
                else:
                    producer.flush()
        except TransactionAbortableError:
            _check(futures, "; the transaction was aborted, nothing was written")
            raise
    _check(futures)
    return 0


def _send_lines(producer, notice: "WaitNotice", lines, args, separator: bytes | None, futures: list) -> None:
    for number, line in enumerate(lines, 1):
        line = line.rstrip(b"\n").rstrip(b"\r")
        key = None
        if separator is not None:
            key, found, value = line.partition(separator)
            if not found:
                producer.flush()
                raise ConfigError("--key-separator", f"line {number} has no {args.key_separator!r}")
            line = value
        if number == 1:
            with notice.waiting():
                futures.append(producer.send(args.topic, line, key=key, partition=args.partition))
        else:
            futures.append(producer.send(args.topic, line, key=key, partition=args.partition))
        if len(futures) >= _CHECK_EVERY:
            with notice.waiting():
                producer.flush()
            _check(futures)
            futures.clear()


class WaitNotice:
    """Says on stderr, once, when a call inside :meth:`waiting` has waited a second for
    the brokers, so a producer facing an unreachable broker is not silent until its
    timeout ends."""

    def __init__(self, servers: str, timeout_ms: int, after_s: float = 1.0, stream=None) -> None:
        self.servers, self.timeout_ms, self.after_s = servers, timeout_ms, after_s
        self.stream = stream if stream is not None else sys.stderr
        self._said = False
        self._since: float | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="produce-wait-notice", daemon=True)

    def __enter__(self) -> "WaitNotice":
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()

    @contextlib.contextmanager
    def waiting(self):
        with self._lock:
            self._since = time.monotonic()
        try:
            yield
        finally:
            with self._lock:
                self._since = None

    def _watch(self) -> None:
        while not self._said and not self._stop.wait(0.1):
            with self._lock:
                late = self._since is not None and time.monotonic() - self._since >= self.after_s
            if late:
                self._said = True
                print(f"pylog produce: waiting for {self.servers} to answer (giving up after "
                      f"--request-timeout-ms {self.timeout_ms})", file=self.stream, flush=True)


def _check(futures, outcome: str = "") -> None:
    failed = [f.exception() for f in futures if f.exception() is not None]
    if failed:
        first = failed[0]
        raise PylogError(f"{len(failed)} of {len(futures)} records not delivered: "
                         f"{type(first).__name__}: {first}{outcome}") from first
