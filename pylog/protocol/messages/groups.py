"""Schemas of the consumer group APIs, declared as data (see pylog.protocol.schema).

Field names, types and version ranges follow the Kafka protocol message specifications.
"""

from pylog.protocol.schema import F, Message

FIND_COORDINATOR = Message(
    key=10, name='FindCoordinator', versions='0-6', flexible='3+',
    request=(
        F('key', 'string', '0-3'),
        F('key_type', 'int8', '1+', default=0),
        F('coordinator_keys', '[]string', '4+'),
    ),
    response=(
        F('throttle_time_ms', 'int32', '1+'),
        F('error_code', 'int16', '0-3'),
        F('error_message', 'string', '1-3', nullable='1-3'),
        F('node_id', 'int32', '0-3'),
        F('host', 'string', '0-3'),
        F('port', 'int32', '0-3'),
        F('coordinators', '[]', '4+', fields=(
            F('key', 'string', '4+'),
            F('node_id', 'int32', '4+'),
            F('host', 'string', '4+'),
            F('port', 'int32', '4+'),
            F('error_code', 'int16', '4+'),
            F('error_message', 'string', '4+', nullable='4+'),
        )),
    ),
)

OFFSET_COMMIT = Message(
    key=8, name='OffsetCommit', versions='0-9', flexible='8+',
    request=(
        F('group_id', 'string'),
        F('generation_id_or_member_epoch', 'int32', '1+', default=-1),
        F('member_id', 'string', '1+'),
        F('group_instance_id', 'string', '7+', nullable='7+', default=None),
        F('retention_time_ms', 'int64', '2-4', default=-1),
        F('topics', '[]', fields=(
            F('name', 'string'),
            F('partitions', '[]', fields=(
                F('partition_index', 'int32'),
                F('committed_offset', 'int64'),
                F('committed_leader_epoch', 'int32', '6+', default=-1),
                F('commit_timestamp', 'int64', '1', default=-1),
                F('committed_metadata', 'string', nullable='0+'),
            )),
        )),
    ),
    response=(
        F('throttle_time_ms', 'int32', '3+'),
        F('topics', '[]', fields=(
            F('name', 'string'),
            F('partitions', '[]', fields=(
                F('partition_index', 'int32'),
                F('error_code', 'int16'),
            )),
        )),
    ),
)

OFFSET_FETCH = Message(
    key=9, name='OffsetFetch', versions='0-9', flexible='6+',
    request=(
        F('group_id', 'string', '0-7'),
        F('topics', '[]', '0-7', nullable='2-7', fields=(
            F('name', 'string', '0-7'),
            F('partition_indexes', '[]int32', '0-7'),
        )),
        F('groups', '[]', '8+', fields=(
            F('group_id', 'string', '8+'),
            F('member_id', 'string', '9+', nullable='9+', default=None),
            F('member_epoch', 'int32', '9+', default=-1),
            F('topics', '[]', '8+', nullable='8+', fields=(
                F('name', 'string', '8+'),
                F('partition_indexes', '[]int32', '8+'),
            )),
        )),
        F('require_stable', 'bool', '7+', default=False),
    ),
    response=(
        F('throttle_time_ms', 'int32', '3+'),
        F('topics', '[]', '0-7', fields=(
            F('name', 'string', '0-7'),
            F('partitions', '[]', '0-7', fields=(
                F('partition_index', 'int32', '0-7'),
                F('committed_offset', 'int64', '0-7'),
                F('committed_leader_epoch', 'int32', '5-7', default=-1),
                F('metadata', 'string', '0-7', nullable='0-7'),
                F('error_code', 'int16', '0-7'),
            )),
        )),
        F('error_code', 'int16', '2-7', default=0),
        F('groups', '[]', '8+', fields=(
            F('group_id', 'string', '8+'),
            F('topics', '[]', '8+', fields=(
                F('name', 'string', '8+'),
                F('partitions', '[]', '8+', fields=(
                    F('partition_index', 'int32', '8+'),
                    F('committed_offset', 'int64', '8+'),
                    F('committed_leader_epoch', 'int32', '8+', default=-1),
                    F('metadata', 'string', '8+', nullable='8+'),
                    F('error_code', 'int16', '8+'),
                )),
            )),
            F('error_code', 'int16', '8+', default=0),
        )),
    ),
)

JOIN_GROUP = Message(
    key=11, name='JoinGroup', versions='0-9', flexible='6+',
    request=(
        F('group_id', 'string'),
        F('session_timeout_ms', 'int32'),
        F('rebalance_timeout_ms', 'int32', '1+', default=-1),
        F('member_id', 'string'),
        F('group_instance_id', 'string', '5+', nullable='5+', default=None),
        F('protocol_type', 'string'),
        F('protocols', '[]', fields=(
            F('name', 'string'),
            F('metadata', 'bytes'),
        )),
        F('reason', 'string', '8+', nullable='8+', default=None),
    ),
    response=(
        F('throttle_time_ms', 'int32', '2+'),
        F('error_code', 'int16'),
        F('generation_id', 'int32', default=-1),
        F('protocol_type', 'string', '7+', nullable='7+', default=None),
        F('protocol_name', 'string', nullable='7+'),
        F('leader', 'string'),
        F('skip_assignment', 'bool', '9+', default=False),
        F('member_id', 'string'),
        F('members', '[]', fields=(
            F('member_id', 'string'),
            F('group_instance_id', 'string', '5+', nullable='5+', default=None),
            F('metadata', 'bytes'),
        )),
    ),
)

HEARTBEAT = Message(
    key=12, name='Heartbeat', versions='0-4', flexible='4+',
    request=(
        F('group_id', 'string'),
        F('generation_id', 'int32'),
        F('member_id', 'string'),
        F('group_instance_id', 'string', '3+', nullable='3+', default=None),
    ),
    response=(
        F('throttle_time_ms', 'int32', '1+'),
        F('error_code', 'int16'),
    ),
)

LEAVE_GROUP = Message(
    key=13, name='LeaveGroup', versions='0-5', flexible='4+',
    request=(
        F('group_id', 'string'),
        F('member_id', 'string', '0-2'),
        F('members', '[]', '3+', fields=(
            F('member_id', 'string', '3+'),
            F('group_instance_id', 'string', '3+', nullable='3+', default=None),
            F('reason', 'string', '5+', nullable='5+', default=None),
        )),
    ),
    response=(
        F('throttle_time_ms', 'int32', '1+'),
        F('error_code', 'int16'),
        F('members', '[]', '3+', fields=(
            F('member_id', 'string', '3+'),
            F('group_instance_id', 'string', '3+', nullable='3+'),
            F('error_code', 'int16', '3+'),
        )),
    ),
)

SYNC_GROUP = Message(
    key=14, name='SyncGroup', versions='0-5', flexible='4+',
    request=(
        F('group_id', 'string'),
        F('generation_id', 'int32'),
        F('member_id', 'string'),
        F('group_instance_id', 'string', '3+', nullable='3+', default=None),
        F('protocol_type', 'string', '5+', nullable='5+', default=None),
        F('protocol_name', 'string', '5+', nullable='5+', default=None),
        F('assignments', '[]', fields=(
            F('member_id', 'string'),
            F('assignment', 'bytes'),
        )),
    ),
    response=(
        F('throttle_time_ms', 'int32', '1+'),
        F('error_code', 'int16'),
        F('protocol_type', 'string', '5+', nullable='5+', default=None),
        F('protocol_name', 'string', '5+', nullable='5+', default=None),
        F('assignment', 'bytes'),
    ),
)

DESCRIBE_GROUPS = Message(
    key=15, name='DescribeGroups', versions='0-5', flexible='5+',
    request=(
        F('groups', '[]string'),
        F('include_authorized_operations', 'bool', '3+'),
    ),
    response=(
        F('throttle_time_ms', 'int32', '1+'),
        F('groups', '[]', fields=(
            F('error_code', 'int16'),
            F('group_id', 'string'),
            F('group_state', 'string'),
            F('protocol_type', 'string'),
            F('protocol_data', 'string'),
            F('members', '[]', fields=(
                F('member_id', 'string'),
                F('group_instance_id', 'string', '4+', nullable='4+', default=None),
                F('client_id', 'string'),
                F('client_host', 'string'),
                F('member_metadata', 'bytes'),
                F('member_assignment', 'bytes'),
            )),
            F('authorized_operations', 'int32', '3+', default=-2147483648),
        )),
    ),
)

LIST_GROUPS = Message(
    key=16, name='ListGroups', versions='0-5', flexible='3+',
    request=(
        F('states_filter', '[]string', '4+'),
        F('types_filter', '[]string', '5+'),
    ),
    response=(
        F('throttle_time_ms', 'int32', '1+'),
        F('error_code', 'int16'),
        F('groups', '[]', fields=(
            F('group_id', 'string'),
            F('protocol_type', 'string'),
            F('group_state', 'string', '4+'),
            F('group_type', 'string', '5+'),
        )),
    ),
)

DELETE_GROUPS = Message(
    key=42, name='DeleteGroups', versions='0-2', flexible='2+',
    request=(
        F('groups_names', '[]string'),
    ),
    response=(
        F('throttle_time_ms', 'int32'),
        F('results', '[]', fields=(
            F('group_id', 'string'),
            F('error_code', 'int16'),
        )),
    ),
)

OFFSET_DELETE = Message(
    key=47, name='OffsetDelete', versions='0', flexible='none',
    request=(
        F('group_id', 'string'),
        F('topics', '[]', fields=(
            F('name', 'string'),
            F('partitions', '[]', fields=(
                F('partition_index', 'int32'),
            )),
        )),
    ),
    response=(
        F('error_code', 'int16'),
        F('throttle_time_ms', 'int32'),
        F('topics', '[]', fields=(
            F('name', 'string'),
            F('partitions', '[]', fields=(
                F('partition_index', 'int32'),
                F('error_code', 'int16'),
            )),
        )),
    ),
)
