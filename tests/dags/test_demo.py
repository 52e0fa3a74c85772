"""``pylog demo``'s working directory: emptied on a rerun, never a directory it did not make.

The demonstration itself is the same path as test_pylog_load.py (broker, ``airflow dags
test pylog_load``, queries); these tests cover what makes it safe to run twice.
"""

from __future__ import annotations

import pytest

from pylog.errors import PylogError
from pylog.etl.config import load_config
from pylog.orchestration.demo import MARKER, checkout_root, prepare_workdir, write_demo_config


def test_a_rerun_starts_from_an_empty_workdir(tmp_path):
    workdir = prepare_workdir(tmp_path / "demo")
    (workdir / "warehouse" / "page_views").mkdir(parents=True)
    again = prepare_workdir(tmp_path / "demo")
    assert sorted(p.name for p in again.iterdir()) == [MARKER]


def test_a_directory_it_did_not_make_is_left_alone(tmp_path):
    (tmp_path / "precious.txt").write_text("keep me")
    with pytest.raises(PylogError, match="was not made by pylog demo"):
        prepare_workdir(tmp_path)
    assert (tmp_path / "precious.txt").read_text() == "keep me"


def test_the_demo_config_is_the_shipped_one_pointed_at_the_workdir(tmp_path):
    path = write_demo_config(checkout_root(), tmp_path, "127.0.0.1:9999")
    config, shipped = load_config(path), load_config(checkout_root() / "conf" / "loader.yaml")
    assert config.source.bootstrap_servers == ("127.0.0.1:9999",)
    assert config.warehouse == (tmp_path / "warehouse").as_uri()
    assert config.state == (tmp_path / "state").as_uri()
    assert config.topics == shipped.topics


def test_a_failing_analyst_command_fails_the_demo(tmp_path, capsys):
    """An empty warehouse and no broker: the queries answer from the tables' empty views,
    then ``pylog status`` exits 3 (no broker answered, lag unknown), and the demo's step 4
    fails with that status."""
    from pylog.orchestration.demo import DemoStepFailed, _show_analyst_view

    path = write_demo_config(checkout_root(), tmp_path, "127.0.0.1:9")
    with pytest.raises(DemoStepFailed, match=r"pylog status exited with status 3"):
        _show_analyst_view(path, 10, print)
    out = capsys.readouterr().out
    assert "$ pylog status" in out and "broker unreachable" in out
