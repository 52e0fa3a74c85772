"""Fixtures for the loader's tests: one shared SparkSession, Kafka-protocol sources, configs.

Sources are real servers: librdkafka's mock cluster (in-process, started through
confluent-kafka) and pylog broker subprocesses.
"""

from __future__ import annotations

import pytest

from pylog.testing.spark import local_spark
from tests.etl.helpers import MockCluster


@pytest.fixture(scope="session")
def spark():
    return local_spark()


@pytest.fixture
def mock_cluster():
    cluster = MockCluster()
    yield cluster
    cluster.close()
