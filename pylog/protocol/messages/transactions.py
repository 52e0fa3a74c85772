"""Schemas of the transaction APIs, declared as data (see pylog.protocol.schema).

Field names, types and version ranges follow the Kafka protocol message specifications:
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, WriteTxnMarkers, TxnOffsetCommit,
DescribeTransactions and ListTransactions.
"""

from pylog.protocol.schema import F, Message

_TXN_TOPIC = (
    F('name', 'string'),
    F('partitions', '[]int32'),
)
_TXN_TOPIC_RESULT = (
    F('name', 'string'),
    F('results_by_partition', '[]', fields=(
        F('partition_index', 'int32'),
        F('partition_error_code', 'int16'),
    )),
)

ADD_PARTITIONS_TO_TXN = Message(
    key=24, name='AddPartitionsToTxn', versions='0-5', flexible='3+',
    request=(
        F('transactions', '[]', '4+', fields=(
            F('transactional_id', 'string', '4+'),
            F('producer_id', 'int64', '4+'),
            F('producer_epoch', 'int16', '4+'),
            F('verify_only', 'bool', '4+', default=False),
            F('topics', '[]', '4+', fields=_TXN_TOPIC),
        )),
        F('v3_and_below_transactional_id', 'string', '0-3'),
        F('v3_and_below_producer_id', 'int64', '0-3'),
        F('v3_and_below_producer_epoch', 'int16', '0-3'),
        F('v3_and_below_topics', '[]', '0-3', fields=_TXN_TOPIC),
    ),
    response=(
        F('throttle_time_ms', 'int32'),
        F('error_code', 'int16', '4+', default=0),
        F('results_by_transaction', '[]', '4+', fields=(
            F('transactional_id', 'string', '4+'),
            F('topic_results', '[]', '4+', fields=_TXN_TOPIC_RESULT),
        )),
        F('results_by_topic_v3_and_below', '[]', '0-3', fields=_TXN_TOPIC_RESULT),
    ),
)

ADD_OFFSETS_TO_TXN = Message(
    key=25, name='AddOffsetsToTxn', versions='0-4', flexible='3+',
    request=(
        F('transactional_id', 'string'),
        F('producer_id', 'int64'),
        F('producer_epoch', 'int16'),
        F('group_id', 'string'),
    ),
    response=(
        F('throttle_time_ms', 'int32'),
        F('error_code', 'int16'),
    ),
)

END_TXN = Message(
    key=26, name='EndTxn', versions='0-5', flexible='3+',
    request=(
        F('transactional_id', 'string'),
        F('producer_id', 'int64'),
        F('producer_epoch', 'int16'),
        F('committed', 'bool'),
    ),
    response=(
        F('throttle_time_ms', 'int32'),
        F('error_code', 'int16'),
        F('producer_id', 'int64', '5+', default=-1),
        F('producer_epoch', 'int16', '5+', default=-1),
    ),
)

WRITE_TXN_MARKERS = Message(
    key=27, name='WriteTxnMarkers', versions='0-1', flexible='1+',
    request=(
        F('markers', '[]', fields=(
            F('producer_id', 'int64'),
            F('producer_epoch', 'int16'),
            F('transaction_result', 'bool'),  # False = ABORT, True = COMMIT
            F('topics', '[]', fields=(
                F('name', 'string'),
                F('partition_indexes', '[]int32'),
            )),
            F('coordinator_epoch', 'int32'),
        )),
    ),
    response=(
        F('markers', '[]', fields=(
            F('producer_id', 'int64'),
            F('topics', '[]', fields=(
                F('name', 'string'),
                F('partitions', '[]', fields=(
                    F('partition_index', 'int32'),
                    F('error_code', 'int16'),
                )),
            )),
        )),
    ),
)

TXN_OFFSET_COMMIT = Message(
    key=28, name='TxnOffsetCommit', versions='0-4', flexible='3+',
    request=(
        F('transactional_id', 'string'),
        F('group_id', 'string'),
        F('producer_id', 'int64'),
        F('producer_epoch', 'int16'),
        F('generation_id', 'int32', '3+', default=-1),
        F('member_id', 'string', '3+', default=''),
        F('group_instance_id', 'string', '3+', nullable='3+', default=None),
        F('topics', '[]', fields=(
            F('name', 'string'),
            F('partitions', '[]', fields=(
                F('partition_index', 'int32'),
                F('committed_offset', 'int64'),
                F('committed_leader_epoch', 'int32', '2+', default=-1),
                F('committed_metadata', 'string', nullable='0+', default=None),
            )),
        )),
    ),
    response=(
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

DESCRIBE_TRANSACTIONS = Message(
    key=65, name='DescribeTransactions', versions='0', flexible='0+',
    request=(
        F('transactional_ids', '[]string'),
    ),
    response=(
        F('throttle_time_ms', 'int32'),
        F('transaction_states', '[]', fields=(
            F('error_code', 'int16'),
            F('transactional_id', 'string'),
            F('transaction_state', 'string'),
            F('transaction_timeout_ms', 'int32'),
            F('transaction_start_time_ms', 'int64'),
            F('producer_id', 'int64'),
            F('producer_epoch', 'int16'),
            F('topics', '[]', fields=(
                F('topic', 'string'),
                F('partitions', '[]int32'),
            )),
        )),
    ),
)

LIST_TRANSACTIONS = Message(
    key=66, name='ListTransactions', versions='0-1', flexible='0+',
    request=(
        F('state_filters', '[]string'),
        F('producer_id_filters', '[]int64'),
        F('duration_filter', 'int64', '1+', default=-1),
    ),
    response=(
        F('throttle_time_ms', 'int32'),
        F('error_code', 'int16'),
        F('unknown_state_filters', '[]string'),
        F('transaction_states', '[]', fields=(
            F('transactional_id', 'string'),
            F('producer_id', 'int64'),
            F('transaction_state', 'string'),
        )),
    ),
)

# DescribeProducers (KIP-664): the active producers of partitions (kafka-transactions.sh
# describe-producers; kafka-python's describe_producers).
DESCRIBE_PRODUCERS = Message(
    key=61, name='DescribeProducers', versions='0', flexible='0+',
    request=(
        F('topics', '[]', fields=(
            F('name', 'string'),
            F('partition_indexes', '[]int32'),
        )),
    ),
    response=(
        F('throttle_time_ms', 'int32'),
        F('topics', '[]', fields=(
            F('name', 'string'),
            F('partitions', '[]', fields=(
                F('partition_index', 'int32'),
                F('error_code', 'int16'),
                F('error_message', 'string', nullable='0+', default=None),
                F('active_producers', '[]', fields=(
                    F('producer_id', 'int64'),
                    F('producer_epoch', 'int32'),
                    F('last_sequence', 'int32', default=-1),
                    F('last_timestamp', 'int64', default=-1),
                    F('coordinator_epoch', 'int32'),
                    F('current_txn_start_offset', 'int64', default=-1),
                )),
            )),
        )),
    ),
)
