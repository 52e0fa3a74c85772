"""Run every benchmark in this directory, one after the other, and print their figures.

Each ``*_bench.py`` script is standalone (``python benchmarks/log_bench.py``) and prints
its own figures and ratios against the baselines it runs beside them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def main() -> int:
    here = Path(__file__).resolve().parent
    failures = 0
    for script in sorted(here.glob("*_bench.py")):
        print(f"=== {script.name}", flush=True)
        failures += subprocess.call([sys.executable, str(script), *sys.argv[1:]]) != 0
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
