"""Every API pylog knows, by key."""

from __future__ import annotations

import enum

from pylog.protocol.messages.admin import (
    CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_CONFIGS, SASL_AUTHENTICATE, SASL_HANDSHAKE)
from pylog.protocol.messages.fetch import FETCH, LIST_OFFSETS
from pylog.protocol.messages.groups import (
    DESCRIBE_GROUPS, FIND_COORDINATOR, HEARTBEAT, JOIN_GROUP, LEAVE_GROUP, LIST_GROUPS,
    OFFSET_COMMIT, OFFSET_FETCH, SYNC_GROUP)
from pylog.protocol.messages.metadata import API_VERSIONS, METADATA
from pylog.protocol.messages.produce import INIT_PRODUCER_ID, PRODUCE
from pylog.protocol.messages.replication import CREATE_PARTITIONS, OFFSET_FOR_LEADER_EPOCH
from pylog.protocol.schema import Message


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    DESCRIBE_CONFIGS = 32
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37


MESSAGES: dict[int, Message] = {m.key: m for m in (
    PRODUCE, FETCH, LIST_OFFSETS, METADATA, OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR,
    JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP, DESCRIBE_GROUPS, LIST_GROUPS,
    SASL_HANDSHAKE, API_VERSIONS, CREATE_TOPICS, DELETE_TOPICS, INIT_PRODUCER_ID,
    OFFSET_FOR_LEADER_EPOCH, DESCRIBE_CONFIGS, SASL_AUTHENTICATE, CREATE_PARTITIONS)}

assert set(MESSAGES) == set(ApiKey), "ApiKey and MESSAGES must list the same APIs"
