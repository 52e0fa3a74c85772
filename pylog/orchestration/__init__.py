"""The logic behind the Airflow DAGs in ``dags/`` and behind ``pylog demo``, importable and
testable without a scheduler.

* :mod:`pylog.orchestration.settings` -- where the DAGs take paths, schedule and bounds from
  (Airflow Variables at run time, environment variables, defaults);
* :mod:`pylog.orchestration.loads` -- what the DAGs' tasks do: spark-submit arguments of each
  mapped load, per-table Assets, the audit, catalog registration;
* :mod:`pylog.orchestration.audit` -- the post-load audit that fails a DAG run;
* :mod:`pylog.orchestration.connections` and :mod:`pylog.orchestration.operators` -- the
  source's Airflow connection, given to spark-submit and the audit through environments;
* :mod:`pylog.orchestration.local_airflow` -- Airflow in a private AIRFLOW_HOME, driven by its CLI;
* :mod:`pylog.orchestration.sample_events` -- realistic page views for the demo and tests;
* :mod:`pylog.orchestration.demo` -- the end-to-end demonstration (``make demo``).
"""
