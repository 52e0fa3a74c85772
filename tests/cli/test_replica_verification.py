"""``pylog replica-verification``: the batch comparison on hand-built headers (pure), and a
round against a real standalone broker."""

import re

import pytest

from pylog.cli.replica_verification import (
    Comparison, Disagreement, PartitionLag, compare_replica_batches, lag_line, read_headers)
from pylog.records import build_batch
from pylog.records.header import BatchHeader
from pylog.testing.broker import broker_fixture
from pylog.types import TopicPartition
from tests.cli.helpers import pylog
from tests.cli.test_cli_mistakes import one_error_line

TP = TopicPartition("foo", 0)


def header(base_offset: int, last_offset_delta: int, crc: int) -> BatchHeader:
    return BatchHeader(base_offset=base_offset, batch_length=100, partition_leader_epoch=0,
                       magic=2, crc=crc, attributes=0, last_offset_delta=last_offset_delta,
                       base_timestamp=0, max_timestamp=0, producer_id=-1, producer_epoch=-1,
                       base_sequence=-1, records_count=last_offset_delta + 1)


LOG = [header(0, 9, 0xA), header(10, 4, 0xB), header(15, 0, 0xC), header(16, 3, 0xD)]


# -- the comparison (pure) ----------------------------------------------------------------

def test_identical_replicas_agree_up_to_the_end_of_the_shortest():
    assert compare_replica_batches(TP, 0, {1: LOG, 2: LOG[:3], 3: LOG}) == Comparison(16)
    assert compare_replica_batches(TP, 0, {1: LOG, 2: LOG}) == Comparison(20)


def test_nothing_to_compare_keeps_the_start():
    assert compare_replica_batches(TP, 16, {1: LOG[3:], 2: []}) == Comparison(16)
    assert compare_replica_batches(TP, 20, {1: [], 2: []}) == Comparison(20)


def test_batches_before_the_start_offset_are_skipped():
    # A replica's fetch from 12 returns the batch holding 12 (10-14); one that kept older
    # batches around must not be compared on them.
    assert compare_replica_batches(TP, 12, {1: LOG[1:], 2: LOG}) == Comparison(20)


def test_a_different_crc_is_a_disagreement_at_that_batch():
    other = LOG[:2] + [header(15, 0, 0xEE), LOG[3]]
    comparison = compare_replica_batches(TP, 0, {3: other, 1: LOG})
    assert comparison.verified_offset == 15
    assert comparison.disagreement == Disagreement(TP, 15, 1, 3, LOG[2], other[2])
    assert str(comparison.disagreement) == (
        "Partition foo-0: replicas 1 and 3 disagree at offset 15 (crc 0x0000000c vs 0x000000ee)")


def test_different_batch_boundaries_are_a_disagreement():
    other = [LOG[0], header(10, 5, 0xB)]
    comparison = compare_replica_batches(TP, 5, {1: LOG, 2: other})
    assert comparison.verified_offset == 10
    assert str(comparison.disagreement) == (
        "Partition foo-0: replicas 1 and 2 disagree at offset 10 "
        "(batch offsets 10-14 vs 10-15)")
    shifted = compare_replica_batches(TP, 0, {1: LOG, 2: [header(1, 9, 0xA)]})
    assert shifted.disagreement.offset == 0 and shifted.verified_offset == 0


def test_the_first_disagreeing_replica_is_named():
    bad = [header(0, 9, 0xF)]
    comparison = compare_replica_batches(TP, 0, {1: LOG, 2: bad, 3: bad})
    assert (comparison.disagreement.replica, comparison.disagreement.other_replica) == (1, 2)


def batch(base_offset: int, *values: bytes) -> bytes:
    return build_batch([(None, v, (), 1700000000000) for v in values], base_offset=base_offset)


def test_headers_of_a_fetched_buffer():
    first, second = batch(0, b"a", b"b"), batch(2, b"c")
    headers, corrupt = read_headers(first + second)
    assert [(h.base_offset, h.last_offset) for h in headers] == [(0, 1), (2, 2)]
    assert corrupt is None
    # The fetch size cut the last batch: it is left out, not an error.
    assert read_headers(first + second[:-3]) == (headers[:1], None)
    damaged = bytearray(first + second)
    damaged[-1] ^= 0xFF
    headers, corrupt = read_headers(bytes(damaged))
    assert len(headers) == 1 and "CRC" in corrupt


def test_the_max_lag_line():
    lags = [PartitionLag(TopicPartition("foo", 1), 3, 120), PartitionLag(TP, 3, 7),
            PartitionLag(TopicPartition("bar", 0), 0, 5)]
    assert lag_line(1700000000.0, lags) == (
        "2023-11-14T22:13:20.000+00:00: max lag is 3 for partition foo-0 at offset 7 "
        "among 3 partitions")


# -- against a broker ---------------------------------------------------------------------

broker = broker_fixture(scope="module")

LAG_LINE = re.compile(r"^\d{4}-\d\d-\d\dT[\d:.]+\+00:00: max lag is 0 for partition "
                      r"verified-0 at offset 30 among 1 partitions$")


def test_one_round_over_a_replication_factor_one_topic(broker):
    bs = ("--bootstrap-server", broker.bootstrap)
    assert pylog("topics", "create", "--topic", "verified", *bs).returncode == 0
    for batch_number in range(3):  # one batch each
        produced = pylog("produce", "--topic", "verified", *bs,
                         input=b"".join(b"line %d\n" % i for i in range(10)))
        assert produced.returncode == 0, produced.stderr
    # A fetch size below one batch: the round takes a Fetch per batch to reach the end.
    result = pylog("replica-verification", "--broker-list", broker.bootstrap,
                   "--topic-white-list", "verif.*", "--fetch-size", "10")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.decode().splitlines()
    assert len(lines) == 1 and LAG_LINE.match(lines[0]), lines


def test_a_time_limit_keeps_verifying(broker):
    result = pylog("replica-verification", "--broker-list", broker.bootstrap,
                   "--topic-white-list", "verified", "--time-limit-ms", "1500",
                   "--report-interval-ms", "600")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.decode().splitlines()
    assert len(lines) >= 2 and all(LAG_LINE.match(line) for line in lines), lines


@pytest.mark.parametrize("args, needle", [
    (("--topic-white-list", "no-such-topic-.*"), "--topic-white-list: 'no-such-topic-.*' "
                                                 "matches no topic"),
    (("--topic-white-list", "(unclosed"), "not a regular expression"),
    (("--report-interval-ms", "0"), "--report-interval-ms"),
])
def test_mistakes_are_one_line(broker, args, needle):
    one_error_line(pylog("replica-verification", "--broker-list", broker.bootstrap, *args),
                   "replica-verification", needle)


def test_a_bad_broker_list_is_one_line():
    one_error_line(pylog("replica-verification", "--broker-list", "nohost"),
                   "replica-verification", "--broker-list")
