"""``pylog acls add|list|remove`` against a real broker with an authorizer, with
kafka-acls.sh's output, and mistakes as one line.

The broker's only super user is ``User:ANONYMOUS`` (every PLAINTEXT client), so the
commands may manage ACLs; what they store is read back through ``Admin``.
"""

from pylog.client import Admin
from pylog.security.acls import AclBindingFilter, AclOperation, AclPermission, ResourceType
from pylog.testing.broker import broker_fixture
from tests.cli.helpers import pylog
from tests.cli.test_cli_mistakes import one_error_line

broker = broker_fixture(scope="module", overrides={
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS"})


def acls(broker, *args: str) -> str:
    result = pylog("acls", *args, "--bootstrap-server", broker.bootstrap)
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode()


def stored(broker, **filter_fields):
    with Admin(broker.bootstrap) as admin:
        return admin.describe_acls(AclBindingFilter(**filter_fields))


def test_add_list_and_remove_topic_acls(broker):
    out = acls(broker, "add", "--allow-principal", "User:alice", "--operation", "Read",
               "--operation", "describe", "--topic", "cli-events")
    pattern = "`ResourcePattern(resourceType=TOPIC, name=cli-events, patternType=LITERAL)`"
    read = " \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW) "
    describe = " \t(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW) "
    assert out.splitlines() == [f"Adding ACLs for resource {pattern}: ", read, describe, "",
                                f"Current ACLs for resource {pattern}: ", read, describe, ""]
    assert acls(broker, "list", "--topic", "cli-events").splitlines() == [
        f"Current ACLs for resource {pattern}: ", read, describe, ""]
    out = acls(broker, "remove", "--allow-principal", "User:alice", "--operation", "Describe",
               "--topic", "cli-events")
    assert out.splitlines() == [f"Removed ACLs for resource {pattern}: ", describe, "",
                                f"Current ACLs for resource {pattern}: ", read, ""]
    [left] = stored(broker, resource_type=ResourceType.TOPIC, name="cli-events")
    assert (left.entry.principal, left.entry.operation) == ("User:alice", AclOperation.READ)


def test_prefixed_deny_and_group_acls_and_match_listing(broker):
    acls(broker, "add", "--allow-principal", "User:loader", "--topic", "cli-logs.",
         "--resource-pattern-type", "prefixed", "--operation", "Read")
    acls(broker, "add", "--allow-principal", "User:loader", "--group", "cli-loaders",
         "--operation", "Read")
    acls(broker, "add", "--deny-principal", "User:mallory", "--deny-host", "10.0.0.9",
         "--cluster")
    [deny] = stored(broker, resource_type=ResourceType.CLUSTER, principal="User:mallory")
    assert (deny.entry.host, deny.entry.operation, deny.entry.permission) == (
        "10.0.0.9", AclOperation.ALL, AclPermission.DENY)
    # match: the ACLs that apply to the named topic, prefixed ones included.
    listed = acls(broker, "list", "--topic", "cli-logs.app", "--resource-pattern-type", "match")
    assert "name=cli-logs., patternType=PREFIXED" in listed
    assert "principal=User:loader, host=*, operation=READ" in listed
    assert "cli-loaders" not in listed
    everything = acls(broker, "list")
    assert "resourceType=GROUP, name=cli-loaders" in everything
    assert "resourceType=CLUSTER, name=kafka-cluster" in everything
    assert acls(broker, "list", "--principal", "User:nobody") == ""
    acls(broker, "remove", "--group", "cli-loaders")
    assert stored(broker, resource_type=ResourceType.GROUP, name="cli-loaders") == []


def test_mistakes_are_one_line(broker):
    for args, needle in [
            (("add", "--topic", "t"), "needs a principal"),
            (("add", "--allow-principal", "alice", "--topic", "t"), "TYPE:NAME"),
            (("add", "--allow-principal", "User:a", "--operation", "Fly", "--topic", "t"),
             "--operation"),
            (("add", "--allow-principal", "User:a", "--topic", "t",
              "--resource-pattern-type", "match"), "--resource-pattern-type"),
            (("remove", "--allow-principal", "User:a"), "needs at least one resource")]:
        one_error_line(pylog("acls", *args, "--bootstrap-server", broker.bootstrap), "acls",
                       needle)


def test_kafka_acls_sh_spelling_works(broker):
    # librdkafka's own tests run kafka-acls.sh like this; pylog takes the same words.
    out = acls(broker, "--add", "--deny-principal", "User:*", "--operation", "Read",
               "--deny-host", "*", "--topic", "cli-kafka-style")
    assert out.startswith("Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, "
                          "name=cli-kafka-style, patternType=LITERAL)`")
    [denied] = stored(broker, resource_type=ResourceType.TOPIC, name="cli-kafka-style")
    assert denied.entry.permission == AclPermission.DENY
    acls(broker, "--remove", "--force", "--deny-principal", "User:*", "--operation", "Read",
         "--deny-host", "*", "--topic", "cli-kafka-style")
    assert stored(broker, resource_type=ResourceType.TOPIC, name="cli-kafka-style") == []
    one_error_line(pylog("acls", "--add", "--remove", "--topic", "t",
                         "--bootstrap-server", broker.bootstrap), "acls", "one action at a time")
