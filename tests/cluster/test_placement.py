"""Topic placement against the seeds' rule, and topic-name validation."""

import pytest
from hypothesis import given, strategies as st

from pylog.cluster.placement import assign_replicas, validate_topic_name
from pylog.errors import (InvalidPartitionsError, InvalidReplicationFactorError,
                          InvalidTopicError)


def test_partition_i_goes_to_broker_i_mod_n_over_sorted_ids():
    assert assign_replicas(5, 1, [7, 3, 5]) == {0: (3,), 1: (5,), 2: (7,), 3: (3,), 4: (5,)}


def test_replica_j_goes_to_broker_i_plus_j_mod_n():
    assert assign_replicas(4, 3, [2, 1, 0]) == {
        0: (0, 1, 2), 1: (1, 2, 0), 2: (2, 0, 1), 3: (0, 1, 2)}


@given(st.sets(st.integers(0, 1000), min_size=1, max_size=8), st.integers(1, 40), st.data())
def test_assignment_matches_the_rule_for_any_cluster(broker_ids, partitions, data):
    factor = data.draw(st.integers(1, len(broker_ids)))
    brokers = sorted(broker_ids)
    assignment = assign_replicas(partitions, factor, broker_ids)
    assert sorted(assignment) == list(range(partitions))
    for i, replicas in assignment.items():
        assert replicas == tuple(brokers[(i + j) % len(brokers)] for j in range(factor))
        assert len(set(replicas)) == factor


def test_replication_factor_above_live_brokers_is_refused():
    with pytest.raises(InvalidReplicationFactorError, match="larger than the 2 live"):
        assign_replicas(3, 3, [1, 2])
    with pytest.raises(InvalidReplicationFactorError):
        assign_replicas(3, 0, [1, 2])
    with pytest.raises(InvalidReplicationFactorError):
        assign_replicas(1, 1, [])


def test_partition_count_below_one_is_refused():
    with pytest.raises(InvalidPartitionsError):
        assign_replicas(0, 1, [1])


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "has space", "slash/y", "ü"])
def test_illegal_topic_names_are_refused(name):
    with pytest.raises(InvalidTopicError):
        validate_topic_name(name)


@pytest.mark.parametrize("name", ["events", "a.b-c_d", "A" * 249, "0"])
def test_legal_topic_names_pass(name):
    validate_topic_name(name)
