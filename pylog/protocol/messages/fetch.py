"""Schemas of Fetch and ListOffsets, declared as data (see pylog.protocol.schema).

Field names, types and version ranges follow the Kafka protocol message specifications.
"""

from pylog.protocol.schema import F, Message

FETCH = Message(
    key=1, name='Fetch', versions='0-17', flexible='12+',
    request=(
        F('cluster_id', 'string', '12+', nullable='12+', default=None, tag=0, tagged='12+'),
        F('replica_id', 'int32', '0-14', default=-1),
        F('replica_state', '{}', '15+', tag=1, tagged='15+', fields=(
            F('replica_id', 'int32', '15+', default=-1),
            F('replica_epoch', 'int64', '15+', default=-1),
        )),
        F('max_wait_ms', 'int32'),
        F('min_bytes', 'int32'),
        F('max_bytes', 'int32', '3+', default=2147483647),
        F('isolation_level', 'int8', '4+', default=0),
        F('session_id', 'int32', '7+', default=0),
        F('session_epoch', 'int32', '7+', default=-1),
        F('topics', '[]', fields=(
            F('topic', 'string', '0-12'),
            F('topic_id', 'uuid', '13+'),
            F('partitions', '[]', fields=(
                F('partition', 'int32'),
                F('current_leader_epoch', 'int32', '9+', default=-1),
                F('fetch_offset', 'int64'),
                F('last_fetched_epoch', 'int32', '12+', default=-1),
                F('log_start_offset', 'int64', '5+', default=-1),
                F('partition_max_bytes', 'int32'),
                F('replica_directory_id', 'uuid', '17+', tag=0, tagged='17+'),
            )),
        )),
        F('forgotten_topics_data', '[]', '7+', fields=(
            F('topic', 'string', '7-12'),
            F('topic_id', 'uuid', '13+'),
            F('partitions', '[]int32', '7+'),
        )),
        F('rack_id', 'string', '11+', default=''),
    ),
    response=(
        F('throttle_time_ms', 'int32', '1+'),
        F('error_code', 'int16', '7+'),
        F('session_id', 'int32', '7+', default=0),
        F('responses', '[]', fields=(
            F('topic', 'string', '0-12'),
            F('topic_id', 'uuid', '13+'),
            F('partitions', '[]', fields=(
                F('partition_index', 'int32'),
                F('error_code', 'int16'),
                F('high_watermark', 'int64'),
                F('last_stable_offset', 'int64', '4+', default=-1),
                F('log_start_offset', 'int64', '5+', default=-1),
                F('diverging_epoch', '{}', '12+', tag=0, tagged='12+', fields=(
                    F('epoch', 'int32', '12+', default=-1),
                    F('end_offset', 'int64', '12+', default=-1),
                )),
                F('current_leader', '{}', '12+', tag=1, tagged='12+', fields=(
                    F('leader_id', 'int32', '12+', default=-1),
                    F('leader_epoch', 'int32', '12+', default=-1),
                )),
                F('snapshot_id', '{}', '12+', tag=2, tagged='12+', fields=(
                    F('end_offset', 'int64', default=-1),
                    F('epoch', 'int32', default=-1),
                )),
                F('aborted_transactions', '[]', '4+', nullable='4+', fields=(
                    F('producer_id', 'int64', '4+'),
                    F('first_offset', 'int64', '4+'),
                )),
                F('preferred_read_replica', 'int32', '11+', default=-1),
                F('records', 'records', nullable='0+'),
            )),
        )),
        F('node_endpoints', '[]', '16+', tag=0, tagged='16+', fields=(
            F('node_id', 'int32', '16+'),
            F('host', 'string', '16+'),
            F('port', 'int32', '16+'),
            F('rack', 'string', '16+', nullable='16+', default=None),
        )),
    ),
)

LIST_OFFSETS = Message(
    key=2, name='ListOffsets', versions='0-10', flexible='6+',
    request=(
        F('replica_id', 'int32'),
        F('isolation_level', 'int8', '2+'),
        F('topics', '[]', fields=(
            F('name', 'string'),
            F('partitions', '[]', fields=(
                F('partition_index', 'int32'),
                F('current_leader_epoch', 'int32', '4+', default=-1),
                F('timestamp', 'int64'),
                F('max_num_offsets', 'int32', '0', default=1),
            )),
        )),
        F('timeout_ms', 'int32', '10+'),
    ),
    response=(
        F('throttle_time_ms', 'int32', '2+'),
        F('topics', '[]', fields=(
            F('name', 'string'),
            F('partitions', '[]', fields=(
                F('partition_index', 'int32'),
                F('error_code', 'int16'),
                F('old_style_offsets', '[]int64', '0'),
                F('timestamp', 'int64', '1+', default=-1),
                F('offset', 'int64', '1+', default=-1),
                F('leader_epoch', 'int32', '4+', default=-1),
            )),
        )),
    ),
)
