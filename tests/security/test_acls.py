"""ACL matching and decisions against a small reference model, the ZooKeeper JSON, the
filters of Describe/DeleteAcls, and the standalone ACL file."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from pylog.errors import ConfigError
from pylog.security.acl_store import AclCache, FileAclStore
from pylog.security.acls import (
    AccessControlEntry, AclBinding, AclBindingFilter, AclOperation as Op, AclPermission,
    InvalidAclError, PatternType, ResourcePattern, ResourceType, decide, decode_entries,
    encode_entries, validate_binding)
from pylog.security.authorizer import AclAuthorizer, check_class_name, parse_super_users

ALLOW, DENY = AclPermission.ALLOW, AclPermission.DENY
CONCRETE_OPS = [op for op in Op if op.code_is_concrete()]


class Who:
    def __init__(self, principal: str, host: str = "10.0.0.1") -> None:
        self.principal, self.client_host = principal, host


def reference_allows(acls: list[AclBinding], principal: str, host: str, op: Op,
                     rtype: ResourceType, name: str) -> bool | None:
    """Kafka's rules written out plainly, one binding at a time."""
    def covers(p: ResourcePattern) -> bool:
        if p.resource_type != rtype:
            return False
        if p.pattern_type == PatternType.LITERAL:
            return p.name in (name, "*")
        return name[:len(p.name)] == p.name

    applying = [b for b in acls if covers(b.pattern)]
    if not applying:
        return None
    mine = [b.entry for b in applying if b.entry.principal in (principal, "User:*")
            and b.entry.host in (host, "*")]
    if any(e.permission == DENY and e.operation in (op, Op.ALL) for e in mine):
        return False
    implied = {op, Op.ALL}
    if op == Op.DESCRIBE:
        implied |= {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER}
    if op == Op.DESCRIBE_CONFIGS:
        implied |= {Op.ALTER_CONFIGS}
    return any(e.permission == ALLOW and e.operation in implied for e in mine)


names = st.sampled_from(["logs", "logs.a", "logs.ab", "l", "other", "*"])
patterns = st.builds(ResourcePattern, st.sampled_from([ResourceType.TOPIC, ResourceType.GROUP]),
                     names, st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED]))
entries = st.builds(AccessControlEntry, st.sampled_from(["User:alice", "User:bob", "User:*"]),
                    st.sampled_from(["*", "10.0.0.1", "10.0.0.2"]), st.sampled_from(CONCRETE_OPS),
                    st.sampled_from([ALLOW, DENY]))
bindings = st.lists(st.builds(AclBinding, patterns, entries), max_size=12)


@settings(max_examples=300, deadline=None)
@given(bindings, st.sampled_from(["User:alice", "User:bob"]), st.sampled_from(["10.0.0.1", "10.0.0.2"]),
       st.sampled_from(CONCRETE_OPS), st.sampled_from([ResourceType.TOPIC, ResourceType.GROUP]),
       st.sampled_from(["logs", "logs.a", "logs.abc", "other", "l"]))
def test_cache_and_decide_agree_with_the_reference(acls, principal, host, op, rtype, name):
    cache = AclCache()
    for pattern in {b.pattern for b in acls}:
        cache.replace(pattern, {b.entry for b in acls if b.pattern == pattern})
    applying = cache.applying_to(rtype, name)
    assert decide(applying, principal, host, op) == reference_allows(
        acls, principal, host, op, rtype, name)


@settings(max_examples=200, deadline=None)
@given(bindings, st.sampled_from(list(ResourceType)[1:4]), st.one_of(st.none(), names),
       st.sampled_from([PatternType.ANY, PatternType.MATCH, PatternType.LITERAL,
                        PatternType.PREFIXED]),
       st.sampled_from([None, "User:alice", "User:*"]), st.sampled_from([Op.ANY, Op.READ]))
def test_filters_select_as_kafka_describes(acls, rtype, name, ptype, principal, op):
    acl_filter = AclBindingFilter(rtype, name, ptype, principal, None, op)
    for binding in acls:
        p, e = binding.pattern, binding.entry
        type_ok = rtype == ResourceType.ANY or rtype == p.resource_type
        if name is None:
            name_ok = ptype in (PatternType.ANY, PatternType.MATCH) or ptype == p.pattern_type
        elif ptype == PatternType.MATCH:
            name_ok = (p.name in (name, "*") if p.pattern_type == PatternType.LITERAL
                       else name.startswith(p.name))
        else:
            name_ok = (ptype in (PatternType.ANY, p.pattern_type)) and p.name == name
        entry_ok = principal in (None, e.principal) and op in (Op.ANY, e.operation)
        assert acl_filter.matches(binding) == (type_ok and name_ok and entry_ok)


def binding(name="t", ptype=PatternType.LITERAL, principal="User:alice", op=Op.READ,
            permission=ALLOW, host="*", rtype=ResourceType.TOPIC) -> AclBinding:
    return AclBinding(ResourcePattern(rtype, name, ptype),
                      AccessControlEntry(principal, host, op, permission))


def test_deny_wins_and_implied_operations():
    acls = [binding(op=Op.WRITE), binding(op=Op.READ, permission=DENY)]
    assert decide(acls, "User:alice", "h", Op.WRITE) is True
    assert decide(acls, "User:alice", "h", Op.DESCRIBE) is True  # implied by Write
    assert decide(acls, "User:alice", "h", Op.READ) is False
    assert decide(acls, "User:bob", "h", Op.WRITE) is False
    assert decide([], "User:alice", "h", Op.READ) is None
    # A DENY of Read does not deny Describe; a DENY of All denies everything.
    assert decide(acls + [binding(op=Op.ALL, permission=DENY, principal="User:*")],
                  "User:alice", "h", Op.WRITE) is False
    assert decide([binding(op=Op.ALTER_CONFIGS)], "User:alice", "h", Op.DESCRIBE_CONFIGS)


def test_zookeeper_json_is_kafkas():
    raw = encode_entries({AccessControlEntry("User:alice", "*", Op.READ, ALLOW),
                          AccessControlEntry("User:bob", "10.0.0.1", Op.CLUSTER_ACTION, DENY)})
    assert json.loads(raw) == {"version": 1, "acls": [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Read",
         "host": "*"},
        {"principal": "User:bob", "permissionType": "Deny", "operation": "ClusterAction",
         "host": "10.0.0.1"}]}
    assert decode_entries(raw) == decode_entries(
        b'{"version":1,"acls":[{"principal":"User:bob","permissionType":"Deny",'
        b'"operation":"ClusterAction","host":"10.0.0.1"},{"principal":"User:alice",'
        b'"permissionType":"Allow","operation":"Read","host":"*"}]}')
    with pytest.raises(ValueError):
        decode_entries(b'{"version":1,"acls":[{"principal":"User:a"}]}')


@pytest.mark.parametrize("bad, reason", [
    (binding(ptype=PatternType.MATCH), "pattern type"),
    (binding(rtype=ResourceType.CLUSTER, name="x"), "kafka-cluster"),
    (binding(op=Op.ANY), "operation"),
    (binding(permission=AclPermission.ANY), "permission"),
    (binding(principal="alice"), "principal"),
    (binding(name=""), "empty"),
])
def test_invalid_bindings_are_refused_with_the_reason(bad, reason):
    with pytest.raises(InvalidAclError, match=reason):
        validate_binding(bad)


def test_file_store_survives_reopening_and_deletes_by_filter(tmp_path):
    store = FileAclStore(tmp_path)
    acls = [binding("logs.", PatternType.PREFIXED), binding("t", op=Op.WRITE),
            binding("g", rtype=ResourceType.GROUP)]
    assert store.create(acls) == [None, None, None]
    reopened = FileAclStore(tmp_path)
    assert set(reopened.describe(AclBindingFilter())) == set(acls)
    assert reopened.applying_to(ResourceType.TOPIC, "logs.x") == [acls[0]]
    [(removed, error)] = reopened.delete([AclBindingFilter(ResourceType.TOPIC)])
    assert error is None and set(removed) == set(acls[:2])
    assert FileAclStore(tmp_path).describe(AclBindingFilter()) == [acls[2]]
    (tmp_path / "acls.json").write_text("{not json")
    with pytest.raises(ValueError, match="acls.json"):
        FileAclStore(tmp_path)


def test_authorizer_super_users_and_no_acl_default(tmp_path):
    store = FileAclStore(tmp_path)
    store.create([binding("t", principal="User:bob", op=Op.READ)])
    strict = AclAuthorizer(store, parse_super_users("User:admin; User:root"))
    assert strict.authorize(Who("User:admin"), Op.DELETE, ResourceType.TOPIC, "t")
    assert not strict.authorize(Who("User:alice"), Op.READ, ResourceType.TOPIC, "t")
    assert strict.authorize(Who("User:bob"), Op.READ, ResourceType.TOPIC, "t")
    assert not strict.authorize(Who("User:alice"), Op.READ, ResourceType.TOPIC, "no-acl")
    lenient = AclAuthorizer(store, allow_if_no_acl=True)
    assert lenient.authorize(Who("User:alice"), Op.READ, ResourceType.TOPIC, "no-acl")
    assert not lenient.authorize(Who("User:alice"), Op.READ, ResourceType.TOPIC, "t")
    assert not strict.authorize_any(Who("User:alice"), Op.WRITE, ResourceType.TOPIC)
    assert strict.authorize_any(Who("User:bob"), Op.READ, ResourceType.TOPIC)


def test_config_names_the_key():
    check_class_name("kafka.security.authorizer.AclAuthorizer")
    check_class_name("org.apache.kafka.metadata.authorizer.StandardAuthorizer")
    with pytest.raises(ConfigError, match="authorizer.class.name"):
        check_class_name("com.example.MyAuthorizer")
    with pytest.raises(ConfigError, match="super.users"):
        parse_super_users("User:admin;bob")
