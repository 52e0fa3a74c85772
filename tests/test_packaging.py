"""The installed pyspark is one consistent release.

``apache-airflow-providers-apache-spark`` depends on ``pyspark-client``, a wheel that
installs into the same ``pyspark/`` package directory as ``pyspark``. When the two
versions differ, whichever is installed last overwrites part of the other, and the
Python side no longer matches the JVM jars. pyproject.toml pins both to the same
release; these tests prove the result on disk and at runtime.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata as metadata
import subprocess
import sys

import pytest


def _record_hash(path, mode: str) -> str:
    digest = hashlib.new(mode, path.read_bytes()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _hashed_files(dist_name: str) -> dict[str, metadata.PackagePath]:
    files = metadata.distribution(dist_name).files or []
    return {str(f): f for f in files if f.hash is not None}


def test_pyspark_and_pyspark_client_are_the_same_release():
    assert metadata.version("pyspark") == metadata.version("pyspark-client")


@pytest.mark.parametrize("dist_name", ["pyspark", "pyspark-client"])
def test_every_installed_file_matches_its_record(dist_name):
    files = _hashed_files(dist_name)
    assert len(files) > 100, f"{dist_name} RECORD lists too few files: {len(files)}"
    changed = [name for name, f in files.items()
               if _record_hash(f.locate(), f.hash.mode) != f.hash.value]
    assert changed == [], f"files of {dist_name} overwritten by another wheel: {changed[:10]}"


def test_files_shared_by_both_wheels_have_identical_content():
    pyspark, client = _hashed_files("pyspark"), _hashed_files("pyspark-client")
    shared = pyspark.keys() & client.keys()
    assert "pyspark/sql/session.py" in shared
    differing = sorted(name for name in shared if pyspark[name].hash.value != client[name].hash.value)
    assert differing == []


def test_pip_check_reports_no_conflicts():
    result = subprocess.run([sys.executable, "-m", "pip", "check"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_python_side_matches_the_jvm_of_a_real_session():
    # The suite's shared SparkSession (started here if no test has started it yet): its JVM
    # runs the jars on disk, so a second JVM only to read a version would add nothing.
    import pyspark

    from pylog.testing.spark import local_spark

    spark = local_spark()
    python_version = pyspark.__version__
    assert python_version == metadata.version("pyspark")
    assert spark.version == python_version
    assert spark.sparkContext._jvm.org.apache.spark.package.SPARK_VERSION() == python_version
