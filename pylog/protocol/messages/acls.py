"""Schemas of the ACL APIs: DescribeAcls, CreateAcls and DeleteAcls, declared as data (see
pylog.protocol.schema).

Field names, types and version ranges follow Kafka's DescribeAcls/CreateAcls/DeleteAcls
request and response JSON specifications: version 1 adds the pattern type, version 2 is
the first flexible one, version 3 adds the User resource type. The numbers (resource
types, pattern types, operations, permissions) are in :mod:`pylog.security.acls`.
"""

from pylog.protocol.schema import F, Message

LITERAL = 3  # PatternType.LITERAL: what version 0 means


def _filter_fields() -> tuple[F, ...]:
    return (
        F('resource_type_filter', 'int8'),
        F('resource_name_filter', 'string', nullable='0+'),
        F('pattern_type_filter', 'int8', '1+', default=LITERAL),
        F('principal_filter', 'string', nullable='0+'),
        F('host_filter', 'string', nullable='0+'),
        F('operation', 'int8'),
        F('permission_type', 'int8'),
    )


DESCRIBE_ACLS = Message(
    key=29, name='DescribeAcls', versions='0-3', flexible='2+',
    request=_filter_fields(),
    response=(
        F('throttle_time_ms', 'int32'),
        F('error_code', 'int16'),
        F('error_message', 'string', nullable='0+', default=None),
        F('resources', '[]', fields=(
            F('resource_type', 'int8'),
            F('resource_name', 'string'),
            F('pattern_type', 'int8', '1+', default=LITERAL),
            F('acls', '[]', fields=(
                F('principal', 'string'),
                F('host', 'string'),
                F('operation', 'int8'),
                F('permission_type', 'int8'),
            )),
        )),
    ),
)

CREATE_ACLS = Message(
    key=30, name='CreateAcls', versions='0-3', flexible='2+',
    request=(
        F('creations', '[]', fields=(
            F('resource_type', 'int8'),
            F('resource_name', 'string'),
            F('resource_pattern_type', 'int8', '1+', default=LITERAL),
            F('principal', 'string'),
            F('host', 'string'),
            F('operation', 'int8'),
            F('permission_type', 'int8'),
        )),
    ),
    response=(
        F('throttle_time_ms', 'int32'),
        F('results', '[]', fields=(
            F('error_code', 'int16'),
            F('error_message', 'string', nullable='0+', default=None),
        )),
    ),
)

DELETE_ACLS = Message(
    key=31, name='DeleteAcls', versions='0-3', flexible='2+',
    request=(
        F('filters', '[]', fields=_filter_fields()),
    ),
    response=(
        F('throttle_time_ms', 'int32'),
        F('filter_results', '[]', fields=(
            F('error_code', 'int16'),
            F('error_message', 'string', nullable='0+', default=None),
            F('matching_acls', '[]', fields=(
                F('error_code', 'int16', default=0),
                F('error_message', 'string', nullable='0+', default=None),
                F('resource_type', 'int8'),
                F('resource_name', 'string'),
                F('pattern_type', 'int8', '1+', default=LITERAL),
                F('principal', 'string'),
                F('host', 'string'),
                F('operation', 'int8'),
                F('permission_type', 'int8'),
            )),
        )),
    ),
)
