"""Schemas of the admin APIs: CreateTopics, DeleteTopics, DescribeConfigs, AlterConfigs,
IncrementalAlterConfigs, SASL handshake, declared as data (see pylog.protocol.schema).

The numbers inside the config APIs (resource types, config sources, config types,
incremental operations) are in :mod:`pylog.protocol.configs`.

Field names, types and version ranges follow the Kafka protocol message specifications.
"""

from pylog.protocol.schema import F, Message

CREATE_TOPICS = Message(
    key=19, name='CreateTopics', versions='0-7', flexible='5+',
    request=(
        F('topics', '[]', fields=(
            F('name', 'string'),
            F('num_partitions', 'int32'),
            F('replication_factor', 'int16'),
            F('assignments', '[]', fields=(
                F('partition_index', 'int32'),
                F('broker_ids', '[]int32'),
            )),
            F('configs', '[]', fields=(
                F('name', 'string'),
                F('value', 'string', nullable='0+'),
            )),
        )),
        F('timeout_ms', 'int32', default=60000),
        F('validate_only', 'bool', '1+', default=False),
    ),
    response=(
        F('throttle_time_ms', 'int32', '2+'),
        F('topics', '[]', fields=(
            F('name', 'string'),
            F('topic_id', 'uuid', '7+'),
            F('error_code', 'int16'),
            F('error_message', 'string', '1+', nullable='0+'),
            F('topic_config_error_code', 'int16', '5+', tag=0, tagged='5+'),
            F('num_partitions', 'int32', '5+', default=-1),
            F('replication_factor', 'int16', '5+', default=-1),
            F('configs', '[]', '5+', nullable='5+', fields=(
                F('name', 'string', '5+'),
                F('value', 'string', '5+', nullable='5+'),
                F('read_only', 'bool', '5+'),
                F('config_source', 'int8', '5+', default=-1),
                F('is_sensitive', 'bool', '5+'),
            )),
        )),
    ),
)

DELETE_TOPICS = Message(
    key=20, name='DeleteTopics', versions='0-6', flexible='4+',
    request=(
        F('topics', '[]', '6+', fields=(
            F('name', 'string', '6+', nullable='6+', default=None),
            F('topic_id', 'uuid', '6+'),
        )),
        F('topic_names', '[]string', '0-5'),
        F('timeout_ms', 'int32'),
    ),
    response=(
        F('throttle_time_ms', 'int32', '1+'),
        F('responses', '[]', fields=(
            F('name', 'string', nullable='6+'),
            F('topic_id', 'uuid', '6+'),
            F('error_code', 'int16'),
            F('error_message', 'string', '5+', nullable='5+', default=None),
        )),
    ),
)

DESCRIBE_CONFIGS = Message(
    key=32, name='DescribeConfigs', versions='0-4', flexible='4+',
    request=(
        F('resources', '[]', fields=(
            F('resource_type', 'int8'),
            F('resource_name', 'string'),
            F('configuration_keys', '[]string', nullable='0+'),
        )),
        F('include_synonyms', 'bool', '1+', default=False),
        F('include_documentation', 'bool', '3+', default=False),
    ),
    response=(
        F('throttle_time_ms', 'int32'),
        F('results', '[]', fields=(
            F('error_code', 'int16'),
            F('error_message', 'string', nullable='0+'),
            F('resource_type', 'int8'),
            F('resource_name', 'string'),
            F('configs', '[]', fields=(
                F('name', 'string'),
                F('value', 'string', nullable='0+'),
                F('read_only', 'bool'),
                F('is_default', 'bool', '0'),
                F('config_source', 'int8', '1+', default=-1),
                F('is_sensitive', 'bool'),
                F('synonyms', '[]', '1+', fields=(
                    F('name', 'string', '1+'),
                    F('value', 'string', '1+', nullable='0+'),
                    F('source', 'int8', '1+'),
                )),
                F('config_type', 'int8', '3+', default=0),
                F('documentation', 'string', '3+', nullable='0+'),
            )),
        )),
    ),
)

# The answer of both alter APIs: one error per resource.
_ALTER_CONFIGS_RESPONSE = (
    F('throttle_time_ms', 'int32'),
    F('responses', '[]', fields=(
        F('error_code', 'int16'),
        F('error_message', 'string', nullable='0+', default=None),
        F('resource_type', 'int8'),
        F('resource_name', 'string'),
    )),
)

ALTER_CONFIGS = Message(
    key=33, name='AlterConfigs', versions='0-2', flexible='2+',
    request=(
        F('resources', '[]', fields=(
            F('resource_type', 'int8'),
            F('resource_name', 'string'),
            F('configs', '[]', fields=(
                F('name', 'string'),
                F('value', 'string', nullable='0+'),
            )),
        )),
        F('validate_only', 'bool', default=False),
    ),
    response=_ALTER_CONFIGS_RESPONSE,
)

INCREMENTAL_ALTER_CONFIGS = Message(
    key=44, name='IncrementalAlterConfigs', versions='0-1', flexible='1+',
    request=(
        F('resources', '[]', fields=(
            F('resource_type', 'int8'),
            F('resource_name', 'string'),
            F('configs', '[]', fields=(
                F('name', 'string'),
                F('config_operation', 'int8'),
                F('value', 'string', nullable='0+'),
            )),
        )),
        F('validate_only', 'bool', default=False),
    ),
    response=_ALTER_CONFIGS_RESPONSE,
)

SASL_HANDSHAKE = Message(
    key=17, name='SaslHandshake', versions='0-1', flexible='none',
    request=(
        F('mechanism', 'string'),
    ),
    response=(
        F('error_code', 'int16'),
        F('mechanisms', '[]string'),
    ),
)

SASL_AUTHENTICATE = Message(
    key=36, name='SaslAuthenticate', versions='0-2', flexible='2+',
    request=(
        F('auth_bytes', 'bytes'),
    ),
    response=(
        F('error_code', 'int16'),
        F('error_message', 'string', nullable='0+'),
        F('auth_bytes', 'bytes'),
        F('session_lifetime_ms', 'int64', '1+', default=0),
    ),
)
