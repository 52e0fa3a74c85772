"""spark-submit entry point of the loader: parse arguments, call pylog.etl, print the summary.

    spark-submit jobs/load_log.py --config conf/loader.yaml [--run-id ID] [--topics a,b]
    spark-submit jobs/load_log.py --config conf/loader.yaml --since 2026-11-20T00:00:00Z [--until ...]
"""

from __future__ import annotations

import sys

from pylog.etl.cli_args import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
