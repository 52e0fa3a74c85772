"""Shared by the analyst commands: the ``--config`` option and loading the loader's config."""

from __future__ import annotations

import argparse
import os

DEFAULT_CONFIG = os.path.join("conf", "loader.yaml")


def add_config_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=os.environ.get("PYLOG_LOADER_CONFIG", DEFAULT_CONFIG),
                        help="the loader's configuration: warehouse, state and brokers are taken "
                             "from it (default $PYLOG_LOADER_CONFIG or conf/loader.yaml)")


def load(args):
    """The loader config named by ``--config`` (ConfigError naming the key when invalid)."""
    from pylog.etl.config import load_config

    return load_config(args.config)
