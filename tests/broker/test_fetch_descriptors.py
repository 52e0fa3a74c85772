"""A Fetch that fails partway (out of file descriptors) gives back every region it took."""

import os
import resource

from pylog.protocol import ApiKey
from pylog.testing.broker import broker_fixture
from tests.broker.wire import WireClient, batch, create_body, fetch_body, produce_body

PARTITIONS = 40
fd_broker = broker_fixture(scope="module", overrides={"num.network.threads": 1})


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_descriptors_are_closed_when_a_fetch_fails_partway(fd_broker):
    with WireClient(fd_broker.bootstrap) as client:
        created = client.call(ApiKey.CREATE_TOPICS, 4, create_body("fds", PARTITIONS))
        assert created["topics"][0]["error_code"] == 0
        produced = client.call(ApiKey.PRODUCE, 8, produce_body(
            "fds", {p: batch([b"v%d" % p]) for p in range(PARTITIONS)}))
        assert all(p["error_code"] == 0 for t in produced["responses"]
                   for p in t["partition_responses"])
        client.call(ApiKey.API_VERSIONS, 0, {})
        baseline = open_fds(fd_broker.pid)
        limits = resource.prlimit(fd_broker.pid, resource.RLIMIT_NOFILE)
        # Room for a few duplicated segment descriptors, not for one per partition.
        resource.prlimit(fd_broker.pid, resource.RLIMIT_NOFILE, (baseline + 8, limits[1]))
        try:
            with WireClient(fd_broker.bootstrap) as failing:
                failing.send(ApiKey.FETCH, 11, fetch_body(
                    "fds", {p: 0 for p in range(PARTITIONS)}))
                assert failing.is_closed_by_peer()
            client.call(ApiKey.API_VERSIONS, 0, {})
            assert open_fds(fd_broker.pid) <= baseline
        finally:
            resource.prlimit(fd_broker.pid, resource.RLIMIT_NOFILE, limits)
        body = client.call(ApiKey.FETCH, 11, fetch_body("fds", {p: 0 for p in range(PARTITIONS)}))
        assert all(p["records"] for t in body["responses"] for p in t["partitions"])
    assert "Traceback" not in fd_broker.log_text()
