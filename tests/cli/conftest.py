import pytest

from tests.client.mock_cluster import mock_cluster


@pytest.fixture(scope="package")
def mock_bootstrap():
    """Bootstrap servers of a librdkafka mock cluster (a Kafka-protocol server we did not write)."""
    with mock_cluster(3) as bootstrap:
        yield bootstrap
