"""Storage: a partition as an append-only log of record batches in segment files.

``Log`` is one partition; ``LogManager`` owns many under one or more log dirs. See
:mod:`pylog.log.layout` for the files on disk.
"""

from pylog.log.config import LogConfig
from pylog.log.leader_epoch import EpochEntry, LeaderEpochCache
from pylog.log.log import Log, LogClosedError
from pylog.log.manager import LogManager
from pylog.log.results import AppendInfo, FileRegion, ReadResult
from pylog.log.validation import UnexpectedAppendOffsetError

__all__ = ["AppendInfo", "EpochEntry", "FileRegion", "LeaderEpochCache", "Log", "LogClosedError",
           "LogConfig", "LogManager", "ReadResult", "UnexpectedAppendOffsetError"]
