"""``pylog demo`` (what ``make demo`` runs) shows the log working end to end."""

from __future__ import annotations

import subprocess
import sys


def test_demo_writes_reads_crashes_and_recovers(tmp_path):
    result = subprocess.run([sys.executable, "-m", "pylog.cli.main", "demo", "--dir", str(tmp_path / "logs")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "identical to what was written" in result.stdout
    assert "every flushed record present: True" in result.stdout
    assert result.stdout.rstrip().endswith("demo OK")
