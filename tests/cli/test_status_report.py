"""``pylog status`` after a failed load, with lag bounds, in headless Chromium, and with the
broker stopped: a real broker subprocess, real loads (tasks run in this process), the
loader's own state store. The tests run in file order; the last one stops the broker."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from pylog.cli.main import main
from pylog.client import Admin, Producer
from pylog.etl.config import load_config
from pylog.etl.errors import BadRecordThresholdError
from pylog.etl.job import LoadRequest, run_load
from pylog.testing.broker import BrokerProcess
from tests.cli.helpers import PYLOG

HOUR_MS = 3_600_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("status-broker")) as process:
        yield process


def _config(directory: Path, bootstrap: str) -> Path:
    topic = {"format": "json", "schema": {"user_id": "int64", "url": "string"},
             "event_time": "log_timestamp", "partitioning": ["dt", "hr"], "consumer_group": False}
    raw = {"source": {"bootstrap_servers": bootstrap},
           "warehouse": (directory / "warehouse").as_uri(), "state": (directory / "state").as_uri(),
           "topics": {"page_views": dict(topic, table="page_views", max_bad_records=0, max_bad_ratio=0),
                      "clicks": dict(topic, table="clicks")}}
    path = directory / "loader.yaml"
    path.write_text(json.dumps(raw))
    return path


def _send(bootstrap: str, topic: str, good: int, bad: int = 0, age_ms: int = 0) -> None:
    now = int(time.time() * 1000)
    with Producer(bootstrap, acks="all") as producer:
        futures = [producer.send(topic, json.dumps({"user_id": i, "url": f"/p/{i}"}).encode(),
                                 timestamp=now - age_ms) for i in range(good)]
        futures += [producer.send(topic, b"{not json", timestamp=now - age_ms) for _ in range(bad)]
        producer.flush()
        for future in futures:
            future.result()


@pytest.fixture(scope="module")
def loaded(broker, tmp_path_factory) -> Path:
    """page_views: run good-1 committed, then run bad-2 failed over the bad-record threshold
    (23 offsets not loaded). clicks: loaded by good-1, then 15 records two hours old."""
    path = _config(tmp_path_factory.mktemp("status"), broker.bootstrap)
    with Admin(broker.bootstrap) as admin:
        admin.create_topic("page_views", num_partitions=2)
        admin.create_topic("clicks", num_partitions=1)
    _send(broker.bootstrap, "page_views", 30)
    _send(broker.bootstrap, "clicks", 10)
    config = load_config(path)
    run_load(config, None, LoadRequest(run_id="good-1"))
    _send(broker.bootstrap, "page_views", 20, bad=3)
    _send(broker.bootstrap, "clicks", 15, age_ms=2 * HOUR_MS)
    with pytest.raises(BadRecordThresholdError):
        run_load(config, None, LoadRequest(run_id="bad-2", topics=("page_views",)))
    return path


@pytest.fixture
def run(capsys):
    def run(*argv: str) -> tuple[int, str, str]:
        status = main(list(argv))
        out, err = capsys.readouterr()
        return status, out, err
    return run


def test_a_failed_run_is_listed_first_with_its_error_and_the_command_to_finish_it(loaded, run):
    config = str(loaded)
    status, out, _ = run("status", "--config", config)
    assert status == 5
    assert out.index("PENDING RUNS") < out.index("bad-2") < out.index("log start")
    assert "could not be decoded" in out
    assert f"finish page_views: pylog load --config {config} --topics page_views --run-id bad-2" in out

    status, out, _ = run("status", "--config", config, "--format", "json")
    assert status == 5
    report = json.loads(out)
    assert report["exit_code"] == 5 and report["broker_reachable"] is True
    [pending] = report["pending_runs"]
    assert (pending["table"], pending["run_id"], pending["state"], pending["kind"]) == (
        "page_views", "bad-2", "failed", "scheduled")
    assert pending["error"].startswith("BadRecordThresholdError: table page_views: 3 of 23 records")
    assert pending["tasks_done"] == pending["tasks_total"] > 0
    tables = {t["table"]: t for t in report["tables"]}
    assert tables["page_views"]["lag"] == 23
    assert [r["run_id"] for r in tables["page_views"]["recent_runs"]] == ["good-1"]
    assert tables["page_views"]["recent_runs"][0]["check"] == "ok"
    assert tables["page_views"]["recent_runs"][0]["records_fetched"] == 30


def test_lag_bounds_set_the_exit_status(loaded, run):
    config = str(loaded)
    assert run("status", "--config", config, "--topics", "clicks")[0] == 0
    status, out, _ = run("status", "--config", config, "--topics", "clicks", "--max-lag", "5")
    assert status == 4 and "partition 0 lags 15 offsets (bound 5)" in out
    assert run("status", "--config", config, "--topics", "clicks", "--max-lag", "15")[0] == 0
    # The oldest record not loaded was written two hours ago (log timestamp).
    assert run("status", "--config", config, "--topics", "clicks", "--max-lag-seconds", "600")[0] == 4
    assert run("status", "--config", config, "--topics", "clicks", "--max-lag-seconds", "864000")[0] == 0
    status, out, _ = run("status", "--config", config, "--topics", "clicks", "--format", "json")
    [partition] = json.loads(out)["tables"][0]["partitions"]
    assert partition["lag"] == 15 and 2 * 3600 <= partition["lag_seconds"] < 10 * 24 * 3600


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    assert found, "chromium is not installed (Debian package chromium; make test installs it)"
    return found


def test_the_served_page_in_headless_chromium(loaded, tmp_path):
    """The page as a browser renders it: the lagging partition highlighted, the failed run
    on top. The screenshot goes to $PYLOG_SCREENSHOT_DIR too when set (docs/ keeps one)."""
    # clicks' oldest record not loaded is two hours old; page_views' are seconds old.
    server = subprocess.Popen([PYLOG, "status", "--config", str(loaded), "--max-lag-seconds", "3600",
                               "--serve", "127.0.0.1:0", "--refresh-seconds", "60"],
                              stderr=subprocess.PIPE, text=True)
    try:
        line = server.stderr.readline()
        url = re.search(r"http://\S+/", line)
        assert url, line
        browser = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                   f"--user-data-dir={tmp_path / 'profile'}"]
        dom = subprocess.run([*browser, "--dump-dom", url.group()], capture_output=True, text=True,
                             timeout=120, check=True).stdout
        screenshot = tmp_path / "status-page.png"
        subprocess.run([*browser, f"--screenshot={screenshot}", "--window-size=1200,1500", url.group()],
                       capture_output=True, timeout=120, check=True)
    finally:
        server.terminate()
        server.wait(30)
    lagging = re.findall(r'<tr class="lagging">(.*?)</tr>', dom)
    assert len(lagging) == 1 and '<td class="text">clicks</td>' in lagging[0]
    pending = re.search(r'<table id="pending-runs">.*?</table>', dom).group()
    failed = re.findall(r'<tr class="failed">(.*?)</tr>', pending)
    assert len(failed) == 1 and "bad-2" in failed[0] and "could not be decoded" in failed[0]
    assert dom.index('id="pending-runs"') < dom.index('id="partitions"')
    assert '<td class="num">15</td>' in lagging[0]  # numbers right-aligned, text left
    assert dom.count("<svg") == 4  # two charts per loaded table
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("PYLOG_SCREENSHOT_DIR"):
        shutil.copy(screenshot, Path(os.environ["PYLOG_SCREENSHOT_DIR"]) / "status-page.png")


def test_with_the_broker_stopped_status_shows_the_state_store(loaded, broker, run, tmp_path):
    broker.kill()  # SIGKILL: nothing listens on its port any more
    config = str(loaded)
    page = tmp_path / "status.html"
    status, out, err = run("status", "--config", config, "--format", "json", "--html", str(page))
    assert status == 5  # the failed run outranks the unknown lag
    report = json.loads(out)
    assert report["broker_reachable"] is False
    tables = {t["table"]: t for t in report["tables"]}
    committed = {p["partition"]: p["committed_offset"] for p in tables["page_views"]["partitions"]}
    assert sum(committed.values()) == 30 and len(committed) == 2
    assert all(p["lag"] is None for t in report["tables"] for p in t["partitions"])
    assert tables["page_views"]["lag"] is None
    assert [r["run_id"] for r in tables["page_views"]["recent_runs"]] == ["good-1"]
    assert report["pending_runs"][0]["run_id"] == "bad-2"
    html = page.read_text()
    assert "broker unreachable" in html and "bad-2" in html and "good-1" in html
    status, out, _ = run("status", "--config", config, "--topics", "clicks")
    assert status == 3
    assert "(broker unreachable: lag unknown)" in out.splitlines()[0]
