"""The loader: PySpark jobs that land log partitions in Parquet tables, exactly once.

Stages, each in its own module: :mod:`config` (loader.yaml), :mod:`planner` (offset
ranges), :mod:`task` (the map task: fetch, :mod:`decode`, :mod:`writer`), :mod:`commit`
(offsets snapshot or backfill swap, audit), driven by :mod:`job`. State lives in
:mod:`state` (plans, done markers, offsets, audits, locks) behind the filesystem
interface of :mod:`fs`; table paths and file names in :mod:`layout`.

Entry points: ``pylog.etl.job.run_load(config, spark, LoadRequest(...))`` and, for
schedulers and analysts, ``pylog.etl.state.StateStore(uri)``.
"""
