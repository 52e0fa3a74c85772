"""The group coordinator at the wire level: each answer in Kafka's error codes, as the
Java client and librdkafka act on them (one broker for the module, a group per test)."""

import pytest

from pylog.protocol import ApiKey
from pylog.testing.broker import broker_fixture
from tests.broker.wire import WireClient, batch, create_body, produce_body
from tests.coordinator.members import (
    JOIN_V, Member, commit, describe, fetch_offsets, form_group, list_groups,
    subscription, wait_for_coordinator, wait_until)

NONE, UNKNOWN_TOPIC_OR_PARTITION, OFFSET_METADATA_TOO_LARGE, INVALID_TOPIC = 0, 3, 12, 17
ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL, UNKNOWN_MEMBER_ID = 22, 23, 25
INVALID_SESSION_TIMEOUT, REBALANCE_IN_PROGRESS = 26, 27
NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND = 68, 69
MEMBER_ID_REQUIRED, FENCED_INSTANCE_ID, GROUP_SUBSCRIBED_TO_TOPIC = 79, 82, 86
OFFSETS_PARTITIONS = 5

broker = broker_fixture(scope="module", overrides={
    "group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 1000,
    "offsets.topic.num.partitions": OFFSETS_PARTITIONS})


@pytest.fixture(scope="module")
def coordinator(broker):
    with WireClient(broker.bootstrap) as wire:
        wait_for_coordinator(wire, OFFSETS_PARTITIONS)
        for name, partitions in (("orders", 3), ("payments", 2)):
            created = wire.call(ApiKey.CREATE_TOPICS, 4, create_body(name, partitions))
            assert created["topics"][0]["error_code"] == 0, created
    return broker


@pytest.fixture
def connect(coordinator):
    clients = []

    def new_connection() -> WireClient:
        clients.append(WireClient(coordinator.bootstrap))
        return clients[-1]

    yield new_connection
    for client in clients:
        client.close()


@pytest.fixture
def wire(connect):
    return connect()


@pytest.fixture
def group(request):
    return f"g-{request.node.name}"


def member(connect, group, **kwargs) -> Member:
    return Member(connect(), group, **kwargs)


# -- JoinGroup and SyncGroup ----------------------------------------------------------------

@pytest.mark.parametrize("version", [4, 7, 9])
def test_member_id_required_then_join_with_the_id(connect, group, version):
    m = member(connect, group)
    first = m.join(version, member_id="")
    assert first["error_code"] == MEMBER_ID_REQUIRED
    assert first["member_id"] and first["generation_id"] == -1
    joined = m.join(version, member_id=first["member_id"])
    assert joined["error_code"] == NONE
    assert joined["member_id"] == first["member_id"] == joined["leader"]
    assert joined["generation_id"] == 1 and joined["protocol_name"] == "range"
    assert [(x["member_id"], x["metadata"]) for x in joined["members"]] == [
        (first["member_id"], subscription("orders"))]


def test_v3_join_gets_an_id_without_the_handshake(connect, group):
    joined = member(connect, group).join(3, member_id="")
    assert joined["error_code"] == NONE and joined["member_id"]
    assert joined["generation_id"] == 1 and joined["leader"] == joined["member_id"]


def test_a_v0_join_and_its_resend_get_the_same_generation(connect, group):
    # v0 has no rebalance timeout: the session timeout stands in for it.
    m = member(connect, group)
    joined = m.join(0, member_id="")
    assert joined["error_code"] == NONE and joined["protocol_name"] == "range"
    assert describe(m.wire, group)["group_state"] == "CompletingRebalance"
    assert m.join(JOIN_V)["generation_id"] == 1  # the same generation, resent

def test_leader_gets_the_members_and_sync_hands_out_every_assignment(connect, group):
    leader, follower = member(connect, group), member(connect, group, topics=("payments",))
    leader.handshake()
    assert leader.join()["generation_id"] == 1
    follower.handshake()
    follower.send_join()
    wait_until(lambda: leader.heartbeat() == REBALANCE_IN_PROGRESS, what="a rebalance")
    leader_view, follower_view = leader.join(), follower.receive_join()
    assert leader_view["generation_id"] == follower_view["generation_id"] == 2
    assert leader_view["leader"] == follower_view["leader"] == leader.member_id
    assert {x["member_id"]: x["metadata"] for x in leader_view["members"]} == {
        leader.member_id: subscription("orders"), follower.member_id: subscription("payments")}
    assert follower_view["members"] == []

    follower.send_sync()  # waits at the broker for the leader's assignment
    synced = leader.sync({leader.member_id: b"for the leader", follower.member_id: b"for you"})
    assert (synced["error_code"], synced["assignment"]) == (NONE, b"for the leader")
    follower_synced = follower.receive_sync()
    assert (follower_synced["error_code"], follower_synced["assignment"]) == (NONE, b"for you")
    assert follower_synced["protocol_name"] == "range"
    described = describe(leader.wire, group)
    assert described["group_state"] == "Stable" and described["protocol_data"] == "range"
    assert {x["member_id"]: x["member_assignment"] for x in described["members"]} == {
        leader.member_id: b"for the leader", follower.member_id: b"for you"}


def test_a_newcomer_makes_heartbeats_answer_rebalance_in_progress(connect, group):
    first, second = member(connect, group), member(connect, group)
    form_group([first])
    generation = first.generation
    assert first.heartbeat() == NONE
    second.handshake()
    second.send_join()
    wait_until(lambda: first.heartbeat() == REBALANCE_IN_PROGRESS, what="a rebalance")
    assert first.join()["generation_id"] == generation + 1
    assert second.receive_join()["generation_id"] == generation + 1
    second.send_sync()
    assert first.sync({first.member_id: b"a", second.member_id: b"b"})["error_code"] == NONE
    assert second.receive_sync()["assignment"] == b"b"
    assert first.heartbeat() == second.heartbeat() == NONE


def test_an_old_generation_gets_illegal_generation(connect, group):
    m = member(connect, group)
    form_group([m])
    assert m.heartbeat(generation=m.generation - 1) == ILLEGAL_GENERATION
    assert m.heartbeat(generation=m.generation + 1) == ILLEGAL_GENERATION
    assert m.sync(generation=m.generation - 1)["error_code"] == ILLEGAL_GENERATION
    assert m.commit({("orders", 0): 5}) == {("orders", 0): NONE}
    stale = commit(m.wire, group, {("orders", 0): 6}, m.generation - 1, m.member_id)
    assert stale == {("orders", 0): ILLEGAL_GENERATION}


def test_unknown_members_get_unknown_member_id(connect, group):
    m = member(connect, group)
    form_group([m])
    assert m.heartbeat(member_id="nobody") == UNKNOWN_MEMBER_ID
    assert m.join(member_id="nobody")["error_code"] == UNKNOWN_MEMBER_ID
    stranger = Member(m.wire, group, member_id="nobody", generation=m.generation)
    assert stranger.sync()["error_code"] == UNKNOWN_MEMBER_ID
    # A group that does not exist has no members either.
    ghost = Member(m.wire, f"{group}-none", member_id="nobody", generation=1)
    assert ghost.heartbeat() == UNKNOWN_MEMBER_ID
    assert ghost.join()["error_code"] == UNKNOWN_MEMBER_ID
    assert ghost.sync()["error_code"] == UNKNOWN_MEMBER_ID


def test_protocols_the_group_cannot_share_get_inconsistent_group_protocol(connect, group):
    m = member(connect, group)
    form_group([m])
    newcomer = member(connect, group)
    assert newcomer.join(member_id="", protocol_type="connect")["error_code"] == \
        INCONSISTENT_GROUP_PROTOCOL
    no_common = [("roundrobin", subscription("orders"))]
    assert newcomer.join(member_id="", protocols=no_common)["error_code"] == \
        INCONSISTENT_GROUP_PROTOCOL
    assert member(connect, f"{group}-new").join(member_id="", protocols=[])["error_code"] == \
        INCONSISTENT_GROUP_PROTOCOL
    assert m.heartbeat() == NONE  # the group did not notice


@pytest.mark.parametrize("session_ms", [999, 1_800_001])
def test_session_timeout_outside_the_broker_bounds_is_refused(connect, group, session_ms):
    m = member(connect, group)
    assert m.join(member_id="", session_ms=session_ms)["error_code"] == INVALID_SESSION_TIMEOUT
    assert describe(m.wire, group)["group_state"] == "Dead"  # nothing was created


# -- static membership --------------------------------------------------------------------

def test_static_member_rejoining_with_no_id_replaces_and_fences_the_old_one(connect, group):
    old = member(connect, group, instance_id="instance-1")
    joined = old.join(member_id="")  # static members need no MEMBER_ID_REQUIRED round
    assert joined["error_code"] == NONE and joined["member_id"]
    assert old.sync({old.member_id: b"p0"})["error_code"] == NONE

    new = member(connect, group, instance_id="instance-1")
    replaced = new.join(member_id="")
    assert replaced["error_code"] == NONE
    assert replaced["member_id"] != old.member_id
    assert replaced["generation_id"] == old.generation  # no rebalance for a restart
    assert new.heartbeat() == NONE
    assert new.sync()["assignment"] == b"p0"  # the old incarnation's assignment

    assert old.heartbeat() == FENCED_INSTANCE_ID
    assert old.join()["error_code"] == FENCED_INSTANCE_ID
    assert old.commit({("orders", 0): 1}) == {("orders", 0): FENCED_INSTANCE_ID}
    described = describe(new.wire, group)
    assert [(x["member_id"], x["group_instance_id"]) for x in described["members"]] == [
        (new.member_id, "instance-1")]


def test_static_member_replaced_while_the_leader_assigns_triggers_a_rebalance(connect, group):
    # The leader may already be assigning to the old member id, which the new incarnation
    # would never receive: Kafka rebalances, so the leader sees the new id.
    leader, old = member(connect, group), member(connect, group, instance_id="s-1")
    leader.handshake()
    assert leader.join()["error_code"] == NONE
    old.send_join()
    wait_until(lambda: leader.heartbeat() == REBALANCE_IN_PROGRESS, what="a rebalance")
    assert {x["member_id"] for x in leader.join()["members"]} == {leader.member_id,
                                                                   old.receive_join()["member_id"]}
    assert describe(leader.wire, group)["group_state"] == "CompletingRebalance"

    new = member(connect, group, instance_id="s-1")
    new.send_join(member_id="")
    wait_until(lambda: leader.heartbeat() == REBALANCE_IN_PROGRESS, what="a rebalance")
    leader_view = leader.join()
    new_view = new.receive_join()
    assert leader_view["generation_id"] == new_view["generation_id"] == old.generation + 1
    assert {x["member_id"] for x in leader_view["members"]} == {leader.member_id,
                                                                 new.member_id}
    new.send_sync()
    assert leader.sync({leader.member_id: b"a", new.member_id: b"b"})["error_code"] == NONE
    assert new.receive_sync()["assignment"] == b"b"
    assert old.heartbeat() == FENCED_INSTANCE_ID


# -- LeaveGroup and session expiry ----------------------------------------------------------

def test_leave_group_batch_answers_per_member(connect, group):
    static, dynamic = member(connect, group, instance_id="s-1"), member(connect, group)
    form_group([static, dynamic])
    response = static.wire.call(ApiKey.LEAVE_GROUP, 3, {"group_id": group, "members": [
        {"member_id": "", "group_instance_id": "s-1"},
        {"member_id": dynamic.member_id, "group_instance_id": None},
        {"member_id": "ghost", "group_instance_id": None},
        {"member_id": "", "group_instance_id": "no-such-instance"}]})
    assert response["error_code"] == NONE
    assert [(x["member_id"], x["group_instance_id"], x["error_code"])
            for x in response["members"]] == [
        ("", "s-1", NONE), (dynamic.member_id, None, NONE), ("ghost", None, UNKNOWN_MEMBER_ID),
        ("", "no-such-instance", UNKNOWN_MEMBER_ID)]
    described = describe(static.wire, group)
    assert described["group_state"] == "Empty" and described["members"] == []


def test_leave_group_of_an_unknown_group(wire, group):
    # Kafka answers the request (NONE) and each member (UNKNOWN_MEMBER_ID); v0-2 carry the
    # member's error at the top.
    response = wire.call(ApiKey.LEAVE_GROUP, 4, {"group_id": group, "members": [
        {"member_id": "m-1", "group_instance_id": None}]})
    assert response["error_code"] == NONE
    assert [x["error_code"] for x in response["members"]] == [UNKNOWN_MEMBER_ID]
    old = wire.call(ApiKey.LEAVE_GROUP, 2, {"group_id": group, "member_id": "m-1"})
    assert old["error_code"] == UNKNOWN_MEMBER_ID


def test_a_member_that_stops_heartbeating_is_removed_after_its_session(connect, group):
    live, silent = member(connect, group), member(connect, group, session_ms=1000)
    form_group([live, silent])

    def silent_member_gone() -> bool:
        ids = {x["member_id"] for x in describe(live.wire, group)["members"]}
        assert live.member_id in ids
        return silent.member_id not in ids

    wait_until(silent_member_gone, interval_s=0.1, what="the silent member to expire")
    assert live.heartbeat() == REBALANCE_IN_PROGRESS
    generation = live.generation
    rejoined = live.join()
    assert rejoined["generation_id"] == generation + 1
    assert [x["member_id"] for x in rejoined["members"]] == [live.member_id]
    assert silent.heartbeat() == UNKNOWN_MEMBER_ID


# -- OffsetCommit ---------------------------------------------------------------------------

def test_commits_from_outside_the_group_only_while_it_is_empty(connect, group):
    admin = connect()
    assert commit(admin, group, {("orders", 0): 10}) == {("orders", 0): NONE}
    assert commit(admin, group, {("orders", 1): 11}, version=2) == {("orders", 1): NONE}
    assert fetch_offsets(admin, group, [("orders", 0), ("orders", 1)]) == {
        ("orders", 0): 10, ("orders", 1): 11}
    m = member(connect, group)
    form_group([m])
    assert commit(admin, group, {("orders", 0): 20}) == {("orders", 0): UNKNOWN_MEMBER_ID}
    assert m.commit({("orders", 0): 21}) == {("orders", 0): NONE}
    assert m.leave() == NONE
    assert commit(admin, group, {("orders", 0): 22}) == {("orders", 0): NONE}
    assert fetch_offsets(admin, group, [("orders", 0)]) == {("orders", 0): 22}


def test_commit_to_unknown_partitions_is_refused_per_partition(wire, group):
    answer = commit(wire, group, {("orders", 0): 1, ("no-such-topic", 0): 2, ("orders", 3): 3})
    assert answer == {("orders", 0): NONE, ("no-such-topic", 0): UNKNOWN_TOPIC_OR_PARTITION,
                      ("orders", 3): UNKNOWN_TOPIC_OR_PARTITION}
    assert fetch_offsets(wire, group) == {("orders", 0): 1}


def test_oversized_metadata_gets_offset_metadata_too_large(wire, group):
    assert commit(wire, group, {("orders", 0): 1}, metadata="x" * 4097) == {
        ("orders", 0): OFFSET_METADATA_TOO_LARGE}
    assert commit(wire, group, {("orders", 1): 1}, metadata="x" * 4096) == {("orders", 1): NONE}
    assert fetch_offsets(wire, group) == {("orders", 1): 1}


# -- OffsetFetch ----------------------------------------------------------------------------

@pytest.mark.parametrize("version", [2, 5, 7])
def test_offset_fetch_of_all_topics_returns_every_committed_partition(wire, group, version):
    assert set(commit(wire, group, {("orders", 0): 5, ("orders", 2): 7, ("payments", 1): 9},
                      metadata="meta").values()) == {NONE}
    response = wire.call(ApiKey.OFFSET_FETCH, version, {"group_id": group, "topics": None})
    assert response["error_code"] == NONE
    found = {(t["name"], p["partition_index"]): (p["committed_offset"], p["metadata"],
                                                  p["error_code"])
             for t in response["topics"] for p in t["partitions"]}
    assert found == {("orders", 0): (5, "meta", NONE), ("orders", 2): (7, "meta", NONE),
                     ("payments", 1): (9, "meta", NONE)}
    asked = fetch_offsets(wire, group, [("orders", 0), ("orders", 1)], version=version)
    assert asked == {("orders", 0): 5, ("orders", 1): -1}


def test_offset_fetch_v8_answers_several_groups(wire, group):
    commit(wire, f"{group}-a", {("orders", 0): 10})
    commit(wire, f"{group}-b", {("orders", 0): 20, ("payments", 0): 21})
    response = wire.call(ApiKey.OFFSET_FETCH, 8, {"require_stable": False, "groups": [
        {"group_id": f"{group}-a", "topics": None},
        {"group_id": f"{group}-b", "topics": [{"name": "orders", "partition_indexes": [0, 1]}]},
        {"group_id": f"{group}-none", "topics": None}]})
    found = {g["group_id"]: (g["error_code"], {
        (t["name"], p["partition_index"]): p["committed_offset"]
        for t in g["topics"] for p in t["partitions"]}) for g in response["groups"]}
    assert found == {f"{group}-a": (NONE, {("orders", 0): 10}),
                     f"{group}-b": (NONE, {("orders", 0): 20, ("orders", 1): -1}),
                     f"{group}-none": (NONE, {})}


# -- FindCoordinator, ListGroups, DescribeGroups ----------------------------------------------

def test_find_coordinator_v4_with_several_keys(wire, coordinator):
    metadata = wire.call(ApiKey.METADATA, 9, {"topics": [], "allow_auto_topic_creation": False})
    (node,) = metadata["brokers"]
    keys = ["alpha", "beta", "gamma", "δ-group"]
    response = wire.call(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": keys})
    assert [(c["key"], c["error_code"], c["node_id"], c["host"], c["port"])
            for c in response["coordinators"]] == [
        (key, NONE, node["node_id"], node["host"], coordinator.port) for key in keys]
    for version in (0, 3):
        single = wire.call(ApiKey.FIND_COORDINATOR, version, {"key": "alpha", "key_type": 0})
        assert (single["error_code"], single["node_id"], single["port"]) == (
            NONE, node["node_id"], coordinator.port)


def test_list_groups_filters_by_state(connect, group):
    stable = member(connect, f"{group}-stable")
    form_group([stable])
    admin = connect()
    commit(admin, f"{group}-empty", {("orders", 0): 1})
    every = list_groups(admin)
    assert every[f"{group}-stable"] == "Stable" and every[f"{group}-empty"] == "Empty"
    only_stable = list_groups(admin, ["Stable"])
    assert f"{group}-stable" in only_stable and f"{group}-empty" not in only_stable
    assert set(only_stable.values()) == {"Stable"}
    only_empty = list_groups(admin, ["Empty"])
    assert f"{group}-empty" in only_empty and f"{group}-stable" not in only_empty
    assert list_groups(admin, ["Dead"]) == {}
    v0 = admin.call(ApiKey.LIST_GROUPS, 0, {})
    assert {g["group_id"]: g["protocol_type"] for g in v0["groups"]
            if g["group_id"].startswith(group)} == {f"{group}-stable": "consumer",
                                                    f"{group}-empty": ""}


def test_describe_of_an_unknown_group_is_dead_without_error(wire, group):
    described = describe(wire, group)
    assert (described["error_code"], described["group_id"], described["group_state"],
            described["protocol_type"], described["members"]) == (NONE, group, "Dead", "", [])


# -- DeleteGroups and OffsetDelete ------------------------------------------------------------

def delete_groups(wire, *groups) -> dict[str, int]:
    response = wire.call(ApiKey.DELETE_GROUPS, 2, {"groups_names": list(groups)})
    return {r["group_id"]: r["error_code"] for r in response["results"]}


def test_delete_groups(connect, group):
    m = member(connect, group)
    form_group([m])
    assert m.commit({("orders", 0): 3, ("payments", 1): 4}) == {
        ("orders", 0): NONE, ("payments", 1): NONE}
    admin = connect()
    assert delete_groups(admin, group, f"{group}-none") == {
        group: NON_EMPTY_GROUP, f"{group}-none": GROUP_ID_NOT_FOUND}
    assert m.leave() == NONE
    assert delete_groups(admin, group) == {group: NONE}
    assert fetch_offsets(admin, group) == {}
    assert fetch_offsets(admin, group, [("orders", 0)]) == {("orders", 0): -1}
    assert describe(admin, group)["group_state"] == "Dead"
    assert group not in list_groups(admin)
    assert delete_groups(admin, group) == {group: GROUP_ID_NOT_FOUND}


def offset_delete(wire, group, partitions) -> tuple[int, dict]:
    topics: dict[str, list] = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append({"partition_index": partition})
    response = wire.call(ApiKey.OFFSET_DELETE, 0, {"group_id": group, "topics": [
        {"name": t, "partitions": p} for t, p in topics.items()]})
    return response["error_code"], {(t["name"], p["partition_index"]): p["error_code"]
                                    for t in response["topics"] for p in t["partitions"]}


def test_offset_delete_refuses_subscribed_topics_while_the_group_is_active(connect, group):
    m = member(connect, group, topics=("orders",))
    form_group([m])
    assert m.commit({("orders", 0): 5, ("payments", 0): 6}) == {
        ("orders", 0): NONE, ("payments", 0): NONE}
    admin = connect()
    assert offset_delete(admin, group, [("orders", 0), ("payments", 0)]) == (
        NONE, {("orders", 0): GROUP_SUBSCRIBED_TO_TOPIC, ("payments", 0): NONE})
    assert fetch_offsets(admin, group) == {("orders", 0): 5}
    assert m.leave() == NONE
    assert offset_delete(admin, group, [("orders", 0)]) == (NONE, {("orders", 0): NONE})
    assert fetch_offsets(admin, group) == {}
    assert offset_delete(admin, f"{group}-none", [("orders", 0)]) == (GROUP_ID_NOT_FOUND, {})


# -- the internal topic ---------------------------------------------------------------------

def test_consumer_offsets_is_internal_and_not_for_producers(wire):
    produced = wire.call(ApiKey.PRODUCE, 9, produce_body("__consumer_offsets",
                                                         {0: batch([b"x"], key=b"k")}))
    assert produced["responses"][0]["partition_responses"][0]["error_code"] == INVALID_TOPIC
    metadata = wire.call(ApiKey.METADATA, 9, {"topics": [{"name": "__consumer_offsets"}],
                                              "allow_auto_topic_creation": False})
    (topic,) = metadata["topics"]
    assert topic["error_code"] == NONE and topic["is_internal"] is True
    assert len(topic["partitions"]) == OFFSETS_PARTITIONS
    ordinary = wire.call(ApiKey.METADATA, 9, {"topics": [{"name": "orders"}],
                                              "allow_auto_topic_creation": False})
    assert ordinary["topics"][0]["is_internal"] is False



def test_deleting_a_topic_removes_its_committed_offsets(wire, group):
    created = wire.call(ApiKey.CREATE_TOPICS, 4, create_body("doomed", 2))
    assert created["topics"][0]["error_code"] == 0, created
    assert set(commit(wire, group, {("doomed", 0): 3, ("doomed", 1): 4,
                                    ("orders", 1): 6}).values()) == {NONE}
    deleted = wire.call(ApiKey.DELETE_TOPICS, 3, {"topic_names": ["doomed"], "timeout_ms": 5000})
    assert deleted["responses"][0]["error_code"] == NONE
    wait_until(lambda: fetch_offsets(wire, group) == {("orders", 1): 6},
               what="the deleted topic's offsets to go")
