"""ConsumerProtocolAssignment bytes, as DescribeGroups returns them, decoded without a broker.

(GroupsAdmin against real servers is tested through ``pylog groups`` in tests/cli.)
"""

import struct

import pytest

from pylog.client.groups_admin import decode_assignment
from pylog.errors import InvalidRequestError
from pylog.types import TopicPartition


def assignment_bytes(version: int, topics: dict[str, list[int]], user_data: bytes | None) -> bytes:
    out = struct.pack(">hi", version, len(topics))
    for topic, partitions in topics.items():
        name = topic.encode()
        out += struct.pack(">h", len(name)) + name
        out += struct.pack(">i", len(partitions)) + b"".join(struct.pack(">i", p) for p in partitions)
    if user_data is None:
        return out + struct.pack(">i", -1)
    return out + struct.pack(">i", len(user_data)) + user_data


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_every_version_decodes_to_sorted_partitions(version):
    data = assignment_bytes(version, {"orders": [3, 1], "audit": [0]}, b"sticky" if version else None)
    assert decode_assignment(data) == (
        TopicPartition("audit", 0), TopicPartition("orders", 1), TopicPartition("orders", 3))
    assert decode_assignment(memoryview(data)) == decode_assignment(data)


def test_no_assignment_yet():
    assert decode_assignment(b"") == ()
    assert decode_assignment(assignment_bytes(0, {}, None)) == ()


def test_truncated_bytes_are_refused():
    data = assignment_bytes(1, {"orders": [0, 1]}, None)
    with pytest.raises(InvalidRequestError):
        decode_assignment(data[:12])
