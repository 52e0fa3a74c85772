"""Schema of DeleteRecords (api key 21), declared as data (see pylog.protocol.schema).

Field names, types and version ranges follow Kafka's DeleteRecords request and response
JSON specifications: versions 0-2, version 2 the first flexible one.
"""

from pylog.protocol.schema import F, Message

DELETE_RECORDS = Message(
    key=21, name='DeleteRecords', versions='0-2', flexible='2+',
    request=(
        F('topics', '[]', fields=(
            F('name', 'string'),
            F('partitions', '[]', fields=(
                F('partition_index', 'int32'),
                F('offset', 'int64'),
            )),
        )),
        F('timeout_ms', 'int32'),
    ),
    response=(
        F('throttle_time_ms', 'int32'),
        F('topics', '[]', fields=(
            F('name', 'string'),
            F('partitions', '[]', fields=(
                F('partition_index', 'int32'),
                F('low_watermark', 'int64'),
                F('error_code', 'int16'),
            )),
        )),
    ),
)
