"""``collect_status`` against a real broker subprocess and the loader's state store."""

from __future__ import annotations

import pytest

from pylog.errors import PylogError
from pylog.etl.config import load_config
from pylog.etl.model import OffsetsSnapshot
from pylog.etl.state import StateStore
from pylog.orchestration.sample_events import page_views, produce
from pylog.testing.broker import BrokerProcess
from pylog.warehouse.status import collect_status, format_status
from tests.dags.conftest import write_loader_config


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("status-broker")) as process:
        yield process


def test_a_never_loaded_table_lags_by_everything_in_the_log(broker, tmp_path):
    counts = produce(broker.bootstrap, "page_views", page_views(90, 1_795_176_000_000, hours=2), partitions=3)
    config = load_config(write_loader_config(tmp_path, broker.bootstrap))
    [status] = collect_status(config)
    assert {p.partition: (p.latest_offset, p.committed_offset, p.lag) for p in status.partitions} == {
        partition: (count, None, count) for partition, count in counts.items()}
    assert status.last_audit is None
    assert "never loaded" in format_status([status])

    state = StateStore(config.state)
    state.write_offsets(OffsetsSnapshot("page_views", "page_views", "run-x", 0,
                                        {p: max(0, n - 4) for p, n in counts.items()}))
    [status] = collect_status(config)
    assert {p.partition: p.lag for p in status.partitions} == {p: min(4, n) for p, n in counts.items()}
    assert status.lag == sum(min(4, n) for n in counts.values())


def test_an_unreachable_broker_is_an_error(tmp_path):
    config = load_config(write_loader_config(tmp_path, "127.0.0.1:9"))  # nothing listens on port 9
    with pytest.raises(PylogError, match="127.0.0.1:9"):
        collect_status(config)
