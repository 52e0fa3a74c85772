"""``pylog tables`` and ``pylog query`` over a warehouse written by the loader's writer."""

from __future__ import annotations

import csv
import io
import subprocess
import sys

from pylog.cli.main import main


def _run(capsys, *argv):
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_tables_lists_rows_and_newest_partition(warehouse, capsys):
    status, out, err = _run(capsys, "tables", "--config", str(warehouse.config_path))
    assert status == 0, err
    lines = {line.split()[0]: line.split() for line in out.splitlines()[2:]}
    assert set(lines) == {"page_views", "page_views_quarantine"}
    name, partitions, files, rows = lines["page_views"][:4]
    assert (partitions, files, rows) == ("3", "6", str(len(warehouse.events)))
    assert "dt=2026-11-25/hr=10" in lines["page_views"]


def test_tables_with_partitions_lists_each_hour(warehouse, capsys):
    status, out, _ = _run(capsys, "tables", "--partitions", "--config", str(warehouse.config_path),
                          "page_views")
    assert status == 0
    for hour in ("08", "09", "10"):
        assert f"dt=2026-11-25/hr={hour}" in out


def test_query_prints_a_table_and_csv(warehouse, capsys):
    sql = "SELECT hr, count(*) AS views FROM page_views GROUP BY hr ORDER BY hr"
    status, out, _ = _run(capsys, "query", "--config", str(warehouse.config_path), sql)
    assert status == 0
    assert out.splitlines()[0].split() == ["hr", "views"]
    assert out.rstrip().endswith("(3 rows)")
    status, out, _ = _run(capsys, "query", "--format", "csv", "--config", str(warehouse.config_path), sql)
    rows = list(csv.DictReader(io.StringIO(out)))
    assert sum(int(r["views"]) for r in rows) == len(warehouse.events)


def test_user_mistakes_are_one_line_without_a_traceback(warehouse, tmp_path):
    cases = [
        ["query", "--config", str(warehouse.config_path), "SELECT * FROM nope"],
        ["tables", "--config", str(warehouse.config_path), "nope"],
        ["tables", "--config", str(tmp_path / "missing.yaml")],
    ]
    for argv in cases:
        result = subprocess.run([sys.executable, "-m", "pylog.cli.main", *argv],
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 1, argv
        assert result.stdout == ""
        # One line, except DuckDB's hints under a query's error ("Did you mean ...").
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 or (argv[0] == "query" and "Did you mean" in result.stderr), result.stderr
        assert result.stderr.startswith(f"pylog {argv[0]}: error: ") and "Traceback" not in result.stderr
