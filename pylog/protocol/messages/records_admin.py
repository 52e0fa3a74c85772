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

# DescribeLogDirs (kafka-log-dirs.sh --describe): each log dir's partitions and their sizes.
DESCRIBE_LOG_DIRS = Message(
    key=35, name='DescribeLogDirs', versions='1-4', flexible='2+',
    request=(
        F('topics', '[]', nullable='0+', fields=(  # null: every partition
            F('topic', 'string'),
            F('partitions', '[]int32'),
        )),
    ),
    response=(
        F('throttle_time_ms', 'int32'),
        F('error_code', 'int16', '3+', default=0),
        F('results', '[]', fields=(
            F('error_code', 'int16'),
            F('log_dir', 'string'),
            F('topics', '[]', fields=(
                F('name', 'string'),
                F('partitions', '[]', fields=(
                    F('partition_index', 'int32'),
                    F('partition_size', 'int64'),
                    F('offset_lag', 'int64'),
                    F('is_future_key', 'bool', default=False),
                )),
            )),
            F('total_bytes', 'int64', '4+', default=-1),
            F('usable_bytes', 'int64', '4+', default=-1),
        )),
    ),
)
