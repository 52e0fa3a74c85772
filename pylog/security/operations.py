"""Authorized operations (KIP-430): which operations a client may perform on a topic, a
group or the cluster, as the 32-bit field Metadata, DescribeCluster and DescribeGroups
answer with when asked (``include_*_authorized_operations``).

Bit ``n`` is set when operation code ``n`` is allowed (``AclOperation``: READ is 3, so
``1 << 3``). Without an authorizer every operation of the resource type is allowed, as in
Kafka. Not asked for: :data:`NOT_REQUESTED`.
"""

from __future__ import annotations

from typing import Callable, Iterable

from pylog.security.acls import AclOperation as Op, ResourceType

NOT_REQUESTED = -2147483648

# The operations each resource type has (Kafka's AclEntry.supportedOperations).
SUPPORTED: dict[ResourceType, tuple[Op, ...]] = {
    ResourceType.TOPIC: (Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER,
                         Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
    ResourceType.GROUP: (Op.READ, Op.DESCRIBE, Op.DELETE),
    ResourceType.CLUSTER: (Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS,
                           Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE, Op.ALTER, Op.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (Op.DESCRIBE, Op.WRITE),
}


def bit_field(operations: Iterable[Op]) -> int:
    """The operations as Kafka's 32-bit field."""
    field = 0
    for operation in operations:
        field |= 1 << int(operation)
    return field


def all_operations(resource_type: ResourceType) -> int:
    """Every operation of ``resource_type``: what a broker without an authorizer allows."""
    return bit_field(SUPPORTED[resource_type])


def authorized_operations(allowed: Callable[[Op], bool], resource_type: ResourceType) -> int:
    """The operations of ``resource_type`` that ``allowed(operation)`` allows."""
    return bit_field(op for op in SUPPORTED[resource_type] if allowed(op))
