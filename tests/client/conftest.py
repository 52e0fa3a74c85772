import pytest

from tests.client.mock_cluster import mock_cluster


@pytest.fixture(scope="package")
def mock_bootstrap():
    """Bootstrap servers of a 3-broker librdkafka mock cluster shared by this package."""
    with mock_cluster(3) as bootstrap:
        yield bootstrap
