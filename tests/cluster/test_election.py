"""The controller's pure rules: leader election, ISR upkeep, reassignment steps."""

from __future__ import annotations

from hypothesis import given, strategies as st

from pylog.cluster.election import Election, elect
from pylog.cluster.layout import PartitionStateNode
from pylog.cluster.metadata import NO_LEADER
from pylog.cluster.reassignment import reassignment_step


def state(leader: int, isr, epoch: int = 3) -> PartitionStateNode:
    return PartitionStateNode(leader, epoch, tuple(isr), 1)


def test_a_new_partition_is_led_by_its_first_live_replica_with_every_live_replica_in_sync():
    assert elect(None, (1, 2, 3), {1, 2, 3}) == Election(1, (1, 2, 3))
    assert elect(None, (1, 2, 3), {2, 3}) == Election(2, (2, 3))
    assert elect(None, (1, 2), set()) == Election(NO_LEADER, (1,))


def test_a_live_leader_stays_and_dead_replicas_leave_the_isr():
    assert elect(state(1, (1, 2, 3)), (1, 2, 3), {1, 2, 3}) == Election(1, (1, 2, 3))
    assert elect(state(1, (1, 2, 3)), (1, 2, 3), {1, 3}) == Election(1, (1, 3))
    assert elect(state(2, (2, 3)), (1, 2, 3), {1, 2, 3}) == Election(2, (2, 3))


def test_a_dead_leader_is_replaced_by_the_first_assigned_replica_in_the_isr():
    assert elect(state(1, (1, 3, 2)), (1, 2, 3), {2, 3}) == Election(2, (3, 2))
    assert elect(state(1, (1, 3)), (1, 2, 3), {2, 3}) == Election(3, (3,))


def test_no_live_isr_member_leaves_the_partition_offline_unless_unclean():
    offline = elect(state(1, (1,)), (1, 2, 3), {2, 3})
    assert offline == Election(NO_LEADER, (1,))
    assert elect(state(1, (1,)), (1, 2, 3), {2, 3}, unclean=True) == Election(2, (2,))
    # The old leader returning is a clean election.
    assert elect(state(NO_LEADER, (1,)), (1, 2, 3), {1, 2, 3}) == Election(1, (1,))


def test_controlled_shutdown_moves_leadership_and_drops_the_broker_from_the_isr():
    assert elect(state(1, (1, 2, 3)), (1, 2, 3), {1, 2, 3}, {1}) == Election(2, (2, 3))
    assert elect(state(2, (2, 1)), (1, 2, 3), {1, 2, 3}, {1}) == Election(2, (2,))
    # Nobody else in sync: the departing leader keeps leading.
    assert elect(state(1, (1,)), (1, 2, 3), {1, 2, 3}, {1}) == Election(1, (1,))


def test_preferred_election_moves_back_only_to_an_in_sync_preferred_replica():
    assert elect(state(2, (2, 1, 3)), (1, 2, 3), {1, 2, 3}, preferred=True) == \
        Election(1, (2, 1, 3))
    assert elect(state(2, (2, 3)), (1, 2, 3), {1, 2, 3}, preferred=True) == Election(2, (2, 3))


brokers = st.integers(1, 5)


@given(replicas=st.lists(brokers, min_size=1, max_size=4, unique=True),
       isr=st.lists(brokers, max_size=4, unique=True), live=st.sets(brokers),
       down=st.sets(brokers), leader=st.integers(-1, 5), unclean=st.booleans(),
       preferred=st.booleans())
def test_election_invariants(replicas, isr, live, down, leader, unclean, preferred):
    isr = [r for r in isr if r in replicas]
    current = state(leader, isr)
    chosen = elect(current, tuple(replicas), live, down, unclean=unclean, preferred=preferred)
    if chosen.leader != NO_LEADER:
        assert chosen.leader in replicas and chosen.leader in live
        assert chosen.leader in chosen.isr
        # Clean unless allowed: the leader was in sync, or unclean election chose it alone.
        assert chosen.leader in isr or (unclean and chosen.isr == (chosen.leader,)) \
            or chosen.leader == leader
        # Nobody dead joins the ISR.
        assert set(chosen.isr) <= set(isr) | {chosen.leader}
        assert all(r in live for r in chosen.isr)
    else:
        assert not any(r in live and r not in down for r in isr)


def test_reassignment_steps():
    in_sync = state(1, (1, 2))
    assert reassignment_step((1, 2), (2, 3), in_sync, {1, 2, 3}) == ("assign", (2, 3, 1))
    assert reassignment_step((2, 3, 1), (2, 3), in_sync, {1, 2, 3}) == ("wait",)
    caught_up = state(1, (1, 2, 3))
    assert reassignment_step((2, 3, 1), (2, 3), caught_up, {1, 2, 3}) == \
        ("finish", 2, (2, 3))
    assert reassignment_step((2, 3), (2, 3), state(2, (2, 3)), {1, 2, 3}) == ("done",)
    # The leader stays when it is part of the target.
    assert reassignment_step((1, 2, 3), (1, 2), caught_up, {1, 2, 3}) == ("finish", 1, (1, 2))


def test_reassignment_can_change_the_replication_factor():
    two = state(1, (1, 2))
    assert reassignment_step((1, 2), (1, 2, 3), two, {1, 2, 3}) == ("assign", (1, 2, 3))
    # Done only once the new replica is in sync, as Kafka has it.
    assert reassignment_step((1, 2, 3), (1, 2, 3), two, {1, 2, 3}) == ("wait",)
    assert reassignment_step((1, 2, 3), (1, 2, 3), state(1, (1, 2, 3)), {1, 2, 3}) == ("done",)
    three = state(2, (2, 3, 1))
    assert reassignment_step((1, 2, 3), (3,), three, {1, 2, 3}) == ("finish", 3, (3,))
