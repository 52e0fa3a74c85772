"""Schemas of ApiVersions and Metadata, declared as data (see pylog.protocol.schema).

Field names, types and version ranges follow the Kafka protocol message specifications.
"""

from pylog.protocol.schema import F, Message

API_VERSIONS = Message(
    key=18, name='ApiVersions', versions='0-4', flexible='3+',
    request=(
        F('client_software_name', 'string', '3+'),
        F('client_software_version', 'string', '3+'),
    ),
    response=(
        F('error_code', 'int16'),
        F('api_keys', '[]', fields=(
            F('api_key', 'int16'),
            F('min_version', 'int16'),
            F('max_version', 'int16'),
        )),
        F('throttle_time_ms', 'int32', '1+'),
        F('supported_features', '[]', '3+', tag=0, tagged='3+', fields=(
            F('name', 'string', '3+'),
            F('min_version', 'int16', '3+'),
            F('max_version', 'int16', '3+'),
        )),
        F('finalized_features_epoch', 'int64', '3+', default=-1, tag=1, tagged='3+'),
        F('finalized_features', '[]', '3+', tag=2, tagged='3+', fields=(
            F('name', 'string', '3+'),
            F('max_version_level', 'int16', '3+'),
            F('min_version_level', 'int16', '3+'),
        )),
        F('zk_migration_ready', 'bool', '3+', default=False, tag=3, tagged='3+'),
    ),
)

METADATA = Message(
    key=3, name='Metadata', versions='0-12', flexible='9+',
    request=(
        F('topics', '[]', nullable='1+', fields=(
            F('topic_id', 'uuid', '10+'),
            F('name', 'string', nullable='10+'),
        )),
        F('allow_auto_topic_creation', 'bool', '4+', default=True),
        F('include_cluster_authorized_operations', 'bool', '8-10'),
        F('include_topic_authorized_operations', 'bool', '8+'),
    ),
    response=(
        F('throttle_time_ms', 'int32', '3+'),
        F('brokers', '[]', fields=(
            F('node_id', 'int32'),
            F('host', 'string'),
            F('port', 'int32'),
            F('rack', 'string', '1+', nullable='1+', default=None),
        )),
        F('cluster_id', 'string', '2+', nullable='2+', default=None),
        F('controller_id', 'int32', '1+', default=-1),
        F('topics', '[]', fields=(
            F('error_code', 'int16'),
            F('name', 'string', nullable='12+'),
            F('topic_id', 'uuid', '10+'),
            F('is_internal', 'bool', '1+', default=False),
            F('partitions', '[]', fields=(
                F('error_code', 'int16'),
                F('partition_index', 'int32'),
                F('leader_id', 'int32'),
                F('leader_epoch', 'int32', '7+', default=-1),
                F('replica_nodes', '[]int32'),
                F('isr_nodes', '[]int32'),
                F('offline_replicas', '[]int32', '5+'),
            )),
            F('topic_authorized_operations', 'int32', '8+', default=-2147483648),
        )),
        F('cluster_authorized_operations', 'int32', '8-10', default=-2147483648),
    ),
)

DESCRIBE_CLUSTER = Message(
    key=60, name='DescribeCluster', versions='0-2', flexible='0+',
    request=(
        F('include_cluster_authorized_operations', 'bool'),
        F('endpoint_type', 'int8', '1+', default=1),  # 1 brokers, 2 controllers (KIP-919)
        F('include_fenced_brokers', 'bool', '2+'),
    ),
    response=(
        F('throttle_time_ms', 'int32'),
        F('error_code', 'int16'),
        F('error_message', 'string', nullable='0+', default=None),
        F('endpoint_type', 'int8', '1+', default=1),
        F('cluster_id', 'string'),
        F('controller_id', 'int32', default=-1),
        F('brokers', '[]', fields=(
            F('broker_id', 'int32'),
            F('host', 'string'),
            F('port', 'int32'),
            F('rack', 'string', nullable='0+', default=None),
            F('is_fenced', 'bool', '2+'),
        )),
        F('cluster_authorized_operations', 'int32', default=-2147483648),
    ),
)

# DescribeTopicPartitions (KIP-966): Metadata's topics with partitions paged by a cursor.
_CURSOR = (
    F('topic_name', 'string'),
    F('partition_index', 'int32'),
)

DESCRIBE_TOPIC_PARTITIONS = Message(
    key=75, name='DescribeTopicPartitions', versions='0', flexible='0+',
    request=(
        F('topics', '[]', fields=(
            F('name', 'string'),
        )),
        F('response_partition_limit', 'int32', default=2000),
        F('cursor', '{}', nullable='0+', default=None, fields=_CURSOR),
    ),
    response=(
        F('throttle_time_ms', 'int32'),
        F('topics', '[]', fields=(
            F('error_code', 'int16'),
            F('name', 'string', nullable='0+'),
            F('topic_id', 'uuid'),
            F('is_internal', 'bool', default=False),
            F('partitions', '[]', fields=(
                F('error_code', 'int16'),
                F('partition_index', 'int32'),
                F('leader_id', 'int32'),
                F('leader_epoch', 'int32', default=-1),
                F('replica_nodes', '[]int32'),
                F('isr_nodes', '[]int32'),
                # None without eligible leader replicas (KIP-966): empty, as Kafka answers
                F('eligible_leader_replicas', '[]int32', nullable='0+', default=[]),
                F('last_known_elr', '[]int32', nullable='0+', default=[]),
                F('offline_replicas', '[]int32'),
            )),
            F('topic_authorized_operations', 'int32', default=-2147483648),
        )),
        F('next_cursor', '{}', nullable='0+', default=None, fields=_CURSOR),
    ),
)
