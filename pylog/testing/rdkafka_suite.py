"""librdkafka's own integration tests against pylog, or against Apache Kafka to calibrate.

librdkafka's test suite is a real client's conformance suite: each test produces, consumes,
administers, as its authors' CI does against Apache Kafka. This runs it test by test
against one pylog broker or three (ZooKeeper, replication factor 3), or against Apache
Kafka 4.4 (KRaft, from Maven) with the same settings, configured as librdkafka's CI
configures its brokers (``num.partitions=4``, an ACL authorizer that allows everything
without ACLs, no initial rebalance delay), and with ``KAFKA_PATH`` pointing at Kafka's real
command-line tools (:mod:`pylog.testing.kafka_bin`), so the tests that call
``kafka-topics.sh``/``kafka-configs.sh`` (0052, 0077, 0081, 0109...) run them::

    python -m pylog.testing.rdkafka_suite --tests 0052,0077,0081,0109
    python -m pylog.testing.rdkafka_suite --brokers 3 --first 1 --last 150
    python -m pylog.testing.rdkafka_suite --against kafka --tests 0081

``TEST_KAFKA_VERSION`` is 4.0.0: pylog answers as Kafka 4 does (no message format v0/v1,
group configs), and the tests then expect that. The suite (librdkafka 2.15.1's tests, from
the npm package that vendors its source) is built once into ``~/.cache/pylog/rdksuite``
(about three minutes on two idle cores; needs gcc, make and npm). The compiler runs at
the lowest priority (``nice 19``), so brokers started beside it keep their heartbeats. One
line per test, then a summary line; exit status 1 if any test failed.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Iterator, NamedTuple

from pylog.testing.kafka_bin import write_kafka_bin

PACKAGE = "@confluentinc/kafka-javascript@1.10.1"
CACHE = Path(os.environ.get("RDK_CACHE", Path.home() / ".cache" / "pylog" / "rdksuite"))
TEST_KAFKA_VERSION = "4.0.0"
# As librdkafka's CI configures its brokers (tests/broker_version_tests.py, trivup).
BROKER_SETTINGS = {
    "num.partitions": 4, "group.initial.rebalance.delay.ms": 0,
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
}
KAFKA_SETTINGS = {
    "num.partitions": 4, "group.initial.rebalance.delay.ms": 0,
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
    # The controllers of a quorum fetch from each other as ANONYMOUS (PLAINTEXT) before the
    # ACLs are loaded: KRaft's authorizer lets only super users through until then.
    "super.users": "User:ANONYMOUS",
}


def build(cache: Path = CACHE) -> Path:
    """The suite's ``tests`` directory, built if it is not yet."""
    tests = cache / "package" / "deps" / "librdkafka" / "tests"
    if (tests / "test-runner").exists():
        return tests
    cache.mkdir(parents=True, exist_ok=True)
    _step(["npm", "pack", "-q", PACKAGE], cache)
    tarball = next(cache.glob("confluentinc-kafka-javascript-*.tgz"))
    _step(["tar", "xzf", tarball.name, "package/deps/librdkafka"], cache)
    source = tests.parent
    _step(["./configure", "--disable-gssapi", "--disable-sasl", "--disable-curl"], source)
    _step(["nice", "-n", "19", "make", "-j2", "libs"], source)
    _step(["nice", "-n", "19", "make", "-j2", "build"], tests)
    return tests


def _step(command: list[str], cwd: Path) -> None:
    """One build step; its output's tail in the error when it fails."""
    result = subprocess.run(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, errors="replace")
    if result.returncode != 0:
        tail = "\n".join(result.stdout.splitlines()[-20:])
        raise RuntimeError(f"building librdkafka's test suite: {' '.join(command)} in {cwd} "
                           f"exited with {result.returncode}:\n{tail}")


def test_names(tests: Path, first: int, last: int, only: set[str] | None) -> list[str]:
    """The suite's tests that need a broker, by number."""
    names = sorted(set(re.findall(r"^\s*_TEST\((\d{4}_[a-z0-9_]+),",
                                  (tests / "test.c").read_text(), re.M)))
    return [name for name in names
            if first <= int(name[:4]) <= last
            and not name.endswith("_local") and "_mock" not in name
            and (only is None or name[:4] in only)]


class Outcome(NamedTuple):
    """One test's result: PASSED, FAILED or SKIPPED, why it failed, and what it printed."""

    result: str
    why: str
    output: str


def run_test(tests: Path, name: str, bootstrap: str, kafka_path: Path, timeout_s: int
             ) -> Outcome:
    """Run one test of the suite against ``bootstrap``."""
    with tempfile.NamedTemporaryFile("w", suffix=".conf") as conf:
        conf.write(f"bootstrap.servers={bootstrap}\n")
        conf.flush()
        env = dict(os.environ, RDKAFKA_TEST_CONF=conf.name, TESTS=name, BROKERS=bootstrap,
                   KAFKA_PATH=str(kafka_path), TEST_KAFKA_VERSION=TEST_KAFKA_VERSION,
                   LD_LIBRARY_PATH="../src:../src-cpp")
        try:
            result = subprocess.run(["./test-runner", "-Q", "-L", "-K", "-p1"], cwd=tests,
                                    env=env, capture_output=True, text=True,
                                    timeout=timeout_s, errors="replace")
            output = result.stdout + result.stderr
        except subprocess.TimeoutExpired as expired:
            output = _text(expired.stdout) + _text(expired.stderr)
            return Outcome("FAILED", f"no report within {timeout_s} s", output)
    output = re.sub(r"\x1b\[[0-9;]*m", "", output)
    row = re.search(rf"^\| {name} +\| +(\w+) +\|", output, re.M)
    if row is None:
        return Outcome("FAILED", "no report: crashed", output)
    if row.group(1) == "PASSED" or row.group(1) == "SKIPPED":
        return Outcome(row.group(1), "", output)
    failure = re.search(r"failed at .*?###\n(.*)", output)
    return Outcome("FAILED", failure.group(1).strip()[:160] if failure else row.group(1),
                   output)


def _text(data: bytes | str | None) -> str:
    if isinstance(data, bytes):
        return data.decode(errors="replace")
    return data or ""


@contextmanager
def running_pylog(base: Path, brokers: int) -> Iterator[str]:
    from pylog.testing.broker import BrokerProcess
    from pylog.testing.zookeeper import running_zookeeper

    with ExitStack() as stack:
        if brokers == 1:
            yield stack.enter_context(BrokerProcess(base / "pylog", BROKER_SETTINGS)).bootstrap
            return
        zookeeper = stack.enter_context(running_zookeeper(base))
        processes = [BrokerProcess(base / f"pylog-{i}", {
            **BROKER_SETTINGS, "broker.id": i, "zookeeper.connect": zookeeper.connect_string,
            "default.replication.factor": 3, "offsets.topic.replication.factor": 3,
            "transaction.state.log.replication.factor": 3}) for i in range(1, brokers + 1)]
        for process in processes:
            stack.callback(process.stop)
            process.launch()
        for process in processes:
            process.wait_listening()
        yield ",".join(p.bootstrap for p in processes)


@contextmanager
def running_apache_kafka(base: Path, brokers: int) -> Iterator[str]:
    from pylog.testing.apache_kafka import running_kafka

    with running_kafka(base, nodes=brokers, overrides={
            **KAFKA_SETTINGS, "default.replication.factor": brokers}) as cluster:
        yield cluster.bootstrap


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", choices=("pylog", "kafka"), default="pylog")
    parser.add_argument("--brokers", type=int, choices=(1, 3), default=1)
    parser.add_argument("--tests", help="comma-separated test numbers (default: all)")
    parser.add_argument("--first", type=int, default=1)
    parser.add_argument("--last", type=int, default=150)
    parser.add_argument("--timeout", type=int, default=150, help="seconds per test")
    args = parser.parse_args(argv)
    only = {t.strip().zfill(4) for t in args.tests.split(",")} if args.tests else None
    tests = build()
    names = test_names(tests, args.first, args.last, only)
    counts = {"PASSED": 0, "FAILED": 0, "SKIPPED": 0}
    failed = []
    with tempfile.TemporaryDirectory(prefix="pylog-rdksuite-") as work:
        base = Path(work)
        kafka_path = write_kafka_bin(base / "kafka")
        running = running_pylog if args.against == "pylog" else running_apache_kafka
        with running(base, args.brokers) as bootstrap:
            for name in names:
                outcome, why, _ = run_test(tests, name, bootstrap, kafka_path, args.timeout)
                counts[outcome] += 1
                if outcome == "FAILED":
                    failed.append(name)
                print(f"{name} {outcome} {why}".rstrip(), flush=True)
    print(f"librdkafka suite against {args.against} ({args.brokers} broker"
          f"{'s' if args.brokers > 1 else ''}): {counts['PASSED']} passed, {counts['FAILED']} "
          f"failed, {counts['SKIPPED']} skipped; failed: {' '.join(failed) or 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
