"""User mistakes end as one line on stderr and a non-zero exit, never a traceback."""

import concurrent.futures
import re
import stat

import pytest

from pylog.cli.produce import _check
from pylog.errors import PylogError
from pylog.testing.broker import broker_fixture
from pylog.testing.process import free_port
from tests.cli.helpers import pylog

_INFO = re.compile(r"^\d{4}-\d\d-\d\d [\d:,]+ INFO ")

broker = broker_fixture(scope="module", overrides={"message.max.bytes": 2000})


def one_error_line(result, command: str, *needles: str) -> str:
    stderr = result.stderr.decode()
    assert result.returncode != 0
    assert "Traceback" not in stderr
    # The broker logs its startup at INFO; apart from that, one line.
    lines = [line for line in stderr.strip().splitlines() if not _INFO.match(line)]
    assert len(lines) == 1, stderr
    assert lines[0].startswith(f"pylog {command}: error: ")
    for needle in needles:
        assert needle in lines[0]
    return lines[0]


@pytest.mark.parametrize("args, needle", [
    (("consume", "--topic", "t", "--offset", "99999999999999999999"), "--offset"),
    (("consume", "--topic", "t", "--partition", "99999999999"), "--partition"),
    (("consume", "--topic", "t", "--fetch-max-bytes", "99999999999"), "--fetch-max-bytes"),
    (("offsets", "--topic", "t", "--time", "99999999999999999999"), "--time"),
    (("offsets", "--topic", "t", "--time", "-99999999999999999999"), "--time"),
    (("offsets", "--topic", "t", "--partition", "-3"), "--partition"),
    (("topics", "create", "--topic", "t", "--partitions", "99999999999"), "--partitions"),
    (("topics", "create", "--topic", "t", "--replication-factor", "99999"),
     "--replication-factor"),
    (("topics", "list", "--request-timeout-ms", "99999999999"), "--request-timeout-ms"),
    (("produce", "--topic", "t", "--partition", "99999999999"), "--partition"),
])
def test_out_of_range_numbers_are_refused_before_connecting(broker, args, needle):
    result = pylog(*args, "--bootstrap-server", broker.bootstrap, input=b"x\n")
    one_error_line(result, args[0], needle)


@pytest.mark.parametrize("listener", ["PLAINTEXT://h:99999", "PLAINTEXT://h:abc"])
def test_a_bad_listener_port_names_the_key(tmp_path, listener):
    result = pylog("broker", "--override", f"log.dirs={tmp_path}", "--override",
                   f"listeners={listener}")
    one_error_line(result, "broker", "listeners")


def test_an_unusable_log_dir_is_one_line_naming_it(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    log_dir = blocker / "logs"
    port = free_port("127.0.0.1")
    result = pylog("broker", "--override", f"log.dirs={log_dir}", "--override",
                   f"listeners=PLAINTEXT://127.0.0.1:{port}")
    one_error_line(result, "broker", str(log_dir))


def test_a_log_dir_whose_metadata_cannot_be_written(tmp_path):
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    (log_dir / "meta.properties.tmp").mkdir()  # the temp file's name is taken by a dir
    port = free_port("127.0.0.1")
    result = pylog("broker", "--override", f"log.dirs={log_dir}", "--override",
                   f"listeners=PLAINTEXT://127.0.0.1:{port}")
    one_error_line(result, "broker", "log.dirs", str(log_dir))
    assert stat.S_ISDIR((log_dir / "meta.properties.tmp").stat().st_mode)


def test_undelivered_records_are_one_line(broker):
    result = pylog("produce", "--topic", "mistakes", "--bootstrap-server", broker.bootstrap,
                   input=b"x" * 5000 + b"\n")
    one_error_line(result, "produce", "not delivered")


def test_a_delivery_failure_of_any_exception_type_becomes_a_pylog_error():
    future = concurrent.futures.Future()
    original = UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")
    future.set_exception(original)
    with pytest.raises(PylogError, match="1 of 1 records not delivered: UnicodeDecodeError") \
            as caught:
        _check([future])
    assert caught.value.__cause__ is original
