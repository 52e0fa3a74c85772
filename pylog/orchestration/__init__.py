"""The logic behind the Airflow DAGs in ``dags/``, importable and testable without Airflow.

* :mod:`pylog.orchestration.settings` -- where the DAGs take paths, schedule and bounds from
  (Airflow Variables at run time, environment variables, defaults);
* :mod:`pylog.orchestration.audit` -- the post-load audit that fails a DAG run;
* :mod:`pylog.orchestration.loads` -- the spark-submit arguments of each mapped load and
  the per-table Assets.
"""
