"""Run every benchmark in this directory, one after the other, and print their figures.

Each ``*_bench.py`` script is standalone (``python benchmarks/log_bench.py``) and prints
its own figures and ratios against the baselines it runs beside them. Every script runs
with its own defaults: the scripts take different options, so this runner takes none and
passes none (run a script directly to change its sizes).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    if argv if argv is not None else sys.argv[1:]:
        print("run_all.py takes no arguments; run one benchmark directly to pass it options",
              file=sys.stderr)
        return 2
    here = Path(__file__).resolve().parent
    failures = 0
    for script in sorted(here.glob("*_bench.py")):
        print(f"=== {script.name}", flush=True)
        failures += subprocess.call([sys.executable, str(script)]) != 0
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
