"""DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554), declared as data
(see pylog.protocol.schema).

``mechanism`` is the SCRAM mechanism's number: 0 UNKNOWN, 1 SCRAM-SHA-256,
2 SCRAM-SHA-512. An upsertion carries the salt and the salted password (never the
password); the broker derives the stored and server keys. Field names, types and
version ranges follow the Kafka protocol message specifications.
"""

from pylog.protocol.schema import F, Message

DESCRIBE_USER_SCRAM_CREDENTIALS = Message(
    key=50, name='DescribeUserScramCredentials', versions='0', flexible='0+',
    request=(
        F('users', '[]', nullable='0+', fields=(  # null or empty: every user
            F('name', 'string'),
        )),
    ),
    response=(
        F('throttle_time_ms', 'int32'),
        F('error_code', 'int16'),
        F('error_message', 'string', nullable='0+'),
        F('results', '[]', fields=(
            F('user', 'string'),
            F('error_code', 'int16'),
            F('error_message', 'string', nullable='0+'),
            F('credential_infos', '[]', fields=(
                F('mechanism', 'int8'),
                F('iterations', 'int32'),
            )),
        )),
    ),
)

ALTER_USER_SCRAM_CREDENTIALS = Message(
    key=51, name='AlterUserScramCredentials', versions='0', flexible='0+',
    request=(
        F('deletions', '[]', fields=(
            F('name', 'string'),
            F('mechanism', 'int8'),
        )),
        F('upsertions', '[]', fields=(
            F('name', 'string'),
            F('mechanism', 'int8'),
            F('iterations', 'int32'),
            F('salt', 'bytes'),
            F('salted_password', 'bytes'),
        )),
    ),
    response=(
        F('throttle_time_ms', 'int32'),
        F('results', '[]', fields=(
            F('user', 'string'),
            F('error_code', 'int16'),
            F('error_message', 'string', nullable='0+'),
        )),
    ),
)
