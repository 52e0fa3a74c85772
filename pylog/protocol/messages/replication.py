"""Schemas of the APIs about partitions and their replicas, declared as data (see
pylog.protocol.schema): OffsetForLeaderEpoch and CreatePartitions.

Field names, types and version ranges follow Kafka's OffsetForLeaderEpochRequest/Response
and CreatePartitionsRequest/Response JSON specifications.

OffsetForLeaderEpoch (key 23) asks where a leader epoch ended: a follower (or a consumer
after a leader change) sends the last epoch it has, the leader answers with the first
offset of the next epoch, so the caller knows where its log diverges and truncates there.
"""

from pylog.protocol.schema import F, Message

CONSUMER_REPLICA_ID = -2  # "debug" consumer: may see offsets beyond the high watermark
NO_EPOCH = -1

OFFSET_FOR_LEADER_EPOCH = Message(
    key=23, name='OffsetForLeaderEpoch', versions='0-4', flexible='4+',
    request=(
        F('replica_id', 'int32', '3+', default=CONSUMER_REPLICA_ID),
        F('topics', '[]', fields=(
            F('topic', 'string'),
            F('partitions', '[]', fields=(
                F('partition', 'int32'),
                F('current_leader_epoch', 'int32', '2+', default=NO_EPOCH),
                F('leader_epoch', 'int32'),
            )),
        )),
    ),
    response=(
        F('throttle_time_ms', 'int32', '2+'),
        F('topics', '[]', fields=(
            F('topic', 'string'),
            F('partitions', '[]', fields=(
                F('error_code', 'int16'),
                F('partition', 'int32'),
                F('leader_epoch', 'int32', '1+', default=NO_EPOCH),
                F('end_offset', 'int64', default=-1),
            )),
        )),
    ),
)

CREATE_PARTITIONS = Message(
    key=37, name='CreatePartitions', versions='0-3', flexible='2+',
    request=(
        F('topics', '[]', fields=(
            F('name', 'string'),
            F('count', 'int32'),  # the new total number of partitions
            # One entry per new partition, or null to let the controller place them.
            F('assignments', '[]', nullable='0+', default=None, fields=(
                F('broker_ids', '[]int32'),
            )),
        )),
        F('timeout_ms', 'int32'),
        F('validate_only', 'bool'),
    ),
    response=(
        F('throttle_time_ms', 'int32'),
        F('results', '[]', fields=(
            F('name', 'string'),
            F('error_code', 'int16'),
            F('error_message', 'string', nullable='0+', default=None),
        )),
    ),
)

# ElectLeaders (KIP-460): election_type 0 preferred, 1 unclean (v1+; v0 is preferred).
ELECT_LEADERS = Message(
    key=43, name='ElectLeaders', versions='0-2', flexible='2+',
    request=(
        F('election_type', 'int8', '1+'),
        F('topic_partitions', '[]', nullable='0+', fields=(  # null: every partition
            F('topic', 'string'),
            F('partition_id', '[]int32'),
        )),
        F('timeout_ms', 'int32', default=60000),
    ),
    response=(
        F('throttle_time_ms', 'int32'),
        F('error_code', 'int16', '1+', default=0),
        F('replica_election_results', '[]', fields=(
            F('topic', 'string'),
            F('partition_result', '[]', fields=(
                F('partition_id', 'int32'),
                F('error_code', 'int16'),
                F('error_message', 'string', nullable='0+', default=None),
            )),
        )),
    ),
)

# KIP-455: move replicas through a broker (kafka-reassign-partitions.sh --bootstrap-server).
ALTER_PARTITION_REASSIGNMENTS = Message(
    key=45, name='AlterPartitionReassignments', versions='0', flexible='0+',
    request=(
        F('timeout_ms', 'int32', default=60000),
        F('topics', '[]', fields=(
            F('name', 'string'),
            F('partitions', '[]', fields=(
                F('partition_index', 'int32'),
                F('replicas', '[]int32', nullable='0+'),  # null: cancel
            )),
        )),
    ),
    response=(
        F('throttle_time_ms', 'int32'),
        F('error_code', 'int16'),
        F('error_message', 'string', nullable='0+', default=None),
        F('responses', '[]', fields=(
            F('name', 'string'),
            F('partitions', '[]', fields=(
                F('partition_index', 'int32'),
                F('error_code', 'int16'),
                F('error_message', 'string', nullable='0+', default=None),
            )),
        )),
    ),
)

LIST_PARTITION_REASSIGNMENTS = Message(
    key=46, name='ListPartitionReassignments', versions='0', flexible='0+',
    request=(
        F('timeout_ms', 'int32', default=60000),
        F('topics', '[]', nullable='0+', fields=(  # null: every pending reassignment
            F('name', 'string'),
            F('partition_indexes', '[]int32'),
        )),
    ),
    response=(
        F('throttle_time_ms', 'int32'),
        F('error_code', 'int16'),
        F('error_message', 'string', nullable='0+', default=None),
        F('topics', '[]', fields=(
            F('name', 'string'),
            F('partitions', '[]', fields=(
                F('partition_index', 'int32'),
                F('replicas', '[]int32'),
                F('adding_replicas', '[]int32'),
                F('removing_replicas', '[]int32'),
            )),
        )),
    ),
)
